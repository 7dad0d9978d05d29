"""Which backend exceptions are the environment's failures (exit 2 or 6), not bugs (exit 1).

The store translates them: sqlite3's, psycopg's and redis's exceptions are named here
only, so no layer above store catches a driver's exception type.

A database the user may not read or write, a full disk, SQLite's write lock held past
its busy timeout, a PostgreSQL or Redis connection lost mid-command: each is reported
as the `RunError` with its documented code. Every place that turns an exception into
an outcome asks here: the commands (`graph.cli.guard`, `graph.run`), the Python API
(`graph.api`) and the queue worker (`graph.fleet.worker`).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from graph.errors import DatabaseLostError, ErrorCode, RunError, UsageError, missing_dependency
from graph.store.redis.conn import known_redis_error

__all__ = ["driver_errors", "known_error", "known_errors", "undecodable"]


def known_error(exc: BaseException) -> RunError | None:
    """The `RunError` for an environment failure that is not a bug, else None.

    Covers a database the user may not read or write, and a database connection lost
    mid-command (PostgreSQL terminated, SQLite file made unreadable).
    """
    if isinstance(exc, RunError):
        return exc
    missing = missing_dependency(exc)  # this Python lacks a dependency: exit 2, not a bug
    if missing is not None:
        return missing
    if isinstance(exc, PermissionError):
        return UsageError(f"permission denied: {exc.filename or exc}",
                          error_code=ErrorCode.PERMISSION_DENIED)
    if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc):
        return UsageError(f"the database may not be written here ({exc}): "
                          "the file and its folder must be writable by this user",
                          error_code=ErrorCode.PERMISSION_DENIED)
    if isinstance(exc, sqlite3.OperationalError) and any(
            why in str(exc) for why in _SQLITE_UNWRITABLE):
        return DatabaseLostError(
            f"the SQLite database could not be written ({exc}): a full disk, an I/O error, "
            "or another process holding SQLite's write lock past the 30-second busy "
            "timeout; any attempt counted before stays counted and nothing was sent "
            "after it: free space or wait, then run the command again",
            error_code=ErrorCode.DB_WRITE_FAILED)
    return _lost_connection(exc) or known_redis_error(exc)


@contextmanager
def known_errors() -> Iterator[None]:
    """Raises an environment failure (permission, lost connection) as its `RunError`."""
    try:
        yield
    except RunError:
        raise
    except Exception as exc:
        known = known_error(exc)
        if known is None:
            raise
        raise known from exc


_SQLITE_UNWRITABLE = ("database is locked", "database or disk is full", "disk I/O error",
                      "database table is locked", "unable to open database file")
"""sqlite3.OperationalError texts of an environment that cannot take a write (not a bug)."""


def _lost_connection(exc: BaseException) -> RunError | None:
    try:
        import psycopg  # noqa: PLC0415 - the postgres extra is optional
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        return None
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        return DatabaseLostError(
            f"lost the connection to PostgreSQL during the command ({detail}); any attempt "
            "counted before stays counted and nothing was sent after the loss: check the "
            "server, then run the command again")
    return None


def driver_errors() -> tuple[type[Exception], ...]:
    """The database drivers' own error types: sqlite3's, and psycopg's once it is imported.

    For a caller that must not fail on any storage error (a best-effort write such as a
    finished thread's summary) without naming a driver itself.
    """
    psycopg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if psycopg is None else (sqlite3.Error, psycopg.Error)


def undecodable(exc: BaseException) -> bool:
    """True when SQLite reports stored bytes it cannot read (a damaged file).

    Not a failure of the environment: any `sqlite3.DatabaseError` but an
    `OperationalError` other than a decoding one.
    """
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    return not isinstance(exc, sqlite3.OperationalError) or "decode" in str(exc)
