"""Retention deletes only what its rules select, whole; cancel stops a thread for good (I10)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from graph.errors import UsageError
from graph.prune import main as prune_main
from graph.retention import parse_age, prune, select
from graph.storage import open_store
from tests.conftest import run_cli
from tests.fakes import NeverFinishes

TASK = "How long does shipping take at the demo shop?"


def backdate(backend, thread_id: str, days: float) -> None:
    when = (datetime.now(UTC) - timedelta(days=days)).isoformat()
    backend.update_ledger(thread_id, updated_at=when)


def make_threads(backend) -> None:
    """done_old, done_new, exhausted_old, exhausted_mid, cancelled_old, ready_old."""
    for name in ("done_old", "done_new"):
        run_cli(["--thread", name, "--task", TASK, "--db", backend.db])
    for name in ("exhausted_old", "exhausted_mid"):
        model = NeverFinishes()
        run_cli(["--thread", name, "--task", TASK, "--db", backend.db],
                model_factory=lambda m, s, model=model: model)
    run_cli(["--thread", "cancelled_old", "--task", TASK, "--once", "--db", backend.db])
    assert run_cli(["--thread", "cancelled_old", "--cancel", "--db", backend.db])["exit_code"] == 0
    run_cli(["--thread", "ready_old", "--task", TASK, "--once", "--db", backend.db])
    for name, days in (("done_old", 2), ("done_new", 0.5), ("exhausted_old", 8),
                       ("exhausted_mid", 3), ("cancelled_old", 8), ("ready_old", 400)):
        backdate(backend, name, days)


def test_prune_deletes_only_what_the_rules_select(backend) -> None:
    make_threads(backend)
    with open_store(backend.db, create=False) as store:
        chosen, notes = select(store, completed=timedelta(hours=24), failed=timedelta(days=7))
        assert sorted(c.thread_id for c in chosen) == ["cancelled_old", "done_old", "exhausted_old"]
        assert notes == []
        report = prune(store, chosen)
    assert sorted(report["pruned"]) == ["cancelled_old", "done_old", "exhausted_old"]
    for gone in report["pruned"]:
        out = run_cli(["--thread", gone, "--task", TASK, "--db", backend.db])
        assert (out["exit_code"], out["error_code"]) == (4, "pruned")
        assert backend.ledger_row(gone) is None
    for kept in ("done_new", "exhausted_mid", "ready_old"):
        assert backend.ledger_row(kept) is not None
    assert run_cli(["--thread", "ready_old", "--once", "--db", backend.db])["status"] == "done"


def test_zero_age_selects_every_finished_thread_but_never_a_live_one(backend) -> None:
    make_threads(backend)
    before = {t: backend.ledger_row(t) for t in ("ready_old",)}
    assert prune_main(["--db", backend.db, "--completed", "0s", "--failed", "0s"]) == 0
    assert backend.ledger_row("ready_old") == before["ready_old"]
    for gone in ("done_old", "done_new", "exhausted_old", "exhausted_mid", "cancelled_old"):
        assert backend.ledger_row(gone) is None


def test_dry_run_changes_nothing(backend, capsys) -> None:
    make_threads(backend)
    before = backend.fingerprint()
    assert prune_main(["--db", backend.db, "--completed", "0s", "--dry-run"]) == 0
    assert "would prune done_old" in capsys.readouterr().out
    assert backend.fingerprint() == before


def test_a_crash_between_the_two_commits_leaves_the_thread_gone(backend, monkeypatch) -> None:
    make_threads(backend)
    with open_store(backend.db, create=False) as store:
        chosen, _ = select(store, completed=timedelta(hours=24), failed=timedelta(days=7))

        def crash(thread_id: str) -> None:
            raise KeyboardInterrupt("killed between the tombstone and delete_thread")

        monkeypatch.setattr(store.checkpointer, "delete_thread", crash)
        with pytest.raises(KeyboardInterrupt):
            prune(store, chosen[:1])
    gone = chosen[0].thread_id
    out = run_cli(["--thread", gone, "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "pruned")
    monkeypatch.undo()
    with open_store(backend.db, create=False) as store:
        assert prune(store, [])["swept"] == 1


def test_restart_pruned_starts_anew_on_purpose_only(backend) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--db", backend.db])
    prune_main(["--db", backend.db, "--completed", "0s"])
    out = run_cli(["--thread", "t1", "--restart-pruned", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    out = run_cli(["--thread", "t1", "--task", TASK, "--restart-pruned", "--once", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("ready", 1)


@pytest.mark.parametrize("at", ["tools", "reason"])
def test_cancel_stops_the_thread_for_good(backend, at: str) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    if at == "reason":  # as if a request failed and the thread waits at budget -> reason
        backend.update_ledger("t1", attempts=2)
    out = run_cli(["--thread", "t1", "--cancel", "--db", backend.db])
    assert (out["exit_code"], out["status"], out["_next"]) == (0, "cancelled", [])
    before = backend.fingerprint()
    for argv in ([], ["--once"], ["--task", TASK]):
        out = run_cli(["--thread", "t1", "--db", backend.db, *argv])
        assert (out["exit_code"], out["error_code"]) == (4, "cancelled")
    row = backend.ledger_row("t1")
    assert backend.fingerprint() == before and row[1] == 1
    # Even the graph invoked directly (as from a notebook) never counts again.
    from graph.factory import build_graph
    from nodes.context import StepContext
    from tests.fakes import ScriptedModel

    with open_store(backend.db, create=False) as store:
        graph = build_graph(store.checkpointer)
        graph.invoke(None, {"configurable": {"thread_id": "t1"}},
                     context=StepContext("t1", store.ledger, ScriptedModel([])), durability="sync")
    assert backend.ledger_row("t1") == row


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("24h", 86400),
                                               ("7d", 604800), ("0s", 0)])
def test_ages(text: str, seconds: int) -> None:
    assert parse_age(text).total_seconds() == seconds


@pytest.mark.parametrize("bad", ["", "7", "1w", "-1d", "1.5h", "d7", "99999999999d", "40000d"])
def test_bad_ages_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_age(bad)
