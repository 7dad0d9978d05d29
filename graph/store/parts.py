"""What a `graph.store.base.Store` is made of, whatever the backend: small protocols.

Each table of ours (the attempt log, tombstones, decisions on write calls, summaries)
and the backend's own operations on whole threads (listing, burying, trimming) are
described here by what their callers use, so that `Store` holds no SQL and a backend
without SQL (`graph.store.redis.open`) fits the same callers. The SQL classes
(`graph.store.sql.attempt_log.SqlAttemptLog`, `graph.store.sql.tombstones.SqlTombstones`,
`graph.store.sql.approvals.SqlApprovals`, `graph.store.sql.summaries.SqlSummaries`,
`graph.store.sql.backend.SqlBackend`) and the Redis ones (`graph.store.redis.tables`,
`graph.store.redis.backend`) implement them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from graph.outcome import Outcome
    from graph.store.sql.ledger import LedgerRow
    from graph.store.sql.tombstones import Tombstone
    from nodes.context import LedgerEntry


class Ledger(Protocol):
    """The attempt ledger and request caps (`graph.store.sql.ledger.SqlLedger` says what each does)."""

    def read(self, thread_id: str) -> LedgerEntry | None:
        """The thread's counts, or None when it has no row."""

    def row(self, thread_id: str) -> LedgerRow | None:
        """The thread's whole row, read with exact types, or None."""

    def insert_row(self, row: LedgerRow) -> None:
        """Inserts a whole row as it was elsewhere (`graph.copy`)."""

    def create(self, thread_id: str, max_attempts: int) -> LedgerEntry:
        """Creates the thread's row with no attempts; keeps an existing row as it is."""

    def count(self, thread_id: str) -> LedgerEntry:
        """Counts a new attempt unless an unclaimed one exists or the maximum is reached."""

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """Marks counted attempt `attempt` as sent, durably; True exactly once per attempt."""

    def make_durable(self, what: str) -> None:
        """Waits until every write acknowledged so far is on disk."""

    def ensure_cap(self, cap_id: str, max_requests: int) -> tuple[int, int]:
        """Creates request cap `cap_id` if new; returns its `(requests, max_requests)`."""

    def insert_cap(self, cap_id: str, requests: int, max_requests: int) -> None:
        """Inserts a cap with its count as it was elsewhere (`graph.copy`)."""

    def cap(self, cap_id: str) -> tuple[int, int] | None:
        """`(requests, max_requests)` of a request cap, or None."""

    def caps(self) -> dict[str, tuple[int, int]]:
        """Every request cap, checked."""

    def touch(self, thread_id: str) -> None:
        """Sets the row's `updated_at` to now."""

    def updated_at(self) -> dict[str, str]:
        """`updated_at` of every thread in the ledger, by thread id."""

    def thread_ids(self) -> set[str]:
        """Every thread id in the ledger, read without checking the rows."""

    def delete(self, thread_id: str) -> None:
        """Deletes the thread's row (retention, `--restart-pruned`)."""


class AttemptLog(Protocol):
    """The append-only attempt log (`graph.store.sql.attempt_log` says what it holds)."""

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """Appends one row (`kind`: `reason` or `tool`)."""

    def import_rows(self, thread_id: str, rows: list[dict[str, Any]]) -> None:
        """Appends rows as `rows` returned them elsewhere, times kept (`graph.copy`)."""

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's rows (retention)."""

    def last_attempt(self, thread_id: str) -> int:
        """The highest attempt of the thread's `reason` rows; 0 when none.

        Raises:
            RefusedError: `damaged` for a stored value of the wrong form.
        """

    def last_attempt_and_rows(self, thread_id: str) -> tuple[int, list[dict[str, Any]] | None]:
        """`last_attempt`, and the rows it came from where `covers` judges rows, else None.

        A step passes both on (`check_ledger`, then `covers(..., rows)`), so a log whose
        checks read every row (Redis) is read once per step, not twice.

        Raises:
            RefusedError: `damaged`, as `last_attempt` and `rows`.
        """

    def used_tokens(self, thread_id: str) -> int:
        """The sum of `usage.total_tokens` over the thread's `reason` rows; 0 when none.

        Raises:
            RefusedError: `damaged` when the sum is not a non-negative integer.
        """

    def covers(self, thread_id: str, values: dict[str, Any],
               rows: list[dict[str, Any]] | None = None) -> None:
        """Refuses a log that lacks rows the thread's checkpoint `values` show were made.

        `rows`, when given, are judged instead of reading the stored ones: a step's
        (`last_attempt_and_rows`), or another store's (`graph.copy`).

        Raises:
            RefusedError: `damaged` (exit 4).
        """

    def rows(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's rows, oldest first: `attempt`, `kind`, `payload`, `created_at`.

        Raises:
            RefusedError: `damaged` for a row that fails its checks.
        """


class Tombstones(Protocol):
    """Tombstones of pruned threads (`graph.store.sql.tombstones`)."""

    def get(self, thread_id: str) -> Tombstone | None:
        """The thread's tombstone, or None; `damaged` raised for a malformed one."""

    def add(self, tombstone: Tombstone) -> None:
        """Records a tombstone; a thread that already has one keeps it."""

    def thread_ids(self) -> set[str]:
        """Every tombstoned thread id, read without checking the rows."""

    def remove(self, thread_id: str) -> None:
        """Deletes the tombstone (for `--restart-pruned`)."""


class Approvals(Protocol):
    """Decisions on write calls, one per call of one turn (`graph.store.sql.approvals`)."""

    def rows(self, thread_id: str) -> dict[tuple[int, str], dict[str, Any]]:
        """Every decision of a thread by (attempt, call id), in decision order."""

    def turn(self, thread_id: str, attempt: int) -> dict[str, dict[str, Any]]:
        """The decisions on the calls of one turn, by call id."""

    def add(self, row: dict[str, Any]) -> None:
        """Records one decision; a second one for the same call is refused."""

    def plan(self, thread_id: str, attempt: int, tool_call_id: str, before: str | None,
             after: str) -> None:
        """Records, before writing, the file's hash now and the hash it will have after."""

    def mark_applied(self, thread_id: str, attempt: int, tool_call_id: str) -> None:
        """Marks an approved write as done."""

    def mark_failed(self, thread_id: str, attempt: int, tool_call_id: str, error: str,
                    result: str) -> None:
        """Records that an approved write could not be applied, and why."""

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's decisions (retention)."""


class Summaries(Protocol):
    """Summaries of finished threads (`graph.store.sql.summaries`)."""

    def keep(self, thread_id: str, outcome: Outcome) -> None:
        """Stores the summary of a finished thread's outcome."""

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's summary."""


class Backend(Protocol):
    """A backend's operations on whole threads and on the database itself.

    `graph.store.base.Store` delegates to it everything that depends on how the
    checkpoints and our tables are stored.
    """

    def commit(self) -> None:
        """Commits what the last graph call left kept back (nothing where writes commit at once)."""

    def checkpoint_thread_ids(self) -> set[str]:
        """Every thread id with a checkpoint, read without decoding any."""

    def count_checkpoints(self, thread_id: str) -> int:
        """How many checkpoints the thread has stored, read without decoding any."""

    def bury(self, tombstone: Tombstone) -> None:
        """Deletes a finished thread, leaving its tombstone (`graph.store.base.Store.bury`)."""

    def trim(self, thread_id: str, keep: int | None) -> int:
        """Deletes the thread's checkpoints older than its latest `keep`; returns how many."""

    def expire_finished(self, thread_id: str, status: str) -> None:
        """Gives a finished thread's keys their time-to-live (`graph.store.redis.ttl`); else nothing."""

    def buried_with_checkpoints(self) -> set[str]:
        """Tombstoned thread ids that still have checkpoints (an interrupted `bury`)."""

    def used_bytes(self) -> int:
        """Bytes the database uses (0 where this is not known)."""

    def reclaim_space(self) -> None:
        """Gives free space back where the backend can (SQLite's `VACUUM`)."""
