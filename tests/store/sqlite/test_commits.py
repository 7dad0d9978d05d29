"""On SQLite a step commits once per superstep, and nothing it saved waits past its end.

Commits are counted from the `-wal` file: each commit ends with a commit frame (a frame
whose header names the database size after the commit). The claim's checkpoint
(`graph.store.sqlite.ledger`) empties the `-wal`, so its commit frames are tallied just
before it; automatic checkpoints are switched off so nothing else rewinds the `-wal`.
"""

from __future__ import annotations

import sqlite3
import struct
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from graph.checkpoints.load import graph_of
from graph.settings import Settings, ThreadSpec
from graph.step.advance import StepRequest, advance
from graph.store import open_store
from graph.store.sqlite.ledger import SqliteLedger
from tests.fakes import NeverFinishes, ScriptedModel

COMMITS_PER_STEP = 4
"""tools, budget (with its count), the claim alone, reason (with its log row)."""


def wal_commits(wal: Path) -> int:
    """Commit frames in the valid part of a `-wal` file (0 when it is missing or empty)."""
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < 32:
        return 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    commits, offset = 0, 32
    while offset + 24 + page_size <= len(data):
        header = data[offset:offset + 24]
        if header[8:16] != salts:  # a frame left from before the -wal was restarted
            break
        commits += struct.unpack(">I", header[4:8])[0] != 0
        offset += 24 + page_size
    return commits


class CommitCounter:
    """Counts commits to one database, across the claim checkpoints that empty its `-wal`."""

    def __init__(self, store: Any, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wal = db.with_name(db.name + "-wal")
        self.emptied = 0
        """Commit frames tallied before the `-wal` was emptied."""
        durable = SqliteLedger.make_durable

        def tallied(ledger: SqliteLedger, what: str) -> None:
            store.commit()  # what the claim checkpoint commits first
            self.emptied += wal_commits(self.wal)
            durable(ledger, what)

        monkeypatch.setattr(SqliteLedger, "make_durable", tallied)

    def total(self) -> int:
        """Commits since the counter was made (or since the last `total`)."""
        return self.emptied + wal_commits(self.wal)


def _step(store: Any, model: Any, *, task: str | None = None, max_attempts: int | None = None,
          keep: int | str | None = None, thread_id: str = "t1") -> Any:
    request = StepRequest(ThreadSpec(thread_id, task=task, max_attempts=max_attempts,
                                     keep_checkpoints=keep))
    return advance(store, request, Settings(db=store.location), model_factory=lambda m, s: model)


def test_a_step_commits_at_most_four_times_on_sqlite(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "c.sqlite"
    model = NeverFinishes()
    with open_store(str(db), create=True) as store:
        store.sql.run("PRAGMA wal_autocheckpoint = 0")
        counter = CommitCounter(store, db, monkeypatch)
        # A maximum above the steps measured: the step that ends a thread also writes its
        # summary for the quick answer (graph.step.finished), one commit more, checked below.
        # `all`: no window trim either (a trimming step is measured below).
        _step(store, model, task="How long does shipping take?", max_attempts=5, keep="all")
        per_step = []
        for _ in range(3):
            before = counter.total()
            outcome = _step(store, model)
            assert outcome.error_code is None
            per_step.append(counter.total() - before)
        before = counter.total()
        last = _step(store, model)
        final_step = counter.total() - before
    assert last.status == "exhausted"
    assert len(model.requests) == 5
    assert all(0 < n <= COMMITS_PER_STEP for n in per_step), per_step
    assert 0 < final_step <= COMMITS_PER_STEP + 1, final_step  # + the finished thread's summary


def test_writes_of_a_node_that_raised_are_durable_when_the_step_returns(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    model = ScriptedModel([RuntimeError("a bug in the model client")])
    with open_store(str(db), create=True) as store:
        with pytest.raises(RuntimeError, match="a bug in the model client"):
            _step(store, model, task="How long does shipping take?")
        # Read by another connection before the store closes: only commits show there.
        with closing(sqlite3.connect(db)) as other:
            errors = other.execute("SELECT count(*) FROM writes WHERE thread_id = 't1' "
                                   "AND channel = '__error__'").fetchone()[0]
            claimed = other.execute("SELECT claimed FROM attempt_ledger "
                                    "WHERE thread_id = 't1'").fetchone()[0]
    assert errors == 1
    assert claimed == 1
    with open_store(str(db), create=False) as store:  # the next run sees the failed reason
        snapshot = graph_of(store).get_state({"configurable": {"thread_id": "t1"}})
        assert [task.name for task in snapshot.tasks if task.error] == ["reason"]


def test_writes_wait_for_their_checkpoint_or_the_next_commit(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"

    def committed_writes(task_id: str) -> int:
        with closing(sqlite3.connect(db)) as other:
            return int(other.execute("SELECT count(*) FROM writes WHERE task_id = ?",
                                     (task_id,)).fetchone()[0])

    with open_store(str(db), create=True) as store:
        _step(store, NeverFinishes(), task="How long does shipping take?")
        latest = store.checkpointer.get_tuple({"configurable": {"thread_id": "t1"}})
        assert latest is not None and latest.parent_config is not None
        write = [("progress", {"outcome": "not_sent"})]
        # Writes to the newest checkpoint wait for the put that follows them.
        store.checkpointer.put_writes(latest.config, write, "waiting")
        assert committed_writes("waiting") == 0
        # Writes that arrive after the put of their superstep (LangGraph saves them on
        # another thread and waits only for the put) wait too: no commit of their own.
        store.checkpointer.put_writes(latest.parent_config, write, "late")
        assert committed_writes("late") == 0
        store.commit()  # as after every graph call
        assert (committed_writes("late"), committed_writes("waiting")) == (1, 1)
        store.checkpointer.put_writes(latest.config, write, "at_close")
    assert committed_writes("at_close") == 1


def test_a_step_that_trims_the_window_costs_no_commit_more(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "c.sqlite"
    model = NeverFinishes()
    with open_store(str(db), create=True) as store:
        store.sql.run("PRAGMA wal_autocheckpoint = 0")
        counter = CommitCounter(store, db, monkeypatch)
        _step(store, model, task="How long does shipping take?", max_attempts=9, keep=1)
        per_step = []
        for _ in range(3):
            before = counter.total()
            assert _step(store, model).error_code is None
            per_step.append(counter.total() - before)
        kept = store.sql.value("SELECT COUNT(*) FROM checkpoints WHERE thread_id = 't1'")
    assert kept == 1
    # Each checkpoint's own transaction deletes the one that falls out of the window.
    assert all(0 < n <= COMMITS_PER_STEP for n in per_step), per_step


def test_a_new_thread_commits_its_ledger_row_with_its_input(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "c.sqlite"
    with open_store(str(db), create=True) as store:
        store.sql.run("PRAGMA wal_autocheckpoint = 0")
        counter = CommitCounter(store, db, monkeypatch)
        before = counter.total()
        _step(store, NeverFinishes(), task="How long does shipping take?", keep="all")
        first = counter.total() - before
    # The ledger row, the input, __start__ and budget together; the claim, reason.
    assert 0 < first <= COMMITS_PER_STEP - 1, first
