"""Scratch space the benchmarks create, and its removal: temporary folders and databases.

Every folder is a `tempfile` folder named `bench-*` and every PostgreSQL database is
named `bench_*`; both are removed when the measurement ends, in `finally`, whether it
succeeded or not. `bench.run_all` also drops `bench_*` databases left by an earlier run
that was killed.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FOLDER_PREFIX = "bench-"
"""Prefix of every temporary folder the benchmarks create (under `tempfile.gettempdir()`)."""
DATABASE_PREFIX = "bench_"
"""Prefix of every PostgreSQL database the benchmarks create."""


@contextmanager
def workdir(tag: str) -> Iterator[Path]:
    """A new temporary folder `bench-<tag>-*`, removed with everything in it on exit."""
    path = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{tag}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _server_url(admin_url: str, name: str) -> str:
    return admin_url.rsplit("/", 1)[0] + "/" + name


@contextmanager
def fresh_database(admin_url: str, tag: str) -> Iterator[str]:
    """A new empty PostgreSQL database `bench_<tag>_<hex>`, dropped on exit.

    Args:
        admin_url: A URL on the server whose user may create databases.
        tag: A short word naming the measurement (letters, digits, `_`).

    Yields:
        The new database's URL (same server, user and options as `admin_url`).
    """
    import psycopg

    name = f"{DATABASE_PREFIX}{tag}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _server_url(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_databases(admin_url: str) -> list[str]:
    """Names of the `bench_*` databases on the server, sorted."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s)",
                            (DATABASE_PREFIX,)).fetchall()
    return sorted(name for (name,) in rows)


def drop_leftover_databases(admin_url: str) -> list[str]:
    """Drops every `bench_*` database (left by a killed run); returns their names."""
    import psycopg

    names = bench_databases(admin_url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return names


def leftover_folders() -> list[Path]:
    """The `bench-*` folders under `tempfile.gettempdir()`, sorted."""
    return sorted(Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"))
