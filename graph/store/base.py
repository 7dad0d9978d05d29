"""An open checkpoint database, whatever the backend: the `Store` every entry point uses.

A `Store` holds LangGraph's checkpointer and our tables on their connections, the
per-thread writer locks, and the graph compiled once with its checkpointer. It offers
the per-thread operations retention, copy and verify need, so no module outside
storage writes SQL for our tables (`graph.store.sql.schema` lists them). It holds no SQL itself:
its parts are typed by the protocols of `graph.store.parts`, and what depends on the
backend is its `backend` (`graph.store.sql.backend` for SQLite and PostgreSQL,
`graph.store.redis.backend` for Redis).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from graph.store.parts import Approvals, AttemptLog, Backend, Ledger, Summaries, Tombstones
from graph.store.sql.approvals import SqlApprovals
from graph.store.sql.attempt_log import SqlAttemptLog
from graph.store.sql.backend import SqlBackend
from graph.store.sql.conn import Sql
from graph.store.sql.ledger import LedgerRow, SqlLedger
from graph.store.sql.summaries import SqlSummaries
from graph.store.sql.tombstones import SqlTombstones, Tombstone


class WriterLocks(Protocol):
    """One writer per thread (`graph.store.sqlite.locks`, `graph.store.postgres.locks`, Redis leases)."""

    def hold(self, thread_id: str) -> AbstractContextManager[None]:
        """Holds the thread's lock for a block; raises `BusyError` when another has it."""

    def close(self) -> None:
        """Releases every lock (after the database connections are closed)."""


class Closable(Protocol):
    """A database connection, as far as closing it goes."""

    def close(self) -> None:
        """Closes the connection."""


class ReadOnlyLocks:
    """The locks of a store opened read-only: a reader never holds a writer lock."""

    def hold(self, thread_id: str) -> AbstractContextManager[None]:
        """Never returns.

        Raises:
            RuntimeError: Always (a bug: only writers lock threads).
        """
        raise RuntimeError(f"thread {thread_id!r}: a store opened read-only holds no locks")

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True)
class ThreadExport:
    """One thread as `graph.copy` moves it: its rows in our tables and its checkpoints.

    Attributes:
        thread_id: The thread.
        ledger: Its ledger row, or None (a pruned thread has none).
        tombstone: Its tombstone, or None.
        checkpoints: Every checkpoint with its pending writes, newest first.
        log: Its attempt-log rows, oldest first (`SqlAttemptLog.rows`).
        decisions: Its decisions on write calls, in decision order.
    """

    thread_id: str
    ledger: LedgerRow | None
    tombstone: Tombstone | None
    checkpoints: list[CheckpointTuple]
    log: list[dict[str, Any]]
    decisions: list[dict[str, Any]]


@dataclass
class Store:
    """An open checkpoint database (a SQLite file, PostgreSQL or Redis).

    Holds no SQL: what depends on how things are stored is in `backend`
    (`graph.store.parts`).

    Attributes:
        location: The file path, or the URL with its password redacted, for messages.
        checkpointer: LangGraph's saver (checked, `graph.store.saver`, on SQL
            backends), on its own connection.
        backend: The backend's operations on whole threads (`graph.store.sql.backend`,
            `graph.store.redis.backend`).
        ledger: The attempt ledger and the request caps.
        log: The append-only attempt log.
        tombstones: Tombstones of pruned threads.
        approvals: Decisions on write calls.
        locks: Per-thread writer locks (`hold(thread_id)`).
        summaries: Summaries of finished threads (`graph.store.sql.summaries`), or None.
        store_id: A random id the database keeps (Redis: `graph.store.redis.open`), so a
            queued job names the checkpoint database it was enqueued for; None when the
            queue lives in the checkpoint database itself (PostgreSQL).
    """

    location: str
    checkpointer: BaseCheckpointSaver[str]
    backend: Backend
    ledger: Ledger
    log: AttemptLog
    tombstones: Tombstones
    approvals: Approvals
    locks: WriterLocks
    _conns: tuple[Closable, ...] = field(repr=False)
    summaries: Summaries | None = None
    store_id: str | None = None
    compiled: Any = field(default=None, repr=False)
    """The agent graph compiled with this store's checkpointer, kept by
    `graph.checkpoints.load.graph_of` (the store builds no graph)."""

    @classmethod
    def build(cls, location: str, checkpointer: BaseCheckpointSaver[str], sql: Sql, *,
              locks: WriterLocks, conns: tuple[Closable, ...],
              ledger_type: type[SqlLedger] = SqlLedger, summaries: bool = False) -> Store:
        """A store whose tables all run on `sql` (SQLite or PostgreSQL).

        `ledger_type` lets a backend add what its claims need (`graph.store.sqlite.ledger`);
        `conns` are every connection the store closes, in order; `summaries` keeps
        summaries of finished threads (for `graph.store.poll`).
        """
        ledger, log = ledger_type(sql), SqlAttemptLog(sql)
        tombstones, approvals = SqlTombstones(sql), SqlApprovals(sql)
        kept = SqlSummaries(sql) if summaries else None
        backend = SqlBackend(sql, checkpointer, ledger=ledger, log=log, tombstones=tombstones,
                             approvals=approvals, summaries=kept)
        return cls(location, checkpointer, backend, ledger, log, tombstones, approvals, locks,
                   conns, kept)

    @property
    def sql(self) -> Sql:
        """The SQL connection of a SQLite or PostgreSQL store (tests and SQL-only tools).

        Raises:
            AttributeError: The store is not SQL (Redis).
        """
        sql = getattr(self.backend, "sql", None)
        if not isinstance(sql, Sql):
            raise AttributeError(f"{self.location}: this store has no SQL connection")
        return sql

    def commit(self) -> None:
        """Commits what the last graph call left kept back (`graph.store.sql.conn.Sql.deferred`).

        LangGraph saves a node's writes without a checkpoint after them when the node
        raised or paused (`interrupt()`); on SQLite they wait for the next commit, and
        this is it. Called after each graph call and on close.
        """
        self.backend.commit()

    def close(self) -> None:
        """Commits what is kept back, closes the connections, then the lock handle.

        In that order: closing a handle of the database file first would drop SQLite's
        own locks (see `graph.store.sqlite.locks`).
        """
        try:
            self.commit()
        finally:
            for conn in self._conns:
                conn.close()
            self.locks.close()

    def thread_ids(self) -> list[str]:
        """Every thread id with a checkpoint, a ledger row or a tombstone, sorted.

        Read without decoding or checking any row, so one damaged row cannot hide the
        other threads (`graph.verify` checks each one).
        """
        ids = self.backend.checkpoint_thread_ids()
        return sorted(ids | self.ledger.thread_ids() | self.tombstones.thread_ids())

    def bury(self, tombstone: Tombstone) -> None:
        """Deletes a finished thread, leaving its tombstone (retention; INVARIANTS I10).

        Two commits: first, in one transaction, the tombstone is written and the
        thread's ledger row, attempt log, decisions and summary are deleted; then LangGraph's
        `delete_thread` removes its checkpoints (and their digests). From the first
        commit on the thread is refused as `pruned`, so a crash in between leaves it
        gone, never half-usable; `sweep_buried` removes the leftover checkpoints.
        """
        self.backend.bury(tombstone)

    def trim(self, thread_id: str, keep: int | None) -> int:
        """Deletes the thread's checkpoints older than its latest `keep` (None: keeps all).

        Hold the thread's lock. One transaction (`graph.store.sql.window`); returns how
        many checkpoints were deleted.
        """
        return self.backend.trim(thread_id, keep)

    def count_checkpoints(self, thread_id: str) -> int:
        """How many checkpoints the thread has stored (its window), read without decoding any."""
        return self.backend.count_checkpoints(thread_id)

    def keep_window(self, thread_id: str, keep: int | None) -> None:
        """Registers the thread's window for a saver that keeps it as it saves (SQLite).

        Each later checkpoint of the thread, in this store, deletes those that fall out
        of its window in its own transaction (`graph.store.saver.sqlite_saver`); hold
        the thread's lock. Elsewhere nothing: call `trim_after_step`.
        """
        windows = getattr(self.checkpointer, "windows", None)
        if windows is not None and keep is not None:
            windows[thread_id] = keep

    def trim_after_step(self, thread_id: str, keep: int | None) -> int:
        """`trim`, unless the saver already keeps the window registered by `keep_window`."""
        if getattr(self.checkpointer, "windows", None) is not None:
            return 0
        return self.trim(thread_id, keep)

    def sweep_buried(self) -> int:
        """Deletes leftover checkpoints of tombstoned threads (an interrupted `bury`).

        Returns:
            How many threads had leftovers.
        """
        buried = sorted(self.backend.buried_with_checkpoints())
        for thread_id in buried:
            self.checkpointer.delete_thread(thread_id)
        return len(buried)

    def export_thread(self, thread_id: str) -> ThreadExport:
        """Reads a whole thread: our rows with exact types, and every checkpoint, checked.

        Raises:
            RefusedError: `damaged` for a row of ours that fails its checks.
            CheckpointIntegrityError: A checkpoint fails its checks.
        """
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        return ThreadExport(thread_id, self.ledger.row(thread_id),
                            self.tombstones.get(thread_id), list(self.checkpointer.list(config)),
                            self.log.rows(thread_id),
                            list(self.approvals.rows(thread_id).values()))

    def import_thread(self, export: ThreadExport) -> None:
        """Writes a thread exported from another store (`graph.copy`); it must be new here.

        The ledger row goes first: a copy interrupted later leaves a thread whose
        counted attempts have no checkpoint, which is refused, never restarted with a
        new budget. Checkpoints go through LangGraph's `put` and `put_writes`, oldest
        first (each parent before its child), so they are re-serialized with fresh
        checksums and digests.
        """
        thread_id = export.thread_id
        if export.ledger is not None:
            self.ledger.insert_row(export.ledger)
        if export.tombstone is not None:
            self.tombstones.add(export.tombstone)
        for item in reversed(export.checkpoints):
            parent_conf = (item.parent_config or {}).get("configurable") or {"thread_id": thread_id}
            parent: RunnableConfig = {"configurable": {"checkpoint_ns": "", **parent_conf}}
            saved = self.checkpointer.put(parent, _langgraph_form(item.checkpoint), item.metadata,
                                          item.checkpoint["channel_versions"])
            for task_id, writes in _writes_by_task(item).items():
                self.checkpointer.put_writes(saved, writes, task_id)
        self.log.import_rows(thread_id, export.log)
        for decision in export.decisions:
            self.approvals.add(decision)


def _langgraph_form(checkpoint: Any) -> Any:
    """The checkpoint without what LangGraph's `RedisSaver` adds as it loads one.

    It adds `type` and `pending_sends` (empty for this graph, which sends no `Send`);
    other savers refuse a checkpoint with other keys (`graph.store.shape`). A
    non-empty `pending_sends` is kept, so the target refuses it rather than lose it.
    """
    extra = {"type"} | ({"pending_sends"} if checkpoint.get("pending_sends") == [] else set())
    return {key: value for key, value in checkpoint.items() if key not in extra}


def _writes_by_task(item: CheckpointTuple) -> dict[str, list[tuple[str, Any]]]:
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in item.pending_writes or []:
        by_task.setdefault(task_id, []).append((channel, value))
    return by_task

