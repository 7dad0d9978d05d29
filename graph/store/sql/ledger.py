"""The attempt ledger: one row per thread, one committed statement per change.

The row is the budget (INVARIANTS I1, I2): `attempts` is counted before a request is
allowed, `claimed` is raised just before it is sent, and neither ever decreases: a
trigger refuses any update that would lower them or change the maximum, so no fork,
replay or `update_state` of the graph can bring back a lower count. Each method is a
single statement on an autocommit connection, so it is committed (on SQLite with
`synchronous=FULL`, on PostgreSQL with `synchronous_commit` on) before it returns;
except `count` and `create`, which may wait for the next commit (`graph.store.sql.conn.Sql.deferred`:
on SQLite their node's or the input's checkpoint, at the latest the claim, which commits
them first). A count lost with its step is counted again by the rerun, and nothing was
sent for it.
The table and its trigger are defined in `graph.store.sql.schema`.
"""

from __future__ import annotations

from dataclasses import astuple
from datetime import UTC, datetime
from typing import Any

from graph.store.rows import LedgerRow, check_row, damaged, is_int, is_iso_time, is_text, text_refused
from graph.store.sql.conn import SqlTable
from nodes.context import LedgerEntry

__all__ = ["SqlLedger"]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class _Rollback(Exception):
    pass


_SELECTED = "attempts, claimed, max_attempts, created_at, updated_at"
_COLUMNS = {"attempts": is_int, "claimed": is_int, "max_attempts": lambda v: is_int(v, 1),
            "created_at": is_iso_time, "updated_at": is_iso_time}


class SqlLedger(SqlTable):
    """The attempt ledger over an autocommit connection (see `graph.store.sql.conn.SqlTable`)."""

    def read(self, thread_id: str) -> LedgerEntry | None:
        """Returns the thread's entry, or None when the ledger has no row for it.

        Raises:
            RefusedError: `damaged` for a row with a wrong type or impossible counts.
        """
        row = self.row(thread_id)
        return None if row is None else row.entry

    def row(self, thread_id: str) -> LedgerRow | None:
        """The thread's whole row, read with exact types, or None.

        Raises:
            RefusedError: `damaged` for a row with a wrong type or impossible counts.
        """
        with text_refused("attempt_ledger"):
            row = self._run(f"SELECT {_SELECTED} FROM attempt_ledger WHERE thread_id = ?",
                            (thread_id,)).fetchone()
        return None if row is None else self._checked(thread_id, row)

    @staticmethod
    def _checked(thread_id: str, row: Any) -> LedgerRow:
        """`row` (the `_SELECTED` columns) with exact types and possible counts.

        Raises:
            RefusedError: `damaged` for a row with a wrong type or impossible counts.
        """
        check_row("attempt_ledger", row, _COLUMNS)
        if not row[1] <= row[0] <= row[2]:
            raise damaged("attempt_ledger", f"thread {thread_id!r} has claimed {row[1]}, "
                          f"attempts {row[0]}, maximum {row[2]}")
        return LedgerRow(thread_id, *row)

    def insert_row(self, row: LedgerRow) -> None:
        """Inserts a whole row as it was elsewhere (`graph.copy`); an existing row is an error."""
        self._fence(row.thread_id)
        self._run("INSERT INTO attempt_ledger VALUES (?, ?, ?, ?, ?, ?)", astuple(row))

    def create(self, thread_id: str, max_attempts: int) -> LedgerEntry:
        """Creates the thread's row with no attempts; keeps an existing row as it is.

        Kept back for the next commit (`graph.store.sql.conn.Sql.deferred`): on SQLite the thread's
        input checkpoint, so a new thread reaches the file whole, row and input together
        (a row with no attempts and no checkpoint is created again anyway).

        Returns:
            The row after the call (check `max_attempts` and `attempts` on reuse).
        """
        self._fence(thread_id)
        now = _now()
        with self._db.deferred():
            self._run(
                "INSERT INTO attempt_ledger VALUES (?, 0, 0, ?, ?, ?) "
                "ON CONFLICT (thread_id) DO NOTHING", (thread_id, max_attempts, now, now))
            entry = self.read(thread_id)
        assert entry is not None
        return entry

    def count(self, thread_id: str) -> LedgerEntry:
        """Counts a new attempt unless an unclaimed one exists or the maximum is reached.

        Kept back for the next commit (module doc): no request depends on it until
        the claim, whose commit carries it.

        Returns:
            The entry after the call.

        Raises:
            LookupError: The ledger has no row for the thread.
        """
        self._fence(thread_id)
        with self._db.deferred():
            with text_refused("attempt_ledger"):
                row = self._run(
                    "UPDATE attempt_ledger SET attempts = attempts + 1, updated_at = ? "
                    "WHERE thread_id = ? AND claimed = attempts AND attempts < max_attempts "
                    f"RETURNING {_SELECTED}", (_now(), thread_id),
                ).fetchone()
            # The row as updated, checked like `read`; unchanged rows are read instead.
            entry = self.read(thread_id) if row is None else self._checked(thread_id, row).entry
        if entry is None:
            raise LookupError(f"attempt ledger has no row for thread {thread_id!r}")
        return entry

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """Marks counted attempt `attempt` (1-based) as sent; True exactly once per attempt.

        Args:
            thread_id: The thread.
            attempt: The counted attempt to claim.
            charge: A request cap (`request_caps.cap_id`: a batch or a parent task) that
                must also have room; it is charged in the same transaction.

        Returns:
            False, changing nothing, when the attempt is not claimable or the cap is full.
        """
        self._fence(thread_id)
        claim_sql = ("UPDATE attempt_ledger SET claimed = ?, updated_at = ? "
                     "WHERE thread_id = ? AND claimed = ? AND attempts >= ?")
        params = (attempt, _now(), thread_id, attempt - 1, attempt)
        if charge is None:
            return self._run(claim_sql, params).rowcount == 1
        try:
            with self._db.transaction():
                charged = self._run("UPDATE request_caps SET requests = requests + 1 "
                                    "WHERE cap_id = ? AND requests < max_requests", (charge,))
                if charged.rowcount != 1 or self._run(claim_sql, params).rowcount != 1:
                    raise _Rollback()
        except _Rollback:
            return False
        return True

    def make_durable(self, what: str) -> None:
        """Makes every committed change durable where a crash cannot lose it.

        On PostgreSQL a commit is already durable (`synchronous_commit` on), so this does
        nothing. On SQLite a synced commit survives a crash and a power loss but lives in
        the `-wal` file, which an outside hand can delete or damage after a crash; so
        `graph.store.sqlite.ledger.SqliteLedger` overrides this to copy the claim into the
        database file before the request leaves.

        Args:
            what: Names what must be durable, for a refusal message.
        """

    def ensure_cap(self, cap_id: str, max_requests: int) -> tuple[int, int]:
        """Creates request cap `cap_id` if new; returns its `(requests, max_requests)`.

        A cap is never reset: an existing cap keeps its count and its maximum.
        """
        self.caps()  # refuses a damaged table before adding to it
        self._run("INSERT INTO request_caps VALUES (?, 0, ?) ON CONFLICT (cap_id) DO NOTHING",
                  (cap_id, max_requests))
        return self.cap(cap_id) or (0, max_requests)

    def insert_cap(self, cap_id: str, requests: int, max_requests: int) -> None:
        """Inserts a cap with its count as it was elsewhere (`graph.copy`)."""
        self._run("INSERT INTO request_caps VALUES (?, ?, ?)", (cap_id, requests, max_requests))

    def cap(self, cap_id: str) -> tuple[int, int] | None:
        """`(requests, max_requests)` of a request cap, or None.

        Raises:
            RefusedError: `damaged` when any cap row has a wrong type or shape (see `caps`).
        """
        return self.caps().get(cap_id)

    def caps(self) -> dict[str, tuple[int, int]]:
        """Every request cap, `{cap_id: (requests, max_requests)}`, read with exact types.

        The whole (small) table is checked: a cap id stored as a blob would not match
        its text id, and the batch would start a fresh cap beside it.

        Raises:
            RefusedError: `damaged` for a row whose id is not text, whose counts are not
                integers, or that counts more requests than its maximum.
        """
        with text_refused("request_caps"):
            rows = self._run("SELECT cap_id, requests, max_requests FROM request_caps",
                             ()).fetchall()
        for row in rows:
            check_row("request_caps", row, {"cap_id": is_text, "requests": is_int,
                                            "max_requests": is_int})
            if row[1] > row[2]:
                raise damaged("request_caps", f"cap {row[0]!r} counts {row[1]} requests, "
                              f"more than its maximum {row[2]}")
        return {row[0]: (row[1], row[2]) for row in rows}

    def touch(self, thread_id: str) -> None:
        """Sets the row's `updated_at` to now (a status change without an attempt)."""
        self._fence(thread_id)
        self._run("UPDATE attempt_ledger SET updated_at = ? WHERE thread_id = ?", (_now(), thread_id))

    def updated_at(self) -> dict[str, str]:
        """`updated_at` (UTC, ISO 8601) of every thread in the ledger, by thread id."""
        with text_refused("attempt_ledger"):
            rows = self._run("SELECT thread_id, updated_at FROM attempt_ledger", ()).fetchall()
        for row in rows:
            check_row("attempt_ledger", row, {"thread_id": is_text, "updated_at": is_iso_time})
        return dict(rows)

    def thread_ids(self) -> set[str]:
        """Every thread id in the ledger, read without checking the rows (`graph.verify`)."""
        return {str(row[0]) for row in self._run("SELECT thread_id FROM attempt_ledger").fetchall()}

    def delete(self, thread_id: str) -> None:
        """Deletes the thread's row: only retention and `--restart-pruned` do this."""
        self._fence(thread_id)
        self._run("DELETE FROM attempt_ledger WHERE thread_id = ?", (thread_id,))
