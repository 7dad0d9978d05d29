"""A checkpoint save refused after the `reason` node ends the step `busy`, never `ready`/`done`.

LangGraph saves checkpoints on a background executor. The save after a node named in
`interrupt_after` runs while the interrupt is raised, and the executor drops an error
of that save ("if there's already an exception being raised, don't raise another one",
`langgraph.pregel._executor.BackgroundExecutor.__exit__`), so `invoke` returns as if the
checkpoint were saved. A writer that lost its lease (or any refused save) then reported
exit 0 with its reply only in pending writes: a finished thread whose last checkpoint
still has a task, which `verify` and `prune` read as one that can continue. The step
now asks the saver after each invocation (`graph.store.base.Store.raise_failed_write`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from graph.checkpoints.load import check_stored_thread, graph_of
from graph.errors import BusyError, ExitCode
from graph.prune import main as prune_main
from graph.store import open_store
from graph.store.saver import CheckedSaver
from graph.verify import main as verify_main
from tests.conftest import run_cli

TASK = "How long does shipping take?"


def _refuse_the_save_after_reason(monkeypatch: pytest.MonkeyPatch, backend: Any) -> list[str]:
    """Every save of a checkpoint made after `reason` ran is refused (busy); returns their ids."""
    classes: list[Any] = [CheckedSaver]
    if backend.name == "redis":
        from graph.store.redis.saver import CheckedRedisSaver

        classes.append(CheckedRedisSaver)
    refused: list[str] = []
    for cls in classes:
        def put(self: Any, config: Any, checkpoint: Any, *args: Any, _orig: Any = cls._put) -> Any:
            if "reason" in checkpoint.get("versions_seen", {}):
                refused.append(checkpoint["id"])
                raise BusyError.for_thread(str(config["configurable"]["thread_id"]))
            return _orig(self, config, checkpoint, *args)

        monkeypatch.setattr(cls, "_put", put)
    return refused


def test_a_save_refused_after_reason_ends_the_step_busy_and_the_thread_goes_on(
        backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    refused = _refuse_the_save_after_reason(monkeypatch, backend)
    out = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    assert refused, "the refusal never fired: the test no longer reaches the save after reason"
    assert (out["exit_code"], out["error_code"]) == (ExitCode.BUSY, "busy"), out
    monkeypatch.undo()
    with open_store(backend.db, create=False, read_only=True) as store:
        assert store.take_failed_write("t1") is None  # nothing noted on a fresh store
    done = run_cli(["--thread", "t1", "--db", backend.db])  # resumes from the pending writes
    assert (done["status"], done["exit_code"]) == ("done", 0), done
    attempts, claimed, _ = backend.ledger_row("t1")
    assert attempts == claimed == done["attempts"]


def test_a_thread_finished_only_in_pending_writes_is_finished_for_verify_and_prune(
        backend: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Its last node's writes are stored, the checkpoint after them is not (a lost lease).

    The step reports it `done` from the stored writes; `verify` and `prune` read it the
    same way (`LoadedThread.finished`): no "can continue" report about its TTL, pruned
    in its turn.
    """
    assert run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])[
        "status"] == "ready"
    classes: list[Any] = [CheckedSaver]
    if backend.name == "redis":
        from graph.store.redis.saver import CheckedRedisSaver

        classes.append(CheckedRedisSaver)
    for cls in classes:
        def put(self: Any, config: Any, checkpoint: Any, *args: Any, _orig: Any = cls._put) -> Any:
            progress = checkpoint.get("channel_values", {}).get("progress") or {}
            if progress.get("status") == "done":
                raise BusyError.for_thread(str(config["configurable"]["thread_id"]))
            return _orig(self, config, checkpoint, *args)

        monkeypatch.setattr(cls, "_put", put)
    assert run_cli(["--thread", "t1", "--once", "--db", backend.db])["exit_code"] == ExitCode.BUSY
    monkeypatch.undo()
    with open_store(backend.db, create=False, read_only=True) as store:
        loaded = check_stored_thread(store, graph_of(store), "t1")
        assert loaded is not None and loaded.snapshot.tasks and not loaded.snapshot.next
        assert loaded.finished
    done = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert (done["status"], done["exit_code"]) == ("done", 0), done
    capsys.readouterr()
    assert verify_main(["--db", backend.db]) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert prune_main(["--db", backend.db, "--completed", "0s", "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)
    assert "t1" in json.dumps(pruned["pruned"]), pruned
