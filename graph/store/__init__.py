"""Opens the database a `--db` value names: a SQLite file, a PostgreSQL or a Redis URL.

The backend is chosen here and nowhere else; what an open database offers is the
`graph.store.base.Store`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.store.urls import check_form, check_postgres_url, is_postgres, is_redis

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = ["check_postgres_url", "creates_file", "holds_queue", "integrity_problems", "is_postgres",
           "is_redis", "open_queue_db", "open_store", "queue_lock", "reached_by_workers"]


@contextmanager
def open_store(db: str, *, create: bool, read_only: bool = False,
               name: str = "--db") -> Iterator[Store]:
    """Opens the checkpoint store named by `db`.

    Args:
        db: A SQLite file path, a `postgresql://` URL or a `redis://` (`rediss://`) URL.
        create: Whether a missing SQLite file (a Redis database never set up) may be
            created (only when a new thread is being created); resuming never creates
            a database.
        read_only: Never write: no schema set-up, no lock files (history, listing).
        name: How a refusal of `db`'s form names it: `--db`, or `db` for a caller of
            `graph.api`.

    Yields:
        The open store (`graph.store.base.Store`), closed on exit.

    Raises:
        graph.errors.RefusedError: The database is missing or unusable (exit 4).
        graph.errors.UsageError: `--db` is a folder or an impossible path, or this user
            lacks a permission the command needs (`permission_denied`; exit 2); a Redis
            server cannot be reached (`db_unreachable`) or cannot keep a claim on disk
            (`db_not_durable`, exit 2).
    """
    check_form(db, name)
    if is_postgres(db):
        from graph.store.postgres.open import open_postgres  # noqa: PLC0415 - a backend's modules (and its extra) load only when open_store chooses it; graph.store stays light for graph.run's quick path

        check_postgres_url(db, name)

        with open_postgres(db, create=create, read_only=read_only) as store:
            yield store
    elif is_redis(db):
        from graph.store.redis.open import open_redis  # noqa: PLC0415 - a backend's modules (and its extra) load only when open_store chooses it; graph.store stays light for graph.run's quick path

        with open_redis(db, create=create, read_only=read_only) as store:
            yield store
    else:
        from graph.store.sqlite import handoff  # noqa: PLC0415 - a backend's modules (and its extra) load only when open_store chooses it; graph.store stays light for graph.run's quick path
        from graph.store.sqlite.access import check_sqlite_access  # noqa: PLC0415 - a backend's modules (and its extra) load only when open_store chooses it; graph.store stays light for graph.run's quick path
        from graph.store.sqlite.open import open_sqlite  # noqa: PLC0415 - a backend's modules (and its extra) load only when open_store chooses it; graph.store stays light for graph.run's quick path

        checked = handoff.take(db, read_only=read_only)  # a poll miss just checked this file
        if checked is None:
            check_sqlite_access(db, read_only=read_only, name=name)
        with open_sqlite(Path(db), create=create, read_only=read_only, checked=checked) as store:
            yield store


def integrity_problems(db: str, name: str = "--db") -> list[str]:
    """SQLite's full integrity check of file `db`, one line per problem (empty when intact).

    Reads only. A PostgreSQL or Redis database has no file-level check here (the server
    checks its own pages): empty.

    Raises:
        RefusedError: The file is missing or not a checkpoint database at all.
        UsageError: As `open_store` with `read_only` (a folder, a missing permission).
    """
    if is_postgres(db) or is_redis(db):
        return []
    from graph.store.sqlite.access import check_sqlite_access  # noqa: PLC0415 - a backend's modules (and its extra) load only when open_store chooses it; graph.store stays light for graph.run's quick path
    from graph.store.sqlite.file import check_database, integrity_check  # noqa: PLC0415 - a backend's modules (and its extra) load only when open_store chooses it; graph.store stays light for graph.run's quick path

    check_sqlite_access(db, read_only=True, name=name)
    check_database(Path(db))
    return [f"{db}: integrity_check: {row}" for row in integrity_check(Path(db))]


def creates_file(db: str) -> bool:
    """True when opening `db` with `create=True` would make a new database file.

    A SQLite path that does not exist yet; never a PostgreSQL or Redis URL (their
    databases are the server's). Lets a caller refuse before anything is created.
    """
    return not (is_postgres(db) or is_redis(db)) and not Path(db).exists()


def reached_by_workers(db: str) -> bool:
    """True when `db` is a server's database that queue workers on other machines reach.

    PostgreSQL and Redis; a SQLite file is one machine's (`graph.fleet.queue_db` refuses
    `--enqueue` with it).
    """
    return is_postgres(db) or is_redis(db)


def holds_queue(url: str) -> bool:
    """True when `url` names a database that can hold the job queue (procrastinate: PostgreSQL)."""
    return is_postgres(url)


def open_queue_db(url: str) -> Any:
    """An autocommit connection to the queue's database (`graph.store.postgres.queue`).

    Raises:
        UsageError: `db_unreachable` or `usage` (exit 2), as `connect_queue` says.
    """
    from graph.store.postgres.queue import connect_queue  # noqa: PLC0415 - psycopg: the postgres extra

    return connect_queue(url)


def queue_lock(conn: Any, key: int, *, what: str) -> AbstractContextManager[None]:
    """Holds lock `key` on the queue's database for a block (`graph.store.postgres.queue`)."""
    from graph.store.postgres.queue import queue_lock as lock  # noqa: PLC0415 - psycopg: the postgres extra

    return lock(conn, key, what=what)
