"""The operations of a Redis store on whole threads (`graph.store.base.Backend`).

LangGraph's `RedisSaver` keeps each checkpoint as a JSON document under
`checkpoint:<thread>:<namespace>:<checkpoint id>` (the root namespace written as a
sentinel without `:`, checkpoint ids UUIDs), so the thread of a checkpoint key is all
but its last two `:`-separated parts, even for thread ids holding `:`. Threads and
checkpoints are counted from those keys (`SCAN`), never by decoding a document.

Burying a thread (INVARIANTS I10) is one Lua script: the tombstone is written and the
thread's ledger row, attempt log and decisions deleted together, a single atomic step
in the append-only file, made durable (`WAITAOF`) before LangGraph's `delete_thread`
removes the checkpoints. A crash in between leaves a tombstoned thread with
checkpoints, refused as `pruned` and swept by the next prune (`buried_with_checkpoints`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graph.errors import BusyError
from graph.store.redis import keys
from graph.store.redis.conn import server_errors
from graph.store.rows import Tombstone, damaged

if TYPE_CHECKING:
    import redis

    from graph.store.redis.ledger import RedisLedger

__all__ = ["CHECKPOINT_PREFIX", "RedisBackend", "checkpoint_thread"]

CHECKPOINT_PREFIX = "checkpoint:"
"""The start of `RedisSaver`'s checkpoint keys (its default `checkpoint_prefix`)."""

_BURY = """
local lock = redis.call('GET', KEYS[5])
if ARGV[3] == '' or lock ~= ARGV[3] then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'final_status', ARGV[1], 'pruned_at', ARGV[2])
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
"""
"""KEYS: tombstone, ledger, log, decisions, lock. ARGV: final_status, pruned_at, lease token.
Fenced like the ledger's scripts: only the holder of the thread's current lease buries it."""


def checkpoint_thread(key: bytes) -> str | None:
    """The thread id of a `RedisSaver` checkpoint key, or None for a key of another form."""
    text = key.decode("utf-8", "surrogateescape")
    parts = text[len(CHECKPOINT_PREFIX):].rsplit(":", 2)
    return parts[0] if text.startswith(CHECKPOINT_PREFIX) and len(parts) == 3 else None


class RedisBackend:
    """`Backend` of a Redis database (module doc).

    Args:
        client: A client of the server (`graph.store.redis.conn.connect`).
        location: The redacted URL, for messages.
        checkpointer: LangGraph's `RedisSaver` (or a checked saver over it) on the server.
        ledger: The store's ledger (its `make_durable`).
        tokens: This process's lease token for a thread (`RedisThreadLocks.token`), or None.
    """

    def __init__(self, client: redis.Redis, location: str, checkpointer: Any,
                 ledger: RedisLedger, tokens: Callable[[str], str | None]) -> None:
        self._client = client
        self._tokens = tokens
        self.location = location
        self._checkpointer = checkpointer
        self._ledger = ledger
        self._bury = client.register_script(_BURY)

    def commit(self) -> None:
        """Nothing: each write of ours is its own atomic command."""

    def _checkpoint_keys(self, match: str) -> list[bytes]:
        with server_errors(self.location):
            return list(self._client.scan_iter(match=match.encode(), count=1000))

    def checkpoint_thread_ids(self) -> set[str]:
        """Every thread id with a checkpoint key."""
        found = (checkpoint_thread(key) for key in self._checkpoint_keys(f"{CHECKPOINT_PREFIX}*"))
        return {thread_id for thread_id in found if thread_id is not None}

    def count_checkpoints(self, thread_id: str) -> int:
        """How many checkpoint keys the thread has."""
        found = self._checkpoint_keys(f"{CHECKPOINT_PREFIX}{keys.glob_escape(thread_id)}:*")
        return sum(1 for key in found if checkpoint_thread(key) == thread_id)

    def bury(self, tombstone: Tombstone) -> None:
        """The tombstone and the deletion of our keys in one script, on disk, then the checkpoints.

        Hold the thread's lock (`RedisThreadLocks.hold`): the script checks the lease.

        Raises:
            BusyError: This process does not hold the thread's current lease (exit 5);
                nothing was changed.
            NotDurableError: The script ran but its fsync was not confirmed (exit 6): the
                thread is already refused as `pruned`; its checkpoints stay until the
                next prune sweeps them.
        """
        thread_id = tombstone.thread_id
        self._ledger.check_durable()
        with server_errors(self.location):
            buried = self._bury(keys=[keys.tombstone_key(thread_id), keys.ledger_key(thread_id),
                                      keys.log_key(thread_id), keys.approvals_key(thread_id),
                                      keys.lock_key(thread_id)],
                                args=[tombstone.final_status, tombstone.pruned_at,
                                      self._tokens(thread_id) or ""])
        if not buried:
            raise BusyError("its writer lease is not this process's; it was not pruned",
                            thread_id=thread_id, location=self.location)
        self._ledger.make_durable(f"thread {thread_id!r} is buried, but")
        self._checkpointer.delete_thread(thread_id)

    def trim(self, thread_id: str, keep: int | None) -> int:
        """Deletes the thread's checkpoints older than its latest `keep` (`RedisSaver.prune`).

        Not one transaction: a kill midway leaves some older checkpoints, which the next
        trim deletes; the latest `keep` are never touched. Runs after every step, so it
        counts the thread's saved set (`SCARD`, one key) rather than `SCAN` the keyspace
        as `count_checkpoints` does: a checkpoint whose `put` was killed before it joined
        the set is not counted, so the window may hold one more until the next trim.
        Returns how many were deleted.
        """
        if keep is None:
            return 0
        if keep < 1:
            raise ValueError(f"a checkpoint window keeps at least 1, not {keep}")
        before = self._saved_count(thread_id)
        if before <= keep:
            return 0
        with server_errors(self.location):
            self._checkpointer.prune([thread_id], keep_last=keep)
        return before - self._saved_count(thread_id)

    def _saved_count(self, thread_id: str) -> int:
        """How many checkpoints of the thread finished their `put` (its saved set's size)."""
        with server_errors(self.location):
            return int(self._client.scard(keys.saved_key(thread_id)))

    def carries_ttl(self, thread_id: str) -> bool:
        """False: without retention by TTL (`graph.store.redis.ttl.TtlBackend`) nothing expires."""
        return False

    def check_lock(self, thread_id: str) -> None:
        """Refuses a lock key that is not a holder's token string (or absent).

        Raises:
            RefusedError: `damaged` (in `thread_locks`), naming the key; nothing changed.
        """
        key = keys.lock_key(thread_id)
        with server_errors(self.location):
            kind = self._client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind not in ("none", "string"):
            raise damaged("thread_locks", f"thread {thread_id!r}'s lock key {keys.shown(key)} "
                          f"is a {kind}, not a holder's token").at(location=self.location)

    def buried_with_checkpoints(self) -> set[str]:
        """Tombstoned thread ids that still have checkpoints (an interrupted `bury`)."""
        with server_errors(self.location):
            found = list(self._client.scan_iter(match=keys.pattern(keys.TOMBSTONE), count=1000))
        tombstoned = {keys.suffix(key, keys.TOMBSTONE) for key in found}
        return tombstoned & self.checkpoint_thread_ids()

    def used_bytes(self) -> int:
        """0: the server's memory is shared by every database on it."""
        return 0

    def reclaim_space(self) -> None:
        """Nothing: Redis frees a deleted key's memory at once."""

