"""The attempt ledger on SQLite: one row per thread, one committed transaction per change.

The row is the budget (INVARIANTS I1, I2): `attempts` is counted before a request is
allowed, `claimed` is raised just before it is sent, and neither ever decreases: a
trigger refuses any update that would lower them, so no fork, replay or
`update_state` of the graph can bring back a lower count.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from nodes.context import LedgerEntry

LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS attempt_ledger (
    thread_id    TEXT PRIMARY KEY,
    attempts     INTEGER NOT NULL CHECK (attempts >= 0),
    claimed      INTEGER NOT NULL CHECK (claimed >= 0 AND claimed <= attempts),
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1 AND attempts <= max_attempts),
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS attempt_ledger_never_decreases
BEFORE UPDATE ON attempt_ledger
WHEN NEW.attempts < OLD.attempts OR NEW.claimed < OLD.claimed
     OR NEW.max_attempts <> OLD.max_attempts
BEGIN
    SELECT RAISE(ABORT, 'attempt ledger never decreases');
END;
"""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class SqliteLedger:
    """Attempt ledger over its own autocommit connection to the checkpoint database.

    Args:
        conn: A connection with `isolation_level=None`, `synchronous=FULL` and a busy
            timeout; each method runs one `BEGIN IMMEDIATE` transaction and commits
            before returning, so a count is on disk before the request leaves.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def _tx(self, *statements: tuple[str, tuple]) -> int:
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            changed = 0
            for sql, params in statements:
                changed += cur.execute(sql, params).rowcount
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return changed

    def read(self, thread_id: str) -> LedgerEntry | None:
        """Returns the thread's entry, or None when the ledger has no row for it."""
        row = self._conn.execute(
            "SELECT attempts, claimed, max_attempts FROM attempt_ledger WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()
        return LedgerEntry(*row) if row else None

    def create(self, thread_id: str, max_attempts: int) -> LedgerEntry:
        """Creates the thread's row with no attempts; keeps an existing row as it is.

        Returns:
            The row after the call (check `max_attempts` and `attempts` on reuse).
        """
        now = _now()
        self._tx(
            (
                "INSERT INTO attempt_ledger VALUES (?, 0, 0, ?, ?, ?) "
                "ON CONFLICT (thread_id) DO NOTHING",
                (thread_id, max_attempts, now, now),
            )
        )
        entry = self.read(thread_id)
        assert entry is not None
        return entry

    def count(self, thread_id: str) -> LedgerEntry:
        """Counts a new attempt unless an unclaimed one exists or the maximum is reached.

        Returns:
            The entry after the call.

        Raises:
            LookupError: The ledger has no row for the thread.
        """
        self._tx(
            (
                "UPDATE attempt_ledger SET attempts = attempts + 1, updated_at = ? "
                "WHERE thread_id = ? AND claimed = attempts AND attempts < max_attempts",
                (_now(), thread_id),
            )
        )
        entry = self.read(thread_id)
        if entry is None:
            raise LookupError(f"attempt ledger has no row for thread {thread_id!r}")
        return entry

    def claim(self, thread_id: str, attempt: int) -> bool:
        """Marks counted attempt `attempt` as sent; True exactly once per attempt."""
        return (
            self._tx(
                (
                    "UPDATE attempt_ledger SET claimed = ?, updated_at = ? "
                    "WHERE thread_id = ? AND claimed = ? AND attempts >= ?",
                    (attempt, _now(), thread_id, attempt - 1, attempt),
                )
            )
            == 1
        )
