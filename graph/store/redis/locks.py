"""One writer per thread in Redis: a lease the holder renews while it works, with fencing.

`hold` sets the thread's lock key (`graph.store.redis.keys.LOCK`) to a random token with
`SET NX PX LEASE`: it fails at once when another process holds it (`BusyError`, exit 5;
INVARIANTS I8). While the block runs, a background thread renews the lease every third
of it, only if the key still holds this token. A holder that dies (`kill -9` included)
stops renewing, so its lock is taken over once the lease runs out, never before. A
holder that is paused past its lease (SIGSTOP, a long garbage collection, a network
partition) may find another process holding the thread when it wakes; it can no longer
write anything of the thread (count, claim, log row, checkpoint, writes, decisions,
tombstone, TTL, trim, deletion), because each write is a script that compares the lock key
with this process's token on the server (`graph.store.redis.lua`): fencing, not timing,
keeps the budget and the thread. It exits 5 `busy`.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from graph.errors import BusyError
from graph.store.redis.conn import server_errors
from graph.store.redis.keys import lock_key
from graph.store.rows import damaged

if TYPE_CHECKING:
    import redis

__all__ = ["LEASE_MS", "RedisThreadLocks"]

LEASE_MS = 15_000
"""How long a lock outlives its last renewal (milliseconds): a killed holder's thread is
taken over after at most this long."""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisThreadLocks:
    """Per-thread writer leases in one Redis database.

    Args:
        client: A client of the server (a pool: the renewals run on other threads).
        location: The redacted URL, for messages.
        lease_ms: The lease (milliseconds); renewed every third of it.
    """

    def __init__(self, client: redis.Redis, location: str, *, lease_ms: int = LEASE_MS) -> None:
        self._client = client
        self.location = location
        self.lease_ms = lease_ms
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._held: dict[str, str] = {}
        self._stops: dict[str, threading.Event] = {}
        self._guard = threading.Lock()

    def token(self, thread_id: str) -> str | None:
        """This process's token for the thread while it holds the lock here, else None.

        The token stays until the block ends, even when the lease was lost: the
        ledger's scripts then refuse it (fencing).
        """
        with self._guard:
            return self._held.get(thread_id)

    @contextmanager
    def hold(self, thread_id: str) -> Iterator[None]:
        """Holds the thread's lease for the block, renewing it; fails at once if taken.

        Raises:
            BusyError: Another process (or another `hold` here) has the lease (exit 5).
            RefusedError: `damaged` (exit 4): the lock key is not a string (no holder
                writes that); it is left as it is.
            DatabaseLostError: The server was lost (exit 6).
        """
        token = secrets.token_hex(16)
        key = lock_key(thread_id)
        with server_errors(self.location):
            taken = self._client.set(key, token, nx=True, px=self.lease_ms)
            kind = None if taken else self._client.type(key)
        if kind not in (None, b"string", "string", b"none", "none"):
            raise damaged("thread_locks", f"thread {thread_id!r}'s lock key is a {kind!r}, "
                          "not a holder's token").at(location=self.location)
        if not taken:
            raise BusyError.for_thread(thread_id).at(location=self.location)
        stop = threading.Event()
        with self._guard:
            self._held[thread_id], self._stops[thread_id] = token, stop
        renewer = threading.Thread(target=self._keep, args=(key, token, stop),
                                   name=f"lease {thread_id[:40]}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()
            with self._guard:
                del self._held[thread_id], self._stops[thread_id]
            self._let_go(key, token)

    def _keep(self, key: bytes, token: str, stop: threading.Event) -> None:
        """Renews the lease every third of it until `stop`, or until it is no longer ours."""
        import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

        while not stop.wait(self.lease_ms / 3000):
            try:
                if not self._renew(keys=[key], args=[token, self.lease_ms]):
                    return  # lost: the ledger refuses this token from now on
            except redis.RedisError:
                continue  # the server may come back within the lease

    def _let_go(self, key: bytes, token: str) -> None:
        """Deletes the lock if it still holds `token`; a lost server lets it expire instead."""
        import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

        try:
            self._release(keys=[key], args=[token])
        except redis.RedisError:
            pass  # the lease runs out by itself

    def fence(self, thread_id: str) -> str:
        """The fencing hook (`graph.store.base.WriterLocks.fence`): the token a write carries.

        While this object holds the thread, its token, unchecked here: the write's script
        compares it with the lock key on the server (`graph.store.redis.lua`), in the same
        step as the write. Otherwise '' after checking that nobody holds the thread (the
        script checks that again: '' passes only while no lock key exists).

        Raises:
            BusyError: Another process holds the thread's lease, this one not (exit 5).
            DatabaseLostError: The server was lost (exit 6).
        """
        token = self.token(thread_id)
        if token is not None:
            return token
        if self.held_elsewhere(thread_id):
            raise BusyError.for_thread(thread_id).at(location=self.location)
        return ""

    def held_elsewhere(self, thread_id: str) -> bool:
        """True when someone other than a `hold` of this object has the thread's lease.

        For readers that must report "busy" as a writer would, without taking anything.
        """
        with server_errors(self.location):
            holder = self._client.get(lock_key(thread_id))
        mine = self.token(thread_id)
        return holder is not None and (mine is None or holder != mine.encode())

    def close(self) -> None:
        """Stops renewing; each lease still held is released as its `hold` block ends."""
        with self._guard:
            stops = list(self._stops.values())
        for stop in stops:
            stop.set()
