"""Tombstones of pruned threads, so a pruned thread id never silently gets a new budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TOMBSTONE_DDL = """
CREATE TABLE IF NOT EXISTS thread_tombstones (
    thread_id    TEXT PRIMARY KEY,
    final_status TEXT NOT NULL,
    pruned_at    TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class Tombstone:
    """A pruned thread: its id, its status when pruned, and when (UTC, ISO 8601)."""

    thread_id: str
    final_status: str
    pruned_at: str


class SqlTombstones:
    """Reads and writes tombstones over an autocommit DB-API connection.

    Args:
        conn: As for `graph.ledger.SqlLedger`.
        placeholder: `?` (sqlite3) or `%s` (psycopg).
    """

    def __init__(self, conn: Any, *, placeholder: str = "?") -> None:
        self._conn = conn
        self._ph = placeholder

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._ph)

    def get(self, thread_id: str) -> Tombstone | None:
        """The thread's tombstone, or None (also for a database from before tombstones)."""
        try:
            row = self._conn.execute(self._sql(
                "SELECT thread_id, final_status, pruned_at FROM thread_tombstones "
                "WHERE thread_id = ?"), (thread_id,)).fetchone()
        except Exception as exc:  # noqa: BLE001 - only a missing table is expected here
            if "thread_tombstones" in str(exc):
                return None
            raise
        return Tombstone(*row) if row else None

    def remove(self, thread_id: str) -> None:
        """Deletes the tombstone (for `--restart-pruned`)."""
        self._conn.execute(self._sql("DELETE FROM thread_tombstones WHERE thread_id = ?"),
                           (thread_id,))
