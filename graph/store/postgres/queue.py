"""The queue's PostgreSQL database as the queue code reaches it: a connection and a lock.

procrastinate keeps its queue in PostgreSQL (the checkpoint database, or `--queue-db` /
`GRAPH_QUEUE_DB` beside Redis checkpoints). `graph.fleet` reaches it only through
`graph.store.open_queue_db` and `graph.store.queue_lock`, so the driver (psycopg, the
postgres extra) and PostgreSQL's advisory locks stay inside storage.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from graph.errors import ErrorCode, UsageError
from graph.store.postgres.locks import advisory_lock
from graph.store.urls import CONNECT_TIMEOUT_S, redact

__all__ = ["connect_queue", "queue_lock"]


def connect_queue(db: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the queue's database (`graph.fleet.jobs.ensure_schema`).

    Raises:
        UsageError: `db_unreachable` (exit 2): the database cannot be reached, or `db`
            is not a URL psycopg can use; `usage` when it names no database (libpq would
            pick its own defaults). The password is never shown.
    """
    try:
        params = conninfo_to_dict(db)
        if not params.get("dbname"):
            raise UsageError(f"the queue's URL {redact(db)} names no database "
                             "(postgresql://USER@HOST:PORT/DATABASE)")
        params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)  # the URL's own is kept
        return psycopg.connect(make_conninfo("", **params), autocommit=True)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        detail = next((line.strip() for line in str(exc).splitlines() if line.strip()),
                      type(exc).__name__)
        try:
            password = urlsplit(db).password
        except ValueError:
            password = None
        if password:
            detail = detail.replace(password, "***")
        raise UsageError(f"cannot connect to the queue's PostgreSQL database at "
                         f"{redact(db)}: {detail[:200]}",
                         error_code=ErrorCode.DB_UNREACHABLE) from None


@contextmanager
def queue_lock(conn: Any, key: int, *, what: str) -> Iterator[None]:
    """Holds PostgreSQL advisory lock `key` on `conn` (from `connect_queue`) for the block.

    Serializes one-time work across processes on the queue's database (applying
    procrastinate's schema); waits until the lock is free
    (`graph.store.postgres.locks.advisory_lock`).
    """
    with advisory_lock(conn, key, what=what):
        yield
