"""Scratch space the benchmarks create, and its removal: temporary folders and databases.

Every folder is a `tempfile` folder named `bench-*` and every PostgreSQL database is
named `bench_<run>_*` (`<run>` from `$BENCH_RUN`, which `bench.run_all` sets once per
run, so a run can tell its own databases from another run's); both are removed when the
measurement ends, in `finally`, whether it succeeded or not. `bench.run_all` also drops
the `bench_*` databases an earlier, killed run left behind (those no session is using).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FOLDER_PREFIX = "bench-"
"""Prefix of every temporary folder the benchmarks create (under `tempfile.gettempdir()`)."""
DATABASE_PREFIX = "bench_"
"""Prefix of every PostgreSQL database the benchmarks create."""
RUN_ENV = "BENCH_RUN"
"""Environment variable naming the current run (letters and digits), part of its databases' names."""


def run_prefix() -> str:
    """`bench_<run>_` for the run named by `$BENCH_RUN`, or `bench_` when none is named."""
    run = os.environ.get(RUN_ENV, "")
    if not run.isalnum():
        return DATABASE_PREFIX
    return f"{DATABASE_PREFIX}{run.lower()}_"


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
    """A new empty PostgreSQL database `bench_<run>_<tag>_<hex>`, dropped on exit.

    Args:
        admin_url: A URL on the server whose user may create databases.
        tag: A short word naming the measurement (letters, digits, `_`).

    Yields:
        The new database's URL (same server, user and options as `admin_url`).
    """
    import psycopg

    name = f"{run_prefix()}{tag}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{_owner()}'")
    try:
        yield _server_url(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_databases(admin_url: str, prefix: str = DATABASE_PREFIX) -> list[str]:
    """Names of the databases on the server whose names start with `prefix`, sorted."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s)",
                            (prefix,)).fetchall()
    return sorted(name for (name,) in rows)


def _owner() -> str:
    """The comment a benchmark database carries: `bench <host> <pid>` of the process that made it."""
    return f"bench {socket.gethostname()} {os.getpid()}"


def _owner_alive(comment: str | None) -> bool:
    """True when `comment` names a process of this host that is still running."""
    parts = (comment or "").split()
    if len(parts) != 3 or parts[0] != "bench" or parts[1] != socket.gethostname():
        return False
    try:
        os.kill(int(parts[2]), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def drop_leftover_databases(admin_url: str) -> list[str]:
    """Drops the `bench_*` databases no session is using (left by killed runs); returns their names.

    A database in use, or made by a process of this host that still runs (a run going on
    in another worktree or test worker, between two of its connections), is kept.
    """
    import psycopg

    dropped = []
    with psycopg.connect(admin_url, autocommit=True) as conn:
        owners = dict(conn.execute(
            "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database "
            "WHERE starts_with(datname, %s)", (DATABASE_PREFIX,)).fetchall())
        for name in bench_databases(admin_url):
            if _owner_alive(owners.get(name)):
                continue  # a live run's database between two of its connections
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')  # no FORCE: refused when in use
            except psycopg.errors.ObjectInUse:
                continue
            dropped.append(name)
    return dropped


def leftover_folders() -> list[Path]:
    """The `bench-*` folders under `tempfile.gettempdir()`, sorted."""
    return sorted(Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"))
