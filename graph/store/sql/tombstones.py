"""Tombstones of pruned threads, so a pruned thread id never silently gets a new budget."""

from __future__ import annotations

from graph.store.rows import FINAL_STATUSES, Tombstone, check_row, is_iso_time, is_text, text_refused
from graph.store.sql.conn import SqlTable
from graph.store.sql.schema import TOMBSTONES

__all__ = ["SqlTombstones"]


class SqlTombstones(SqlTable):
    """Reads and writes tombstones (see `graph.store.sql.conn.SqlTable`)."""

    def get(self, thread_id: str) -> Tombstone | None:
        """The thread's tombstone, or None (also for a database from before tombstones)."""
        with text_refused("thread_tombstones"):
            rows = self._rows_if_table(
                TOMBSTONES, "SELECT thread_id, final_status, pruned_at FROM "
                "thread_tombstones WHERE thread_id = ?", (thread_id,))
        if not rows:
            return None
        check_row("thread_tombstones", rows[0], {
            "thread_id": is_text, "final_status": lambda v: v in FINAL_STATUSES,
            "pruned_at": is_iso_time})
        return Tombstone(*rows[0])

    def add(self, tombstone: Tombstone) -> None:
        """Records a tombstone; a thread that already has one keeps it."""
        self._fence(tombstone.thread_id)
        self._run("INSERT INTO thread_tombstones VALUES (?, ?, ?) ON CONFLICT (thread_id) DO NOTHING",
                  (tombstone.thread_id, tombstone.final_status, tombstone.pruned_at))

    def thread_ids(self) -> set[str]:
        """Every tombstoned thread id, read without checking the rows.

        Empty for a database from before tombstones.
        """
        rows = self._rows_if_table(TOMBSTONES, "SELECT thread_id FROM thread_tombstones", ())
        return {str(row[0]) for row in rows or ()}

    def remove(self, thread_id: str) -> None:
        """Deletes the tombstone (for `--restart-pruned`)."""
        self._fence(thread_id)
        self._run("DELETE FROM thread_tombstones WHERE thread_id = ?", (thread_id,))
