"""Connections to a Redis (or Valkey) server, and its promise to keep a claim on disk.

A Redis server acknowledges a write before it reaches the disk unless told otherwise,
so a claim's request could leave and a crash of the server then forget the claim,
handing the attempt out again (INVARIANTS I1). The Redis backend therefore needs the
append-only file (`appendonly yes`) with `appendfsync always` or `everysec`, and after
each claim waits with `WAITAOF 1 0 TIMEOUT` until the claim is fsynced to the local AOF
(Redis >= 7.2, Valkey >= 8). `WAITAOF` waits for the writes of its own connection, so
the claim and its `WAITAOF` are sent in one pipeline on one connection; a client that
reconnected in between would get "on disk" for writes it never made there (and
commands are never retried, `connect`). With `appendfsync no` `WAITAOF` answers at once
without any fsync, so that setting is refused too, and so is an eviction policy that may
drop any key (`allkeys-*`: the ledger has no TTL, so `volatile-*` and `noeviction` keep
it). `check_durable` runs before anything
is counted. Importing this module needs no redis package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from graph.errors import DatabaseLostError, ErrorCode, NotDurableError, UsageError
from graph.store.redis.keys import FSYNC
from graph.store.urls import check_redis_url, redact

if TYPE_CHECKING:
    import redis

__all__ = ["CONNECT_TIMEOUT_S", "SOCKET_TIMEOUT_S", "WAITAOF", "WAITAOF_TIMEOUT_MS",
           "check_durable", "check_fsynced", "connect", "known_redis_error", "make_durable",
           "server_errors"]

WAITAOF_TIMEOUT_MS = 5_000
"""How long a claim waits for its fsync before the step gives up (milliseconds)."""
SOCKET_TIMEOUT_S = 30.0
"""A command that gets no answer for this long fails (`db_lost`), never hangs a step."""
CONNECT_TIMEOUT_S = 10.0
"""How long the TCP connect, and then a `rediss://` TLS handshake, may each take (seconds).

redis-py bounds only the TCP connect by its connect timeout and runs the TLS handshake
under the command timeout (`SOCKET_TIMEOUT_S`): a `rediss://` URL naming a plain server
(which waits for a line the handshake never sends) took 30 s to be refused as
`db_unreachable`. `connect` bounds the handshake by this too (`_connection_class`)."""
_FSYNC_POLICIES = ("always", "everysec")


def connect(url: str) -> redis.Redis:
    """A client (a connection pool, safe across threads) that answers bytes and never retries.

    Connects once (`PING`) so an unreachable server is refused before anything else.

    Args:
        url: A `redis://`, `rediss://` or `unix://` URL (database number in the path).

    Raises:
        UsageError: The redis extra is not installed or the URL is refused (`usage`,
            `check_redis_url`), or the server cannot be reached or refuses the login
            (`db_unreachable`; exit 2).
    """
    try:
        import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used
        from redis.backoff import NoBackoff  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used
        from redis.retry import Retry  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used
    except ImportError:
        raise UsageError("Redis needs the redis extra: pip install -e '.[redis]'") from None
    check_redis_url(url)
    try:
        extra = ({} if url.startswith("unix://")
                 else {"connection_class": _connection_class(url.startswith("rediss://"))})
        client = redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), retry_on_error=[],
                                      socket_timeout=SOCKET_TIMEOUT_S,
                                      socket_connect_timeout=CONNECT_TIMEOUT_S,
                                      decode_responses=False, **extra)
    except (ValueError, TypeError) as exc:  # redis-py's reading of the query string
        raise UsageError(f"the Redis URL {redact(url)!r} is not one the client can use: "
                         f"{_text(exc)[:160]}") from None
    try:
        client.ping()
    except (ValueError, TypeError) as exc:  # a query value read only as it connects
        client.close()
        raise UsageError(f"the Redis URL {redact(url)!r} is not one the client can use: "
                         f"{_text(exc)[:160]}") from None
    except redis.RedisError as exc:
        client.close()
        hint = (" (a rediss:// URL needs a server that speaks TLS)"
                if isinstance(exc, redis.TimeoutError) and url.startswith("rediss://") else "")
        raise UsageError(f"cannot reach the Redis server: {_text(exc)[:200]}{hint}",
                         error_code=ErrorCode.DB_UNREACHABLE, location=redact(url)) from None
    return client


@functools.cache
def _connection_class(tls: bool) -> type:
    """redis-py's TCP (`tls` False) or TLS connection, its handshake bounded like its connect.

    redis-py sets the command timeout on the socket once TCP is connected, and only then
    wraps it in TLS; this class keeps the connect timeout (`CONNECT_TIMEOUT_S`, read at
    each connect) on the socket until the connection is open, TLS handshake included,
    then sets the command timeout (`SOCKET_TIMEOUT_S`).
    """
    import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    def bounded(conn: Any, open_socket: Callable[[], Any]) -> Any:
        command_timeout = conn.socket_timeout
        conn.socket_timeout = conn.socket_connect_timeout  # what the handshake runs under
        try:
            sock = open_socket()
        finally:
            conn.socket_timeout = command_timeout
        sock.settimeout(command_timeout)
        return sock

    class TlsConnection(redis.SSLConnection):
        def _connect(self) -> Any:
            return bounded(self, super()._connect)

    class TcpConnection(redis.Connection):
        def _connect(self) -> Any:
            return bounded(self, super()._connect)

    return TlsConnection if tls else TcpConnection


@contextmanager
def server_errors(location: str | None = None) -> Iterator[None]:
    """Turns the client's failures in the block into errors with exit codes.

    Raises:
        DatabaseLostError: `db_lost` for a lost connection or a timeout, `db_write_failed`
            for a command the server refused (out of memory, a read-only replica, an AOF
            it cannot write); exit 6.
    """
    import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise DatabaseLostError(f"the Redis server was lost: {_text(exc)[:200]}",
                                location=location) from None
    except redis.ResponseError as exc:
        raise DatabaseLostError(f"the Redis server refused a write: {_text(exc)[:200]}",
                                error_code=ErrorCode.DB_WRITE_FAILED, location=location) from None


def known_redis_error(exc: BaseException) -> DatabaseLostError | None:
    """The exit-coded error for a failure of the Redis server met outside `server_errors`.

    LangGraph's `RedisSaver` and RedisVL raise the client's errors (or RedisVL's) from
    inside a step: a lost or refusing server is an environment failure (exit 6), not a
    bug. None for anything else, and when the redis package is not installed.
    """
    try:
        import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used
        from redisvl.exceptions import RedisVLError  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used
    except ImportError:
        return None
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return DatabaseLostError(f"the Redis server was lost during the command: "
                                 f"{_text(exc)[:200]}; any attempt counted before stays counted "
                                 "and nothing was sent after the loss")
    if isinstance(exc, redis.ResponseError | RedisVLError):
        return DatabaseLostError(f"the Redis server refused a command: {_text(exc)[:200]}",
                                 error_code=ErrorCode.DB_WRITE_FAILED)
    return None


def _refuse(location: str, why: str) -> UsageError:
    return UsageError(f"this Redis server cannot keep a claim on disk before its request is sent: "
                      f"{why}; start it with --appendonly yes --appendfsync always (or everysec), "
                      "Redis >= 7.2 or Valkey >= 8", error_code=ErrorCode.DB_NOT_DURABLE,
                      location=location)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def check_durable(client: redis.Redis, location: str) -> None:
    """Refuses a server that cannot fsync a claim before its request leaves (module doc).

    Reads `appendonly`, `appendfsync` and `maxmemory-policy` (`CONFIG GET`), then asks
    `WAITAOF 1 0` once, which fails on a server without the AOF or without the command.
    Changes nothing.

    Args:
        client: A client of the server.
        location: The redacted URL, for the message.

    Raises:
        UsageError: `db_not_durable` (exit 2): the AOF is off, `appendfsync` is `no`,
            an `allkeys-*` eviction policy could drop the ledger, the settings cannot be
            read (`CONFIG` renamed or not permitted), or the server has no `WAITAOF`.
    """
    import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    try:
        config = {_text(k): _text(v) for k, v in client.config_get("append*").items()}
        config.update({_text(k): _text(v) for k, v in client.config_get("maxmemory-policy").items()})
    except redis.ResponseError as exc:
        raise _refuse(location, f"its persistence settings cannot be read ({_text(exc)[:80]})") \
            from None
    if config.get("appendonly") != "yes":
        raise _refuse(location, f"appendonly is {config.get('appendonly', 'unknown')!r}")
    if config.get("appendfsync") not in _FSYNC_POLICIES:
        raise _refuse(location, f"appendfsync is {config.get('appendfsync', 'unknown')!r}, which "
                      "never waits for the disk")
    if config.get("maxmemory-policy", "").startswith("allkeys-"):
        raise _refuse(location, f"maxmemory-policy {config['maxmemory-policy']} may evict the "
                      "budget (use noeviction)")
    try:
        client.execute_command("WAITAOF", 1, 0, WAITAOF_TIMEOUT_MS)
    except redis.ResponseError as exc:
        raise _refuse(location, f"WAITAOF fails ({_text(exc)[:80]})") from None


WAITAOF = ("WAITAOF", 1, 0, WAITAOF_TIMEOUT_MS)
"""The command that waits for one local fsync of the connection's writes (never timeout 0,
which waits forever); send it in the same pipeline as the writes it covers."""


def make_durable(client: redis.Redis, location: str, what: str) -> None:
    """Waits until every write acknowledged so far is fsynced to the append-only file.

    A write of its own goes first (`graph.store.redis.keys.FSYNC`, a cache: `SET` rebuilds
    it whatever someone stored there, where the `INCR` before failed on a retyped key and
    left `WAITAOF` nothing to wait for), so `WAITAOF` has one to wait for on its
    connection; the file is written in order, so every earlier write of any connection
    is on disk with it. A write that still failed is refused (`NotDurableError`), never
    waited for as if made.

    Args:
        client: A client of the server.
        location: The redacted URL, for messages.
        what: The start of the refusal message, naming what is not durable yet.

    Raises:
        NotDurableError: Not confirmed in time (exit 6); the effect must not happen.
        DatabaseLostError: The server was lost (exit 6).
    """
    with server_errors(location):
        pipe = client.pipeline(transaction=False)
        pipe.set(FSYNC, b"1")  # SET replaces a key of any type: a retyped probe cannot fail it
        pipe.execute_command(*WAITAOF)
        written, fsynced = pipe.execute(raise_on_error=False)
    if written is not True:  # no write of its own: WAITAOF would answer without waiting
        check_fsynced(written if isinstance(written, Exception) else (0, 0), what)
    check_fsynced(fsynced, what)


def check_fsynced(reply: Any, what: str) -> None:
    """Checks the reply to `WAITAOF` (a `[local, replicas]` pair, or the error it raised).

    Args:
        reply: The pipeline's result for `WAITAOF` (taken with `raise_on_error=False`).
        what: The start of the refusal message, naming what is not durable yet.

    Raises:
        NotDurableError: The server did not confirm the fsync in time, or refused
            `WAITAOF` (its AOF was turned off meanwhile); the effect must not happen
            (exit 6; the claim stays: the attempt is spent, never handed out twice).
        DatabaseLostError: The connection was lost (`server_errors`).
    """
    import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

    if isinstance(reply, redis.ResponseError):
        detail = f"refuses WAITAOF ({_text(reply)[:80]})"
    elif isinstance(reply, Exception):
        with server_errors():
            raise reply
    elif int(reply[0]) >= 1:
        return
    else:
        detail = f"did not confirm the fsync to its append-only file within {WAITAOF[3]} ms"
    raise NotDurableError(f"{what} the Redis server {detail}; nothing was sent; run again",
                          error_code=ErrorCode.WAL_BUSY)
