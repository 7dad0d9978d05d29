"""Threads written by older schema versions resume correctly (INVARIANTS I4, I7).

Fixture databases are built by tests/fixtures/build_fixtures.py and committed; each
schema version keeps its file forever.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from graph.factory import build_graph
from graph.loading import check_values
from graph.state import SCHEMA_VERSION
from graph.storage import open_store
from tests.conftest import ROOT, SqliteBackend, run_cli
from tests.fakes import ScriptedModel

FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def v1_db(tmp_path: Path) -> Path:
    target = tmp_path / "v1.sqlite"
    shutil.copyfile(FIXTURES / "v1.sqlite", target)
    target.chmod(0o600)
    return target


def recording_demo():
    from nodes.demo_model import OfflineDemoModel

    demo, requests = OfflineDemoModel(), []

    class Recorder:
        def complete(self, messages, tools):
            requests.append(messages)
            return demo.complete(messages, tools)

    return requests, (lambda model_id, settings: Recorder())


def stored_thread(db: Path, thread_id: str) -> dict:
    with open_store(str(db), create=False) as store:
        graph = build_graph(store.checkpointer)
        return graph.get_state({"configurable": {"thread_id": thread_id}}).values["thread"]


def test_v1_thread_between_steps_resumes_with_the_right_next_request(v1_db: Path) -> None:
    assert stored_thread(v1_db, "v1_ready")["schema_version"] == 1
    requests, factory = recording_demo()
    out = run_cli(["--thread", "v1_ready", "--once", "--db", str(v1_db)], model_factory=factory)
    assert (out["status"], out["attempts"], out["exit_code"]) == ("done", 2, 0)
    assert "[ship-01]" in out["answer"]
    (request,) = requests
    assert [m["role"] for m in request] == ["system", "user", "assistant", "tool"]
    assert request[-1]["tool_call_id"] == "call_demo_1"
    migrated = stored_thread(v1_db, "v1_ready")
    assert migrated["schema_version"] == SCHEMA_VERSION and migrated["graph"].startswith("nodes=")
    assert SqliteBackend(v1_db).ledger_row("v1_ready") == (2, 2, 4)


def test_v1_older_checkpoints_stay_readable_for_history(v1_db: Path) -> None:
    run_cli(["--thread", "v1_ready", "--once", "--db", str(v1_db)])
    with open_store(str(v1_db), create=False) as store:
        graph = build_graph(store.checkpointer)
        versions = []
        for snapshot in graph.get_state_history({"configurable": {"thread_id": "v1_ready"}}):
            if snapshot.next != ("__start__",):
                versions.append(snapshot.values["thread"]["schema_version"])
                check_values(snapshot.values, tuple(snapshot.next), "history")
    assert 1 in versions and SCHEMA_VERSION in versions


def test_v1_finished_thread_reports_its_answer_without_a_request(v1_db: Path) -> None:
    model = ScriptedModel([])
    out = run_cli(["--thread", "v1_done", "--db", str(v1_db)],
                  model_factory=lambda m, s: model)
    assert (out["status"], out["attempts"], out["exit_code"]) == ("done", 2, 0)
    assert "[ship-01]" in out["answer"] and model.requests == []


def test_v1_thread_that_crashed_in_reason_counts_a_new_attempt(v1_db: Path) -> None:
    assert SqliteBackend(v1_db).ledger_row("v1_crashed") == (1, 1, 4)
    requests, factory = recording_demo()
    out = run_cli(["--thread", "v1_crashed", "--once", "--db", str(v1_db)], model_factory=factory)
    assert (out["status"], out["attempts"], len(requests)) == ("ready", 2, 1)
    assert SqliteBackend(v1_db).ledger_row("v1_crashed") == (2, 2, 4)
    assert stored_thread(v1_db, "v1_crashed")["schema_version"] == SCHEMA_VERSION


def test_v1_thread_keeps_its_identity_checks(v1_db: Path) -> None:
    out = run_cli(["--thread", "v1_ready", "--task", "Something else", "--db", str(v1_db)])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")


def test_every_schema_version_before_the_current_one_has_a_fixture() -> None:
    for version in range(1, SCHEMA_VERSION):
        assert (FIXTURES / f"v{version}.sqlite").exists(), version
