"""Expiry marks read as tombstones: an expired Redis thread never comes back with a fresh budget.

A finished thread's keys expire on their own (`graph.store.redis.ttl`). Its mark turns into a
tombstone, for every reader, once the thread is no longer whole: the expiry time has
passed by the server's clock, its ledger hash is gone, or fewer checkpoints are left
than were counted when the TTL was set. Reading the server's clock as well as the keys
closes the race of a reader that sees the ledger just before it expires and the
checkpoints just after. `ExpiringLedger` closes the other one: a thread whose keys
expire between its tombstone check and its ledger row's creation is refused as
`pruned` when the row would be created.
"""

from __future__ import annotations

from collections import Counter

from graph.errors import RefusedError
from graph.store.checks import pruned_refusal
from graph.store.redis import keys
from graph.store.redis.backend import CHECKPOINT_PREFIX, checkpoint_thread
from graph.store.redis.conn import server_errors
from graph.store.redis.ledger import RedisLedger
from graph.store.redis.tables import RedisTombstones
from graph.store.redis.ttl import EXPIRING, expired, keep_alive, mark_key, read_mark, thread_keys
from graph.store.rows import Tombstone
from nodes.context import LedgerEntry

__all__ = ["ExpiringLedger", "ExpiringTombstones"]


class ExpiringTombstones(RedisTombstones):
    """`RedisTombstones` that also read an expired thread's mark as its tombstone."""

    def get(self, thread_id: str) -> Tombstone | None:
        """The thread's tombstone, else its mark's once the thread has expired, else None.

        Raises:
            RefusedError: `damaged` for a tombstone or mark of the wrong form.
        """
        tombstone = super().get(thread_id)
        if tombstone is not None:
            return tombstone
        with server_errors(self.location):
            mark = read_mark(self._client, thread_id)
            if mark is None or not expired(self._client, thread_id, mark):
                return None
        return Tombstone(thread_id, mark.final_status, mark.pruned_at)

    def thread_ids(self) -> set[str]:
        """Every tombstoned thread id, and every expired marked one (a damaged mark counts)."""
        found = super().thread_ids()
        marked = set(self._ids(EXPIRING)) - found
        if not marked:
            return found
        with server_errors(self.location):
            counted = Counter(checkpoint_thread(key) or "" for key in self._client.scan_iter(
                match=f"{CHECKPOINT_PREFIX}*".encode(), count=1000))
        for thread_id in marked:
            with server_errors(self.location):
                try:
                    mark = read_mark(self._client, thread_id)
                except RefusedError:
                    found.add(thread_id)
                    continue
                if mark is not None and expired(self._client, thread_id, mark, counted):
                    found.add(thread_id)
        return found

    def remove(self, thread_id: str) -> None:
        """Deletes the tombstone, the mark and what is left of the thread (`--restart-pruned`).

        The caller deleted the checkpoints LangGraph finds and the ledger hash; any key
        left with a TTL (a log, decisions, a write of an expired checkpoint) must not
        become the new thread's.
        """
        super().remove(thread_id)
        with server_errors(self.location):
            self._client.delete(mark_key(thread_id), *thread_keys(self._client, thread_id))


class ExpiringLedger(RedisLedger):
    """`RedisLedger` that refuses to create the row of a marked thread (module doc)."""

    def create(self, thread_id: str, max_attempts: int) -> LedgerEntry:
        """As `RedisLedger.create`, for a thread without a mark.

        Hold the thread's lock: a mark is written only by its holder with the row there,
        and removed only by `--restart-pruned` or a prune holding it.

        Raises:
            RefusedError: `pruned` (exit 4) for a thread with a mark and no row: its
                keys expired; nothing is written.
        """
        with server_errors(self.location):
            mark = read_mark(self._client, thread_id)
            has_row = self._client.exists(keys.ledger_key(thread_id))
        if mark is not None and not has_row:
            raise pruned_refusal(Tombstone(thread_id, mark.final_status, mark.pruned_at))
        return super().create(thread_id, max_attempts)

    def count(self, thread_id: str) -> LedgerEntry:
        """As `RedisLedger.count`, once a thread that carries a TTL has lost it (`keep_alive`).

        A thread that counts an attempt can continue; one stored by a version that let a
        fork keep its finished thread's TTL (or edited by hand) is repaired here, before
        the attempt is counted, so it never expires (INVARIANTS I10).

        Raises:
            RefusedError: `pruned` (exit 4) when some of its keys may have expired;
                nothing is counted.
        """
        with server_errors(self.location):
            keep_alive(self._client, thread_id, self._token(thread_id))
        return super().count(thread_id)
