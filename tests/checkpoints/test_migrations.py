"""Threads written by older schema versions resume correctly (INVARIANTS I4, I7).

Fixture databases are built by tests/fixtures/build_fixtures.py and committed; each
schema version keeps its file forever.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from graph.agent import build_graph
from graph.checkpoints.load import check_values
from graph.store import open_store
from nodes.state import SCHEMA_VERSION
from tests.conftest import ROOT, SqliteBackend, run_cli
from tests.fakes import ScriptedModel

FIXTURES = ROOT / "tests" / "fixtures"


OLD_VERSIONS = list(range(1, SCHEMA_VERSION))


@pytest.fixture(params=OLD_VERSIONS, ids=[f"v{v}" for v in OLD_VERSIONS])
def old(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A copy of an older version's fixture database, and its thread-id prefix."""
    version = request.param
    target = tmp_path / f"v{version}.sqlite"
    shutil.copyfile(FIXTURES / f"v{version}.sqlite", target)
    target.chmod(0o600)
    return target, f"v{version}"


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


def test_old_thread_between_steps_resumes_with_the_right_next_request(old) -> None:
    v1_db, v = old
    assert stored_thread(v1_db, f"{v}_ready")["schema_version"] == int(v[1:])
    requests, factory = recording_demo()
    out = run_cli(["--thread", f"{v}_ready", "--once", "--db", str(v1_db)], model_factory=factory)
    assert (out["status"], out["attempts"], out["exit_code"]) == ("done", 2, 0)
    assert "[ship-01]" in out["answer"]
    (request,) = requests
    assert [m["role"] for m in request] == ["system", "user", "assistant", "tool"]
    assert request[-1]["tool_call_id"] == "call_demo_1"
    migrated = stored_thread(v1_db, f"{v}_ready")
    assert migrated["schema_version"] == SCHEMA_VERSION and migrated["graph"].startswith("nodes=")
    assert migrated["workspace"] is None and migrated["context_tokens"] > 0
    assert SqliteBackend(v1_db).ledger_row(f"{v}_ready") == (2, 2, 4)


def test_old_checkpoints_stay_readable_for_history(old) -> None:
    v1_db, v = old
    run_cli(["--thread", f"{v}_ready", "--once", "--db", str(v1_db)])
    with open_store(str(v1_db), create=False) as store:
        graph = build_graph(store.checkpointer)
        versions = []
        for snapshot in graph.get_state_history({"configurable": {"thread_id": f"{v}_ready"}}):
            if snapshot.next != ("__start__",):
                versions.append(snapshot.values["thread"]["schema_version"])
                check_values(snapshot.values, tuple(snapshot.next), "history", f"{v}_ready")
    assert int(v[1:]) in versions and SCHEMA_VERSION in versions


def test_old_finished_thread_reports_its_answer_without_a_request(old) -> None:
    v1_db, v = old
    model = ScriptedModel([])
    out = run_cli(["--thread", f"{v}_done", "--db", str(v1_db)],
                  model_factory=lambda m, s: model)
    assert (out["status"], out["attempts"], out["exit_code"]) == ("done", 2, 0)
    assert "[ship-01]" in out["answer"] and model.requests == []


def test_old_thread_that_crashed_in_reason_counts_a_new_attempt(old) -> None:
    v1_db, v = old
    assert SqliteBackend(v1_db).ledger_row(f"{v}_crashed") == (1, 1, 4)
    requests, factory = recording_demo()
    out = run_cli(["--thread", f"{v}_crashed", "--once", "--db", str(v1_db)], model_factory=factory)
    assert (out["status"], out["attempts"], len(requests)) == ("ready", 2, 1)
    assert SqliteBackend(v1_db).ledger_row(f"{v}_crashed") == (2, 2, 4)
    assert stored_thread(v1_db, f"{v}_crashed")["schema_version"] == SCHEMA_VERSION


def test_old_thread_keeps_its_identity_checks(old) -> None:
    v1_db, v = old
    out = run_cli(["--thread", f"{v}_ready", "--task", "Something else", "--db", str(v1_db)])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")


def test_every_schema_version_before_the_current_one_has_a_fixture() -> None:
    for version in range(1, SCHEMA_VERSION):
        assert (FIXTURES / f"v{version}.sqlite").exists(), version
