"""An attempt ledger in memory, with the rules of the SQL ledger (`graph.store.sql.ledger.SqlLedger`).

It satisfies the `AttemptLedger` protocol the nodes use through the runtime context
(`nodes.context`), plus the few operations the step uses around it (`create`, `read`,
request caps), so node and graph tests run without a database, and the benchmarks
use it as their in-memory anchor. Its rules are those of the SQL table and its
triggers: a thread has a row only once created; an attempt is counted before it can
be claimed; neither count ever decreases or passes the thread's fixed maximum; each
attempt number is claimed once, in order; a charged request cap is raised in the same
step as the claim, or neither is.
"""

from __future__ import annotations

from nodes.context import LedgerEntry


class MemoryLedger:
    """The attempt ledger of any number of threads, kept in a dict."""

    def __init__(self) -> None:
        self.rows: dict[str, LedgerEntry] = {}
        """Each thread's entry by thread id."""
        self.caps: dict[str, tuple[int, int]] = {}
        """Each request cap's `(requests, max_requests)` by cap id."""

    def create(self, thread_id: str, max_attempts: int) -> LedgerEntry:
        """Creates the thread's row with no attempts; keeps an existing row as it is.

        Raises:
            ValueError: `max_attempts` is below 1 (the SQL table's CHECK refuses it too).
        """
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
        return self.rows.setdefault(thread_id, LedgerEntry(0, 0, max_attempts))

    def read(self, thread_id: str) -> LedgerEntry | None:
        """Returns the thread's entry, or None when it has no row."""
        return self.rows.get(thread_id)

    def count(self, thread_id: str) -> LedgerEntry:
        """Counts a new attempt unless an unclaimed one exists or the maximum is reached.

        Raises:
            LookupError: The thread has no row (it was never created).
        """
        entry = self.rows.get(thread_id)
        if entry is None:
            raise LookupError(f"attempt ledger has no row for thread {thread_id!r}")
        if entry.claimed == entry.attempts < entry.max_attempts:
            entry = self.rows[thread_id] = LedgerEntry(entry.attempts + 1, entry.claimed,
                                                       entry.max_attempts)
        return entry

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """Claims counted attempt `attempt` (1-based); True exactly once per attempt.

        Returns:
            False, changing nothing, when the thread has no row, the attempt is not the
            next counted one, or the request cap `charge` names is missing or full.
        """
        entry = self.rows.get(thread_id)
        if entry is None or entry.claimed != attempt - 1 or entry.attempts < attempt:
            return False
        if charge is not None:
            requests, max_requests = self.caps.get(charge, (0, 0))
            if charge not in self.caps or requests >= max_requests:
                return False
            self.caps[charge] = (requests + 1, max_requests)
        self.rows[thread_id] = LedgerEntry(entry.attempts, attempt, entry.max_attempts)
        return True

    def ensure_cap(self, cap_id: str, max_requests: int) -> tuple[int, int]:
        """Creates request cap `cap_id` if new; returns its `(requests, max_requests)`."""
        return self.caps.setdefault(cap_id, (0, max_requests))

    def cap(self, cap_id: str) -> tuple[int, int] | None:
        """`(requests, max_requests)` of a request cap, or None."""
        return self.caps.get(cap_id)
