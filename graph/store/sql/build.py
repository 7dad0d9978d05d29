"""A `graph.store.base.Store` whose tables all run on one SQL connection (SQLite or PostgreSQL)."""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver

from graph.store.base import Closable, Store, WriterLocks
from graph.store.sql.approvals import SqlApprovals
from graph.store.sql.attempt_log import SqlAttemptLog
from graph.store.sql.backend import SqlBackend
from graph.store.sql.conn import Sql
from graph.store.sql.ledger import SqlLedger
from graph.store.sql.summaries import SqlSummaries
from graph.store.sql.tombstones import SqlTombstones

__all__ = ["sql_store"]


def sql_store(location: str, checkpointer: BaseCheckpointSaver[str], sql: Sql, *,
              locks: WriterLocks, conns: tuple[Closable, ...],
              ledger_type: type[SqlLedger] = SqlLedger, summaries: bool = False,
              keeps_pool: bool = False) -> Store:
    """A store whose tables all run on `sql`.

    Args:
        location: The file path, or the URL with its password redacted, for messages.
        checkpointer: LangGraph's saver, checked (`graph.store.saver`), on its own connection.
        sql: The connection of our tables.
        locks: The per-thread writer locks (`graph.store.sqlite.locks`,
            `graph.store.postgres.locks`).
        conns: Every connection the store closes, in order.
        ledger_type: The ledger class; a backend adds what its claims need
            (`graph.store.sqlite.ledger`).
        summaries: Keep summaries of finished threads (for `graph.store.poll`).
        keeps_pool: `Store.keeps_pool`: a long-lived worker keeps the store (PostgreSQL).

    Returns:
        The open store; closing it closes `conns`, then `locks`. Every write of its
        tables and of a checked `checkpointer` goes through `locks.fence`.
    """
    fence = locks.fence
    ledger, log = ledger_type(sql, fence), SqlAttemptLog(sql, fence)
    tombstones, approvals = SqlTombstones(sql, fence), SqlApprovals(sql, fence)
    kept = SqlSummaries(sql, fence) if summaries else None
    fenced = getattr(checkpointer, "fence_with", None)
    if fenced is not None:
        fenced(fence)
    backend = SqlBackend(sql, checkpointer, ledger=ledger, log=log, tombstones=tombstones,
                         approvals=approvals, summaries=kept, fence=fence)
    return Store(location, checkpointer, backend, ledger, log, tombstones, approvals, locks,
                 conns, kept, keeps_pool=keeps_pool)
