"""Reading the Redis ledger's rows and request caps with exact types (`graph.store.redis.ledger`).

Redis keeps every value as bytes, so each field is checked as it is read, as
`graph.store.rows` does for the SQL tables: a count must be a canonical whole number
(`"3"`, not `"03"`, `"3.0"` or `" 3"`), a time ISO 8601 with a zone, a row exactly its
five fields (six with `LOGGED`) with `claimed <= attempts <= max_attempts`; anything else is refused as
`damaged` (exit 4) instead of crashing or being copied onward. Only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from graph.errors import RefusedError
from graph.store.redis import keys
from graph.store.redis.conn import server_errors
from graph.store.rows import LedgerRow, damaged, is_iso_time
from nodes.context import LedgerEntry

if TYPE_CHECKING:
    import redis

__all__ = ["FIELDS", "LOGGED", "RedisLedgerRows", "canonical_int"]

FIELDS = ("attempts", "claimed", "max_attempts", "created_at", "updated_at")
"""The fields of a ledger row, in `LedgerRow` order."""
LOGGED = "logged"
"""The sixth field, once the thread's log is counted: its number of rows
(`graph.store.redis.lua.APPEND` sets it; `graph.store.redis.tables.RedisAttemptLog.rows`
checks it). Redis-only: a copy elsewhere keeps the log, not the count."""


def canonical_int(text: str) -> int | None:
    """The value of a whole number written as `str(int)` writes it, or None."""
    return int(text) if text.isascii() and text.isdigit() and str(int(text)) == text else None


class RedisLedgerRows:
    """The read side of `graph.store.redis.ledger.RedisLedger`.

    Args:
        client: A client of the server (`graph.store.redis.conn.connect`).
        location: The redacted URL, for messages.
    """

    def __init__(self, client: redis.Redis, location: str) -> None:
        self._client = client
        self.location = location

    def read(self, thread_id: str) -> LedgerEntry | None:
        """Returns the thread's entry, or None when the ledger has no row for it.

        Raises:
            RefusedError: `damaged` for a row with a wrong type or impossible counts.
        """
        row = self.row(thread_id)
        return None if row is None else LedgerEntry(row.attempts, row.claimed, row.max_attempts)

    def _hash(self, key: bytes, table: str) -> dict[str, str] | None:
        """A hash of ours as text, or None when the key does not exist.

        Raises:
            RefusedError: `damaged` when the key is not a hash or holds non-UTF-8 bytes.
        """
        import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

        try:
            with server_errors(self.location):
                try:
                    raw: dict[bytes, bytes] = self._client.hgetall(key)  # type: ignore[assignment]
                except redis.ResponseError as exc:
                    if "WRONGTYPE" not in str(exc):
                        raise
                    raise damaged(table, f"key {keys.shown(key)} is not a hash") from None
            return {k.decode(): v.decode() for k, v in raw.items()} or None
        except UnicodeDecodeError:
            raise damaged(table, f"key {keys.shown(key)} holds bytes that are not UTF-8") from None

    def row(self, thread_id: str) -> LedgerRow | None:
        """The thread's whole row, read with exact types, or None.

        Raises:
            RefusedError: `damaged` for a row with other fields, a count that is not a
                canonical whole number, a time that is not ISO 8601 with a zone, or
                impossible counts.
        """
        fields = self._hash(keys.ledger_key(thread_id), "attempt_ledger")
        if fields is None:
            return None
        if sorted(set(fields) - {LOGGED}) != sorted(FIELDS) or (
                LOGGED in fields and canonical_int(fields[LOGGED]) is None):
            raise damaged("attempt_ledger", f"thread {thread_id!r} has fields {sorted(fields)}")
        counts = [canonical_int(fields[name]) for name in FIELDS[:3]]
        times = [fields["created_at"], fields["updated_at"]]
        if None in counts or not all(is_iso_time(t) for t in times):
            raise damaged("attempt_ledger", f"thread {thread_id!r} has a field of the wrong form")
        attempts, claimed, maximum = (int(c or 0) for c in counts)
        if not claimed <= attempts <= maximum or maximum < 1:
            raise damaged("attempt_ledger", f"thread {thread_id!r} has claimed {claimed}, "
                          f"attempts {attempts}, maximum {maximum}")
        return LedgerRow(thread_id, attempts, claimed, maximum, *times)

    def cap(self, cap_id: str) -> tuple[int, int] | None:
        """`(requests, max_requests)` of a request cap, or None.

        Raises:
            RefusedError: `damaged` when the cap fails its checks (see `caps`).
        """
        fields = self._hash(keys.cap_key(cap_id), "request_caps")
        if fields is None:
            return None
        counts = [canonical_int(fields.get(name, "")) for name in ("requests", "max_requests")]
        if len(fields) != 2 or counts[0] is None or counts[1] is None or counts[0] > counts[1]:
            raise damaged("request_caps", f"cap {cap_id!r} holds {sorted(fields.items())!r:.80}")
        return counts[0], counts[1]

    def caps(self) -> dict[str, tuple[int, int]]:
        """Every request cap, `{cap_id: (requests, max_requests)}`, each checked (`cap`)."""
        found: dict[str, tuple[int, int]] = {}
        for cap_id in self._ids(keys.CAP):
            cap = self.cap(cap_id)
            if cap is not None:  # deleted since the scan
                found[cap_id] = cap
        return found

    def updated_at(self) -> dict[str, str]:
        """`updated_at` (UTC, ISO 8601) of every thread whose ledger row is readable, by id.

        A damaged row is left out instead of refusing the whole answer: a thread without
        a readable row is then listed as `unreadable: damaged` (`graph.threads.history.
        list_threads`, as a missing row is on SQL, where a row of the wrong form cannot
        be stored) and never selected for pruning; reading that thread refuses it.
        """
        stamps: dict[str, str] = {}
        for thread_id in self._ids(keys.LEDGER):
            try:
                row = self.row(thread_id)
            except RefusedError:
                continue
            if row is not None:
                stamps[thread_id] = row.updated_at
        return stamps

    def thread_ids(self) -> set[str]:
        """Every thread id in the ledger, read without checking the rows (`graph.verify`)."""
        return set(self._ids(keys.LEDGER))

    def _ids(self, prefix: str) -> Iterator[str]:
        with server_errors(self.location):
            found = list(self._client.scan_iter(match=keys.pattern(prefix), count=1000))
        return (keys.suffix(key, prefix) for key in found)

