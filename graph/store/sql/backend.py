"""The operations of a SQL store (SQLite or PostgreSQL) on whole threads: `graph.store.base.Backend`.

`graph.store.base.Store` delegates to this what needs SQL: listing the threads that have
checkpoints, burying a thread in one transaction, trimming its checkpoint window
(`graph.store.sql.window`), finding leftovers of an interrupted bury, and the
database's size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graph.store.base import Approvals, AttemptLog, Ledger, Summaries, Tombstones
from graph.store.rows import Tombstone
from graph.store.sql.conn import Sql
from graph.store.sql.schema import CHECKPOINTS, TOMBSTONES
from graph.store.sql.window import count, trim

__all__ = ["SqlBackend"]


class SqlBackend:
    """`Backend` over the store's SQL connection (`graph.store.sql.conn.Sql`).

    Args:
        sql: The autocommit connection of our tables (on SQLite also the checkpointer's).
        checkpointer: LangGraph's saver on the same database.
        ledger, log, tombstones, approvals, summaries: The store's tables, on `sql`.
        fence: The store's fencing hook (`graph.store.base.WriterLocks.fence`), which a
            window's trim passes first; None for a backend used on its own.
    """

    def __init__(self, sql: Sql, checkpointer: Any, *, ledger: Ledger, log: AttemptLog,
                 tombstones: Tombstones, approvals: Approvals,
                 summaries: Summaries | None, fence: Callable[[str], str] | None = None) -> None:
        self.sql = sql
        self._fence = fence
        self._checkpointer = checkpointer
        self._ledger, self._log, self._tombstones = ledger, log, tombstones
        self._approvals, self._summaries = approvals, summaries

    def answers(self) -> bool:
        """True when our tables' connection and the checkpointer's both answer `SELECT 1`.

        `graph.store.base.Store.answers`: a kept PostgreSQL store whose session is gone
        is closed, not lent.
        """
        try:
            for conn in (getattr(self.sql, "conn", None), getattr(self._checkpointer, "conn", None)):
                if conn is not None:
                    conn.execute("SELECT 1").fetchone()
        except Exception:  # noqa: BLE001 - any failure: the session is gone, open a new store
            return False
        return True

    def commit(self) -> None:
        """Commits what is kept back (`graph.store.sql.conn.Sql.deferred`)."""
        self.sql.commit()

    def checkpoint_thread_ids(self) -> set[str]:
        """Every thread id in LangGraph's checkpoints table, rows not decoded."""
        rows = self.sql.run(f"SELECT DISTINCT thread_id FROM {CHECKPOINTS}").fetchall()
        return {str(row[0]) for row in rows}

    def count_checkpoints(self, thread_id: str) -> int:
        """How many checkpoints the thread has (`graph.store.sql.window.count`)."""
        return count(self.sql, thread_id)

    def bury(self, tombstone: Tombstone) -> None:
        """One transaction: the tombstone written, the thread's rows of ours deleted.

        Then LangGraph's `delete_thread` removes its checkpoints (`Store.bury`).
        """
        thread_id = tombstone.thread_id
        with self.sql.transaction():
            self._tombstones.add(tombstone)
            self._ledger.delete(thread_id)
            self._log.delete_thread(thread_id)
            self._approvals.delete_thread(thread_id)
            if self._summaries is not None:
                self._summaries.delete_thread(thread_id)
        self._checkpointer.delete_thread(thread_id)

    def trim(self, thread_id: str, keep: int | None) -> int:
        """`graph.store.sql.window.trim` on this connection, fenced."""
        return trim(self.sql, self._checkpointer, thread_id, keep, self._fence)

    def expire_finished(self, thread_id: str, status: str) -> None:
        """Nothing: SQL databases keep finished threads until `graph.prune` deletes them."""

    def carries_ttl(self, thread_id: str) -> bool:
        """False: rows never expire."""
        return False

    def check_lock(self, thread_id: str) -> None:
        """Nothing: SQL writer locks are the database's (advisory or file locks), no rows."""

    def buried_with_checkpoints(self) -> set[str]:
        """Tombstoned thread ids that still have checkpoints."""
        rows = self.sql.run(f"SELECT DISTINCT thread_id FROM {CHECKPOINTS} WHERE thread_id IN "
                            f"(SELECT thread_id FROM {TOMBSTONES})").fetchall()
        return {row[0] for row in rows}

    def used_bytes(self) -> int:
        """`graph.store.sql.conn.Sql.used_bytes`."""
        return self.sql.used_bytes()

    def reclaim_space(self) -> None:
        """`graph.store.sql.conn.Sql.reclaim_space`."""
        self.sql.reclaim_space()
