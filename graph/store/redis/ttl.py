"""Retention by time-to-live on Redis: a finished thread's keys expire on their own.

When a step leaves a thread finished (`done`, `exhausted`, `cancelled`, nothing pending:
`graph.step.finished.remember_finished`), `TtlBackend.expire_finished` gives every key of
the thread (LangGraph's checkpoint, latest-pointer, write and write-registry keys, our
ledger hash, attempt log, decisions, digest hashes, their set and the saved set) one
expiry time, `GRAPH_TTL_COMPLETED` after now for `done` (default 24h) and
`GRAPH_TTL_FAILED` for `exhausted` and `cancelled` (default 7d): the ages of
`graph.prune --completed/--failed`, in the same form (`90s`, `30m`, `24h`, `7d`; `0s`
expires at once). Threads that can continue never get a TTL (INVARIANTS I10); a finished
thread cannot continue, so no key is ever made persistent again.

The same Lua script writes the thread's *expiry mark*, a hash without TTL
(`mandapi-resume:expiring:<thread>`: `final_status`, `expires_at_ms` by the server's
clock, `checkpoints` counted then), and the step is made durable (`WAITAOF`). While
the thread is whole the mark changes nothing; it acts as a tombstone
(`graph.store.redis.expiring.ExpiringTombstones`) once the expiry time has passed, the ledger
hash is gone, or fewer checkpoints are left than were counted: Redis removes each key on
its own, and a thread missing any part is refused as `pruned` (exit 4), never resumed
or restarted with a fresh budget (`read_mark`, `expired`). `--restart-pruned` starts it anew as after
`graph.prune`, which also sweeps the leftovers of expired threads, turning their marks
into ordinary tombstones.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from graph.errors import BusyError, RefusedError
from graph.store.ages import parse_age
from graph.store.checks import pruned_refusal
from graph.store.redis import keys
from graph.store.redis import lua as redis_lua
from graph.store.redis.backend import RedisBackend, checkpoint_thread
from graph.store.redis.conn import server_errors
from graph.store.redis.tables import decoded
from graph.store.rows import FINAL_STATUSES, Tombstone, damaged

if TYPE_CHECKING:
    import redis

__all__ = ["COMPLETED_ENV", "DEFAULT_COMPLETED", "DEFAULT_FAILED", "EXPIRING", "FAILED_ENV", "Mark",
           "TtlBackend", "carries_ttl", "checkpoint_keys", "expired", "keep_alive", "mark_key",
           "read_mark", "thread_keys", "ttl_ages"]

COMPLETED_ENV = "GRAPH_TTL_COMPLETED"
"""The time-to-live of a `done` thread's keys (default `DEFAULT_COMPLETED`)."""
FAILED_ENV = "GRAPH_TTL_FAILED"
"""The time-to-live of an `exhausted` or `cancelled` thread's keys (default `DEFAULT_FAILED`)."""
DEFAULT_COMPLETED = "24h"
DEFAULT_FAILED = "7d"
EXPIRING = f"{keys.PREFIX}expiring:"
"""A hash per finished thread (module doc): `final_status`, `expires_at_ms`, `checkpoints`."""

_EXPIRE = """
local lock = redis.call('GET', KEYS[2])
if ARGV[1] == '' then
  if lock then return -1 end
elseif lock ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local at = redis.call('HGET', KEYS[1], 'expires_at_ms')
if not at then
  local now = redis.call('TIME')
  at = string.format('%.0f', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
                     + tonumber(ARGV[3]))
  redis.call('HSET', KEYS[1], 'final_status', ARGV[2], 'expires_at_ms', at,
             'checkpoints', ARGV[4])
end
for i = 3, #KEYS do redis.call('PEXPIREAT', KEYS[i], at) end
return 1
"""
"""KEYS: mark, lock, ledger, then every other key of the thread. ARGV: lease token,
final_status, TTL (ms), checkpoints. A thread already marked keeps its first expiry time
(a later key gets the same one); fenced by the lease like the ledger's scripts: the
holder's token, or '' while nobody holds the thread (an `update_state` outside an
invocation block, `graph.api`)."""

_SETTLE = """
local lock = redis.call('GET', KEYS[2])
if ARGV[3] == '' or lock ~= ARGV[3] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('HSET', KEYS[3], 'final_status', ARGV[1], 'pruned_at', ARGV[2])
end
for i = 4, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('DEL', KEYS[1])
return 1
"""
"""KEYS: mark, lock, tombstone, then the thread's remaining keys. ARGV: final_status,
pruned_at, lease token. An expired thread's mark becomes an ordinary tombstone."""

_RECOUNT = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'checkpoints', ARGV[1]) end
return 1
"""
"""KEYS: mark. ARGV: checkpoints left. A mark deleted meanwhile is not written again."""

_PERSIST = redis_lua.PRELUDE + r"""
local refused = fenced(KEYS[1], ARGV[1])
if refused then return refused end
local at = redis.call('HGET', KEYS[2], 'expires_at_ms')
if at then
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  if ms >= tonumber(at) or redis.call('EXISTS', KEYS[3]) == 0 then return {'pruned'} end
end
for i = 3, #KEYS do redis.call('PERSIST', KEYS[i]) end
redis.call('DEL', KEYS[2])
return {'ok'}
"""
"""KEYS: the thread's lock, mark, ledger, then every other key of the thread. ARGV: the
writer's lease token. Fenced as every write of a thread (`graph.store.redis.lua`): a
writer that lost its lease answers `busy` and leaves a finished thread's TTL and mark
alone. Refuses (`pruned`) a thread whose mark's expiry time has passed or whose ledger
hash is gone: some of its keys may have expired already; else every key loses its TTL
and the mark is deleted, at once."""


def mark_key(thread_id: str) -> bytes:
    """The thread's expiry mark."""
    return (EXPIRING + thread_id).encode("utf-8", "surrogateescape")


def ttl_ages(environ: Mapping[str, str] | None = None) -> dict[str, timedelta]:
    """The time-to-live of each final status, from `GRAPH_TTL_COMPLETED` and `GRAPH_TTL_FAILED`.

    Raises:
        UsageError: A value not of the form `90s`, `30m`, `24h`, `7d` (exit 2).
    """
    env = os.environ if environ is None else environ
    completed = parse_age(env.get(COMPLETED_ENV) or DEFAULT_COMPLETED, COMPLETED_ENV)
    failed = parse_age(env.get(FAILED_ENV) or DEFAULT_FAILED, FAILED_ENV)
    return {"done": completed, "exhausted": failed, "cancelled": failed}


def checkpoint_keys(client: redis.Redis, thread_id: str) -> list[bytes]:
    """The thread's `checkpoint:` keys (one per checkpoint), found by `SCAN`."""
    return [key for key in keys.langgraph_keys(client, thread_id) if checkpoint_thread(key) == thread_id]


def thread_keys(client: redis.Redis, thread_id: str) -> list[bytes]:
    """Every key of the thread but its ledger hash, lock and mark (module doc), found now.

    Only members of the digest set that name one of this thread's digest hashes: a
    foreign member (damage: `RedisDigests.check_sets` refuses it on every read) never
    makes a TTL or a deletion reach another thread's key.
    """
    found = keys.langgraph_keys(client, thread_id)
    digests = keys.digests_key(thread_id)
    found += sorted(member for member in cast("set[bytes]", client.smembers(digests))
                    if keys.is_own_digest(thread_id, member))
    return [*found, digests, keys.saved_key(thread_id), keys.log_key(thread_id),
            keys.approvals_key(thread_id)]


_FIELDS = {"final_status", "expires_at_ms", "checkpoints"}


@dataclass(frozen=True)
class Mark:
    """A thread's expiry mark: its final status, expiry time (ms since the epoch), checkpoints."""

    final_status: str
    expires_at_ms: int
    checkpoints: int

    @property
    def pruned_at(self) -> str:
        """The expiry time, UTC, ISO 8601 to the second (a tombstone's `pruned_at`)."""
        return datetime.fromtimestamp(self.expires_at_ms / 1000, UTC).isoformat(timespec="seconds")


def read_mark(client: redis.Redis, thread_id: str) -> Mark | None:
    """The thread's mark, or None.

    Raises:
        RefusedError: `damaged` (in `thread_tombstones`) for a mark of the wrong form:
            another field set, a status that is not final, a time or count that is not
            a whole number, or no checkpoint counted (`expired` could then never see
            one go missing).
    """
    import redis as redis_lib  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    key = mark_key(thread_id)
    try:
        raw = cast("dict[bytes, bytes]", client.hgetall(key))
    except redis_lib.ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        raise damaged("thread_tombstones", f"thread {thread_id!r}: its expiry mark {keys.shown(key)} is "
                      "not a hash") from None
    if not raw:
        return None
    fields = {decoded("thread_tombstones", k): decoded("thread_tombstones", v) for k, v in raw.items()}
    numbers = (fields.get("expires_at_ms", ""), fields.get("checkpoints", ""))
    if (set(fields) != _FIELDS or fields["final_status"] not in FINAL_STATUSES
            or not all(n.isascii() and n.isdigit() and len(n) <= 15 for n in numbers)
            or int(numbers[1]) < 1):  # a finished thread has at least its latest checkpoint
        raise damaged("thread_tombstones", f"thread {thread_id!r}: its expiry mark {keys.shown(key)} "
                      "has the wrong form")
    return Mark(fields["final_status"], int(numbers[0]), int(numbers[1]))


def expired(client: redis.Redis, thread_id: str, mark: Mark,
            checkpoints: Counter[str] | None = None) -> bool:
    """True once the marked thread is not whole (module doc).

    Args:
        client: The server's client.
        thread_id: The marked thread.
        mark: Its mark (`read_mark`).
        checkpoints: Checkpoint keys per thread id, counted by one `SCAN` for many
            threads; None counts this thread's now.
    """
    seconds, micros = client.time()
    if int(seconds) * 1000 + int(micros) // 1000 >= mark.expires_at_ms:
        return True
    if not client.exists(keys.ledger_key(thread_id)):
        return True
    left = (len(checkpoint_keys(client, thread_id)) if checkpoints is None
            else checkpoints[thread_id])
    return left < mark.checkpoints


def carries_ttl(client: Any, thread_id: str, *, every_key: bool = False) -> bool:
    """True when the thread has an expiry mark or one of its keys has a TTL.

    Every step asks before it counts (`keep_alive`): one round trip reading the mark and
    the TTLs of the keys named by the thread id alone (ledger hash, attempt log, saved and
    digest sets, decisions). With `every_key` (`graph.verify`, copy) the checkpoint,
    write and digest keys are found (`thread_keys`, a `SCAN`) and read too: a TTL an
    outside hand set on any of them is reported (issue 28's second attack set one on the
    log, the sets and the checkpoints of a thread that could continue).
    """
    named = [keys.ledger_key(thread_id), keys.log_key(thread_id), keys.saved_key(thread_id),
             keys.digests_key(thread_id), keys.approvals_key(thread_id)]
    found = thread_keys(client, thread_id) if every_key else []
    with client.pipeline(transaction=False) as pipe:
        pipe.exists(mark_key(thread_id))
        for key in dict.fromkeys([*named, *found]):
            pipe.pttl(key)
        marked, *ttls = pipe.execute()
    return bool(marked) or any(int(ttl) >= 0 for ttl in ttls)


def keep_alive(client: Any, thread_id: str, token: str) -> bool:
    """Takes the TTL off every key of a thread that can continue, and deletes its mark.

    Called before a thread that carries a TTL (`carries_ttl`) gets a new checkpoint (a
    fork, `update_state`: `graph.store.redis.exact.ExactRedisSaver.put`) or counts an
    attempt (`graph.store.redis.expiring.ExpiringLedger.count`): either way it can
    continue, and such a thread never expires (INVARIANTS I10). When the step leaves it
    finished again, `TtlBackend.expire_finished` gives it a new TTL. One script: every
    key found now (`thread_keys`) is made persistent and the mark deleted together,
    only while `token` (the writer's lease token, '' for none) is still current.

    Returns:
        False when nothing carried a TTL (nothing written), True when keys were kept.

    Raises:
        RefusedError: `pruned` (exit 4) when the thread's expiry time has passed, its
            ledger hash is gone or it holds fewer checkpoints than its mark counted
            (`expired`): some keys may have expired, so it is never continued; nothing
            is written. `damaged` for a mark of the wrong form.
        BusyError: The thread's lease is another's, or this writer lost it (exit 5);
            nothing is written.
    """
    if not carries_ttl(client, thread_id):
        return False
    mark = read_mark(client, thread_id)
    if mark is not None and expired(client, thread_id, mark):
        # a key of it is gone already (fewer checkpoints than the mark counted): never
        # continued, as a step is not (an update_state revived such a thread)
        raise pruned_refusal(Tombstone(thread_id, mark.final_status, mark.pruned_at))
    found = thread_keys(client, thread_id)
    reply = client.register_script(_PERSIST)(
        keys=[keys.lock_key(thread_id), mark_key(thread_id), keys.ledger_key(thread_id), *found],
        args=[token])
    if redis_lua.answer(reply, thread_id, None)[0] == "pruned":
        final = mark or Mark("done", 0, 0)
        raise pruned_refusal(Tombstone(thread_id, final.final_status, final.pruned_at))
    return True


class TtlBackend(RedisBackend):
    """`RedisBackend` with retention by TTL (module doc).

    Args:
        ages: The time-to-live of each final status (`ttl_ages`).
        hold: The store's `locks.hold` (the sweep holds each thread it settles).
        *args: As `RedisBackend`.
        **kwargs: As `RedisBackend`.
    """

    def __init__(self, *args: Any, ages: dict[str, timedelta],
                 hold: Callable[[str], AbstractContextManager[None]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ages = ages
        self._hold = hold
        self._expire = self._client.register_script(_EXPIRE)
        self._settle = self._client.register_script(_SETTLE)
        self._recount = self._client.register_script(_RECOUNT)

    def expire_finished(self, thread_id: str, status: str) -> None:
        """Gives every key of the finished thread its TTL and writes its mark, on disk.

        Hold the thread's lock, or let nobody hold it (fenced as every write). Nothing
        for a status that can continue, or a thread without a ledger hash (already
        expired or pruned).

        Raises:
            BusyError: Another process holds the thread's lease, or this one lost it
                (exit 5); nothing changed.
            NotDurableError: Not confirmed on disk (exit 6); the keys may expire anyway.
        """
        if status not in FINAL_STATUSES or status not in self._ages:
            return  # a read-only store has no ages
        ttl_ms = int(self._ages[status] / timedelta(milliseconds=1))
        with server_errors(self.location):
            found = thread_keys(self._client, thread_id)
            checkpoints = sum(1 for key in found if checkpoint_thread(key) == thread_id)
            done = self._expire(keys=[mark_key(thread_id), keys.lock_key(thread_id),
                                      keys.ledger_key(thread_id), *found],
                                args=[self._tokens(thread_id) or "", status, ttl_ms, checkpoints])
        if done == -1:
            raise BusyError("its writer lease is not this process's; no TTL was set",
                            thread_id=thread_id, location=self.location)
        self._ledger.make_durable(f"thread {thread_id!r} has its TTL, but")

    def carries_ttl(self, thread_id: str) -> bool:
        """True when the thread has an expiry mark or any of its keys a TTL.

        `carries_ttl` with every key, for verify and copy.
        """
        with server_errors(self.location):
            return carries_ttl(self._client, thread_id, every_key=True)

    def trim(self, thread_id: str, keep: int | None) -> int:
        """`RedisBackend.trim`; a marked thread's mark then counts the checkpoints left.

        Without the recount, a finished thread trimmed by `graph.prune` would have fewer
        checkpoints than its mark counted and read as expired (`expired`) long before
        its expiry time.
        """
        deleted = super().trim(thread_id, keep)
        if deleted:
            with server_errors(self.location):
                left = len(checkpoint_keys(self._client, thread_id))
                self._recount(keys=[mark_key(thread_id)], args=[left])
        return deleted

    def buried_with_checkpoints(self) -> set[str]:
        """Tombstoned threads with checkpoints, and the expired ones settled now.

        Each expired thread's mark (`expired`) becomes an ordinary
        tombstone and its remaining keys are deleted, holding its lock (a busy one is left
        for the next prune). A thread whose mark is damaged is left as it is, as
        `graph.threads.retention.select` leaves an unreadable thread: reading it refuses it
        (exit 4, naming the mark's key), and `prune --dry-run` and `prune` both keep it
        and do the rest. `graph.store.base.Store.sweep_buried` is the caller.
        """
        with server_errors(self.location):
            marked = [keys.suffix(key, EXPIRING)
                      for key in self._client.scan_iter(match=keys.pattern(EXPIRING), count=1000)]
        settled = set()
        for thread_id in marked:
            try:
                with self._hold(thread_id), server_errors(self.location):
                    try:
                        mark = read_mark(self._client, thread_id)
                    except RefusedError:
                        continue  # damaged: kept, and refused per thread (`read_mark`)
                    if mark is None or not expired(self._client, thread_id, mark):
                        continue
                    self._settle(keys=[mark_key(thread_id), keys.lock_key(thread_id),
                                       keys.tombstone_key(thread_id), keys.ledger_key(thread_id),
                                       *thread_keys(self._client, thread_id)],
                                 args=[mark.final_status, mark.pruned_at,
                                       self._tokens(thread_id) or ""])
                self._ledger.make_durable(f"thread {thread_id!r} is settled, but")
            except BusyError:
                continue
            settled.add(thread_id)
        return settled | super().buried_with_checkpoints()
