"""The main job in-process: budget, failures, identity, resume (graph.step.advance via graph.run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graph.errors import ExitCode
from graph.store import open_store
from tests.conftest import SqliteBackend, run_cli
from tests.fakes import NeverFinishes, ScriptedModel, answer_reply, timeout_error, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def factory(model):
    return lambda model_id, settings: model


def test_demo_task_is_done_in_two_once_invocations(backend) -> None:
    first = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    assert (first["status"], first["attempts"], first["exit_code"]) == ("ready", 1, 0)
    assert first["answer"] is None and first["review_required"] is False
    second = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert (second["status"], second["attempts"], second["exit_code"]) == ("done", 2, 0)
    assert "[ship-01]" in second["answer"] and second["review_required"] is True
    assert backend.ledger_row("t1") == (2, 2, 4)
    with open_store(backend.db, create=False, read_only=True) as store:
        reasons = [r for r in store.log.rows("t1") if r["kind"] == "reason"]
        assert [r["attempt"] for r in reasons] == [1, 2]
        assert store.log.used_tokens("t1") == second["usage"]["total_tokens"]
    again = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert again["exit_code"] == 0 and again["attempts"] == 2  # a done thread is never advanced
    assert backend.ledger_row("t1") == (2, 2, 4)


def test_a_thread_held_by_another_writer_exits_busy_without_counting(backend) -> None:
    assert run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])["exit_code"] == 0
    before = backend.ledger_row("t1")
    with open_store(backend.db, create=False) as other, other.locks.hold("t1"):
        out = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert out["exit_code"] == ExitCode.BUSY == 5 and out["error_code"] == "busy"
    assert backend.ledger_row("t1") == before


def test_without_once_steps_until_done(backend) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("done", 2)


def test_never_finishing_model_stops_at_exactly_four_requests(backend) -> None:
    model = NeverFinishes()
    codes = []
    for i in range(6):
        argv = ["--thread", "t1", "--once", "--db", backend.db] + (["--task", TASK] if i == 0 else [])
        out = run_cli(argv, model_factory=factory(model))
        codes.append(out["exit_code"])
    assert len(model.requests) == 4
    assert codes == [0, 0, 0, 3, 3, 3]
    assert out["status"] == "exhausted" and out["stop_reason"] == "budget"
    assert backend.ledger_row("t1") == (4, 4, 4)


def test_exhausted_thread_makes_no_request_without_once(backend) -> None:
    model = NeverFinishes()
    out = run_cli(["--thread", "t1", "--task", TASK, "--db", backend.db], model_factory=factory(model))
    assert (out["status"], out["exit_code"], len(model.requests)) == ("exhausted", 3, 4)
    out = run_cli(["--thread", "t1", "--db", backend.db], model_factory=factory(model))
    assert (out["exit_code"], len(model.requests)) == (3, 4)


def test_timeout_counts_the_attempt_and_next_run_counts_a_new_one(backend) -> None:
    model = ScriptedModel([timeout_error(), tool_call_reply("c1"), answer_reply("done [ship-01]")])
    out = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db],
                  model_factory=factory(model))
    assert (out["exit_code"], out["error_code"], out["status"]) == (6, "timeout", "ready")
    # Reloaded from disk by a fresh store: the failed request is counted.
    assert backend.ledger_row("t1") == (1, 1, 4)
    assert run_cli(["--thread", "t1", "--once", "--db", backend.db],
                   model_factory=factory(model))["attempts"] == 2
    assert backend.ledger_row("t1") == (2, 2, 4)
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db], model_factory=factory(model))
    assert (out["status"], out["attempts"]) == ("done", 3)
    assert len(model.requests) <= backend.ledger_row("t1")[0]


def test_failed_last_attempt_exhausts_the_thread_at_once(backend) -> None:
    model = ScriptedModel([timeout_error()] * 4)
    for i in range(4):
        argv = ["--thread", "t1", "--once", "--db", backend.db] + (["--task", TASK] if i == 0 else [])
        out = run_cli(argv, model_factory=factory(model))
    assert (out["status"], out["exit_code"], out["error_code"]) == ("exhausted", 3, "timeout")
    assert len(model.requests) == 4


def test_task_mismatch_is_refused_and_changes_nothing(backend) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    before = backend.fingerprint()
    out = run_cli(["--thread", "t1", "--task", "Another task", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")
    assert backend.fingerprint() == before


def test_model_mismatch_is_refused_and_changes_nothing(backend, monkeypatch) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    before = backend.fingerprint()
    out = run_cli(["--thread", "t1", "--model", "other-model", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
    monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-large")
    out = run_cli(["--thread", "t1", "--live", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")
    assert backend.fingerprint() == before


def test_same_task_on_an_existing_thread_resumes_and_never_restarts(backend) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    out = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("done", 2)
    out = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("done", 2)
    assert backend.ledger_row("t1") == (2, 2, 4)


def test_resuming_a_missing_thread_is_refused(backend) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    out = run_cli(["--thread", "nope", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "no_such_thread")
    assert backend.ledger_row("nope") is None


def test_resuming_in_a_missing_file_does_not_create_it(tmp_path: Path) -> None:
    missing = tmp_path / "typo.sqlite"
    out = run_cli(["--thread", "t1", "--once", "--db", str(missing)])
    assert (out["exit_code"], out["error_code"]) == (4, "no_such_file")
    assert list(tmp_path.iterdir()) == []


def test_paid_model_without_live_is_a_usage_error_and_counts_nothing(backend) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--model", "mandapi-large", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert backend.ledger_row("t1") is None


def test_live_without_key_is_a_usage_error_before_anything_is_created(tmp_path: Path) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--db", str(tmp_path / "x.sqlite")])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert "MANDAPI_API_KEY" in out["error"]
    assert not (tmp_path / "x.sqlite").exists()


def test_live_thread_cannot_continue_without_live(backend, monkeypatch) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
    model = ScriptedModel([tool_call_reply("c1")])
    run_cli(["--thread", "t1", "--task", TASK, "--live", "--model", "mandapi-large", "--once",
             "--db", backend.db], model_factory=factory(model))
    before = backend.fingerprint()
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert backend.fingerprint() == before and backend.ledger_row("t1") == (1, 1, 4)


def test_bad_thread_ids_are_usage_errors(sqlite_db: Path) -> None:
    for bad in ["", "a b", "x" * 129, "a/b", "ä", "a;b", "a\nb"]:
        out = run_cli(["--thread", bad, "--task", TASK, "--db", str(sqlite_db)])
        assert (out["exit_code"], out["error_code"]) == (2, "usage"), bad
    assert not sqlite_db.exists()
    ok = run_cli(["--thread", "A.b_c:d-" + "x" * 120, "--task", TASK, "--once", "--db", str(sqlite_db)])
    assert ok["exit_code"] == 0


def test_database_location_comes_from_graph_db(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "from-env.sqlite"
    monkeypatch.setenv("GRAPH_DB", str(target))
    assert run_cli(["--thread", "t1", "--task", TASK, "--once"])["exit_code"] == 0
    assert SqliteBackend(target).ledger_row("t1") == (1, 1, 4)


def test_new_database_files_are_private(sqlite_db: Path) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", str(sqlite_db)])
    assert (out["exit_code"], out["status"]) == (0, "ready")
    assert sqlite_db.exists()
    for path in sqlite_db.parent.iterdir():
        assert path.stat().st_mode & 0o077 == 0, path


def test_files_left_by_a_killed_creator_are_swept(sqlite_db: Path) -> None:
    stale = sqlite_db.parent / f".{sqlite_db.name}.999999.creating"
    stale.write_bytes(b"half made")
    out = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", str(sqlite_db)])
    assert out["exit_code"] == 0 and not stale.exists()


@pytest.mark.parametrize("flags", [["--task", "another task"], ["--model", "other-model"],
                                   ["--max-attempts", "9"]])
def test_cancel_with_flags_of_another_thread_is_refused_and_cancels_nothing(
    sqlite_db, flags: list[str]
) -> None:
    run_cli(["--thread", "c", "--task", "How long does shipping take?", "--once",
             "--db", str(sqlite_db)])
    out = run_cli(["--thread", "c", "--cancel", *flags, "--db", str(sqlite_db)])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch"), out
    assert run_cli(["--thread", "c", "--db", str(sqlite_db)])["status"] != "cancelled"
