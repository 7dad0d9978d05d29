"""Opens a Redis checkpoint database: LangGraph's `RedisSaver`, our ledger, tables and leases.

A `redis://`, `rediss://` or `unix://` URL names a database on a Redis >= 7.2 or
Valkey >= 8 server with the RedisJSON and RediSearch modules (`RedisSaver` needs
both). What this backend promises and how:

* The attempt ledger is a set of Lua scripts (`graph.store.redis.ledger`), each claim fsynced
  to the server's append-only file before it returns; a writer refuses a server whose
  persistence cannot give that (`db_not_durable`, exit 2) before anything is counted.
* One writer per thread: a renewed lease with fencing (`graph.store.redis.locks`), checked
  by the ledger's scripts themselves.
* Our tables as keys of `graph.store.redis.keys` (`graph.store.redis.tables`,
  `graph.store.redis.approvals`); whole-thread operations in `graph.store.redis.backend`.
* Finished threads expire by TTL, leaving a mark read as a tombstone (`graph.store.redis.ttl`).
* Summaries of finished threads are not kept (`graph.store.poll` answers from SQL stores only).

The checkpointer is `graph.store.redis.saver.CheckedRedisSaver` (digests per checkpoint): see `_saver`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from graph.errors import BusyError, DatabaseLostError, ErrorCode, RefusedError, UsageError
from graph.store.base import ReadOnlyLocks, Store, WriterLocks
from graph.store.redis import keys
from graph.store.redis.approvals import RedisApprovals
from graph.store.redis.conn import connect, server_errors
from graph.store.redis.expiring import ExpiringLedger, ExpiringTombstones
from graph.store.redis.locks import RedisThreadLocks
from graph.store.redis.tables import RedisAttemptLog
from graph.store.redis.ttl import TtlBackend, ttl_ages
from graph.store.rows import damaged
from graph.store.urls import redact

if TYPE_CHECKING:
    import redis

__all__ = ["CHECKPOINT_INDEX", "MODULE_PROBE", "SETUP_LOCK", "SETUP_TIMEOUT_S", "STORE_ID",
           "open_redis"]

CHECKPOINT_INDEX = "checkpoint"
"""The search index `RedisSaver.setup()` creates (its checkpoint prefix): our set-up marker."""
SETUP_LOCK = f"{keys.PREFIX}setup"
MODULE_PROBE = f"{keys.PREFIX}module-probe"
"""Never written: `JSON.TYPE` of it answers nil when RedisJSON is loaded (an unknown command
otherwise). Not `SETUP_LOCK`, a string while another process sets the database up."""
STORE_ID = f"{keys.PREFIX}store_id"
"""A random id, set once, that queued jobs carry (`graph.fleet.worker.run_step` compares it)."""
"""Held (a string with a lease) by the one process setting the indexes up."""
SETUP_TIMEOUT_S = 60.0
"""How long a process waits for another one's set-up (seconds)."""


def _saver(client: redis.Redis) -> Any:
    """The checked checkpointer on `client` (`graph.store.redis.saver`; indexes not yet set up)."""
    # The saver imports redis and langgraph-checkpoint-redis at its top: only once
    # `graph.store.redis.conn.connect` has refused a missing extra with its usage error.
    from graph.store.redis.saver import CheckedRedisSaver  # noqa: PLC0415 - the redis extra

    return CheckedRedisSaver(redis_client=client)


def _no_token(_thread_id: str) -> str | None:
    """A reader holds no lease."""
    return None


def _index_names(client: redis.Redis, location: str) -> set[str]:
    """The names of the search indexes on the server (`FT._LIST`), after probing RedisJSON.

    One short reply: `FT.INFO`, which upstream's `setup()` sends for each of its two
    indexes to learn whether it exists, answers about a thousand fields each, and parsing
    those was most of the CPU of opening a store.

    Raises:
        UsageError: `usage` (exit 2): the server lacks the RediSearch or RedisJSON module
            (`FT.*`, `JSON.*` unknown), which `RedisSaver` needs; nothing was written.
    """
    import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    with server_errors(location):
        try:
            _probe_json(client)
            found = client.execute_command("FT._LIST")
        except redis.ResponseError as exc:
            if "unknown command" in str(exc).lower():
                raise UsageError(f"the Redis server lacks the RediSearch and RedisJSON modules "
                                 f"that LangGraph's RedisSaver needs ({str(exc)[:80]}); see "
                                 "the README's Redis section", location=location) from None
            raise
    return {name.decode() if isinstance(name, bytes) else str(name) for name in found or []}


def _documents_since(checkpointer: Any, location: str) -> None:
    """Sets `graph.store.redis.digests.DOCUMENTS_SINCE` once (a writer), checking its shape.

    Raises:
        RefusedError: `damaged` (exit 4), naming the key: not a string holding an id.
    """
    with server_errors(location):
        try:
            checkpointer.digests.documents_since(create=True)
        except ValueError as exc:
            raise damaged("checkpoint_digests", str(exc)).at(location=location) from None


def _probe_json(client: redis.Redis) -> None:
    """Asks `JSON.TYPE` of `MODULE_PROBE`: an unknown command without RedisJSON.

    The key is a probe, never data: whatever someone stored there (a string answers
    "wrong Redis type") still shows the command exists, so it never turns into a refusal.

    Raises:
        redis.ResponseError: The command is unknown (no RedisJSON), or another refusal.
    """
    import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    try:
        client.execute_command("JSON.TYPE", MODULE_PROBE)  # a key never written: nil
    except redis.ResponseError as exc:
        if "unknown command" in str(exc).lower():
            raise  # any other answer ("Existing key has wrong Redis type") came from RedisJSON


def _set_up(checkpointer: Any, client: redis.Redis, location: str) -> None:
    """Runs `RedisSaver.setup()` holding `SETUP_LOCK`, so concurrent first runs do not race.

    Its `FT.CREATE`s fail when another process created the index in between; the lock
    serializes them, and a process that finds the indexes there creates nothing.

    Raises:
        BusyError: Another process held the set-up lock for `SETUP_TIMEOUT_S` (exit 5).
        RefusedError: `damaged` (exit 4): the lock's key holds another type than a string
            (it was waited on for 60 s, then exit 5, on every run).
        DatabaseLostError: The server refused the indexes (`db_write_failed`, exit 6).
    """
    from redisvl.exceptions import RedisVLError  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    token, deadline = secrets.token_hex(16), time.monotonic() + SETUP_TIMEOUT_S
    with server_errors(location):
        kind = client.type(SETUP_LOCK)
        if kind not in (b"none", b"string", "none", "string"):  # never ours: not a lock to wait out
            raise RefusedError(f"{SETUP_LOCK} is a {kind.decode() if isinstance(kind, bytes) else kind}"
                               ", not the set-up lock's string: changed outside this program; "
                               "delete the key", error_code=ErrorCode.DAMAGED, location=location)
        while not client.set(SETUP_LOCK, token, nx=True, px=int(SETUP_TIMEOUT_S * 1000)):
            if time.monotonic() > deadline:
                raise BusyError("another process has been setting this Redis database up for "
                                f"{SETUP_TIMEOUT_S:.0f} s; run again", location=location)
            time.sleep(0.05)
        try:
            checkpointer.setup()  # creates the indexes only when missing
        except RedisVLError as exc:
            raise DatabaseLostError(f"the Redis server refused LangGraph's search indexes: "
                                    f"{str(exc)[:200]}", error_code=ErrorCode.DB_WRITE_FAILED,
                                    location=location) from None
        finally:
            if client.get(SETUP_LOCK) == token.encode():
                client.delete(SETUP_LOCK)


def _store_id(client: redis.Redis, location: str, *, write: bool) -> str | None:
    """The database's `STORE_ID`; on a database without threads set now when `write`.

    The id is data, not a cache: queued jobs carry it (`graph.fleet.worker.run_step`), so
    one replaced by a new one would make them all fail as `identity_mismatch`. It is
    created (once, `SET NX`) only while the database holds no thread (no ledger key).

    Raises:
        RefusedError: `damaged` (exit 4), naming the key: it is not a string of 32 hex
            digits, or it is missing from a database that holds threads.
    """
    import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    with server_errors(location):
        try:
            found = client.get(STORE_ID)
            if found is None and _has_threads(client):
                raise damaged("store_id", f"{STORE_ID} is missing from a database that holds "
                              "threads; queued jobs name the old id").at(location=location)
            if found is None and write:
                client.set(STORE_ID, secrets.token_hex(16), nx=True)
                found = client.get(STORE_ID)
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            raise damaged("store_id", f"{STORE_ID} is not a string").at(
                location=location) from None
    if found is None:
        return None
    text = found.decode("ascii", "replace") if isinstance(found, bytes) else str(found)
    if len(text) != 32 or any(c not in "0123456789abcdef" for c in text):
        raise damaged("store_id", f"{STORE_ID} does not hold 32 hex digits").at(location=location)
    return text


def _has_threads(client: redis.Redis) -> bool:
    """Whether any thread's ledger hash exists (`SCAN` until the first one)."""
    return next(iter(client.scan_iter(match=keys.pattern(keys.LEDGER), count=1000)), None) is not None


@contextmanager
def open_redis(url: str, *, create: bool = True, read_only: bool = False) -> Iterator[Store]:
    """Connects, checks the server keeps claims on disk, sets the indexes up, yields the store.

    Args:
        url: The `redis://` (or `rediss://`, `unix://`) URL.
        create: Allow setting up a database that was never set up (a new thread);
            resuming, history and verification refuse it instead.
        read_only: Never write: no set-up, no leases, no durability check (history).

    Yields:
        The open store; closed on exit.

    Raises:
        UsageError: `db_unreachable` or `db_not_durable` (exit 2).
        RefusedError: `no_such_file` for a database that was never set up (exit 4).
    """
    location = redact(url)
    client = connect(url)
    saver_client = None
    try:
        locks: WriterLocks
        tokens: Callable[[str], str | None]
        if read_only:
            locks, tokens = ReadOnlyLocks(), _no_token
        else:
            redis_locks = RedisThreadLocks(client, location)
            locks, tokens = redis_locks, redis_locks.fence
        ledger = ExpiringLedger(client, location, tokens=tokens)
        if not read_only:
            ledger.check_durable()  # before anything is written
        indexes = _index_names(client, location)
        if CHECKPOINT_INDEX not in indexes and (read_only or not create):
            raise RefusedError(f"{location} holds no mandapi-resume checkpoint database",
                               error_code=ErrorCode.NO_SUCH_FILE)
        saver_client = connect(url)
        checkpointer = _saver(saver_client)
        set_up = checkpointer.setup_found(indexes)  # else upstream's setup() creates them
        if read_only:
            if not set_up:
                with server_errors(location):
                    checkpointer.setup()  # as before: the writes' index of an older database
        else:
            if not set_up:
                _set_up(checkpointer, client, location)
            checkpointer.fence_with(redis_locks.fence)
            _documents_since(checkpointer, location)
        backend = TtlBackend(client, location, checkpointer, ledger, tokens=tokens,
                             ages=ttl_ages() if not read_only else {}, hold=locks.hold)
        store = Store(location, checkpointer, backend,
                      ledger, RedisAttemptLog(client, location, tokens=tokens),
                      ExpiringTombstones(client, location, tokens=tokens),
                      RedisApprovals(client, location, tokens=tokens), locks, (saver_client, client),
                      store_id=_store_id(client, location, write=not read_only))
    except BaseException:
        for conn in (saver_client, client):
            if conn is not None:
                conn.close()
        raise
    try:
        yield store
    finally:
        store.close()
