"""This test process's PostgreSQL databases: created once, lent to one test at a time.

`CREATE DATABASE` copies a template and syncs it to disk: a few hundred milliseconds on a
quiet server, seconds on a busy one, and it used to run once per PostgreSQL test. Each
test process (the xdist worker, or the one process without xdist) now keeps a small pool
of databases named by its worker id (`mr_<run>_<worker>_<n>`), lends one to each
`PostgresBackend`, and empties it on the next loan: the other connections to it are
ended, then every schema of ours is dropped and `public` made again, so a borrower sees
what a new database shows (no tables, no functions, no types, no settings of ours). A
test that needs two databases at once borrows two. Every database of the pool is dropped
at the end of the session (`close`); one left by a killed run is dropped by the next run
that finds its process gone (`drop_abandoned`). Tests that copy a database (`TEMPLATE`)
make it with `create_database`, so a killed run's copies are found the same way.

Commits in these databases skip the wait for their WAL flush (the database's default
`synchronous_commit = off`): the tests kill clients, never the server, and a committed
transaction survives a killed client either way; the setting changes only what a crash of
the whole server would lose. No product code reads the setting, so no code path differs.
"""

from __future__ import annotations

import os
import socket
from typing import Any

_PREFIX = "mr_"
_HOST = socket.gethostname()


def worker_id() -> str:
    """The xdist worker id (`gw0`, `gw1`, ...), or `main` without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _run_token() -> str:
    """Eight characters naming this test run (shared by its workers), so two runs never meet."""
    token = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return token[:8] if token else f"p{os.getpid()}"


def own_name(kind: str) -> str:
    """A new database name of this test process, outside its pool (`mr_<run>_<worker>_<kind>_<hex>`)."""
    import uuid

    return f"{_PREFIX}{_run_token()}_{worker_id()}_{kind}_{uuid.uuid4().hex[:8]}"


def create_database(conn: Any, dbname: str, template: str | None = None) -> None:
    """Creates `dbname` anew, as every test database is made, so `drop_abandoned` finds it.

    Any database of that name is dropped first. The new one carries the comment
    `pytest <host> <pid>` (its maker, for `drop_abandoned` after a killed run) and
    `synchronous_commit = off` (see the module docstring).

    Args:
        conn: An autocommit connection to the server's maintenance database.
        dbname: The database to make; `own_name` for one outside the pool.
        template: The database to copy (`CREATE DATABASE ... TEMPLATE`), or None for an
            empty one.
    """
    conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    conn.execute(f'CREATE DATABASE "{dbname}"' + (f' TEMPLATE "{template}"' if template else ""))
    conn.execute(f"COMMENT ON DATABASE \"{dbname}\" IS 'pytest {_HOST} {os.getpid()}'")
    conn.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')


class PostgresPool:
    """The databases of one test process on the server of `admin_url`.

    Args:
        admin_url: A URL of the test server's maintenance database (`GRAPH_TEST_POSTGRES_URL`).
    """

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self._psycopg = psycopg
        self.admin_url = admin_url
        self._base = admin_url.rsplit("/", 1)[0]
        self._free: list[str] = []
        self._all: list[str] = []

    def _admin(self) -> Any:
        return self._psycopg.connect(self.admin_url, autocommit=True)

    def url(self, dbname: str) -> str:
        """The URL of one of the pool's databases."""
        return f"{self._base}/{dbname}"

    def lease(self) -> str:
        """A database of this process's pool, empty as a new one; created on first need.

        Returns:
            The database's name; hand it back with `release`.
        """
        if self._free:
            dbname = self._free.pop()
            try:
                if self._empty(dbname):
                    return dbname
            except self._psycopg.Error:
                pass  # a borrower left it unable to be emptied (read-only, closed): made anew
            self._create(dbname)
            return dbname
        dbname = f"{_PREFIX}{_run_token()}_{worker_id()}_{len(self._all)}"
        self._create(dbname)
        self._all.append(dbname)
        return dbname

    def _create(self, dbname: str) -> None:
        """Creates `dbname` anew (dropping any database of that name)."""
        with self._admin() as conn:
            create_database(conn, dbname)

    def release(self, dbname: str) -> None:
        """Takes a database back; the next `lease` empties it."""
        if dbname in self._all and dbname not in self._free:
            self._free.append(dbname)

    def _empty(self, dbname: str) -> bool:
        """Ends every other connection to `dbname`, then drops every schema that is not the server's.

        Returns:
            False when the database holds what dropping schemas does not reach (its own
            connection settings or per-role settings, large objects, event triggers,
            publications, foreign servers, default privileges): the caller makes it anew.
        """
        with self._admin() as conn:
            row = conn.execute(
                "SELECT d.datallowconn AND d.datconnlimit = -1 AND d.datacl IS NULL AND NOT EXISTS "
                "(SELECT 1 FROM pg_db_role_setting s WHERE s.setdatabase = d.oid AND s.setrole <> 0) "
                "FROM pg_database d WHERE d.datname = %s", (dbname,)).fetchone()
            if row is None or not row[0]:
                return False
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))
            conn.execute(f'ALTER DATABASE "{dbname}" RESET ALL')
            conn.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
        with self._psycopg.connect(self.url(dbname), autocommit=True) as conn:
            extra = conn.execute(
                "SELECT (SELECT count(*) FROM pg_largeobject_metadata) + (SELECT count(*) FROM "
                "pg_event_trigger) + (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM "
                "pg_foreign_server) + (SELECT count(*) FROM pg_foreign_data_wrapper) + "
                "(SELECT count(*) FROM pg_default_acl)").fetchone()[0]
            if extra:
                return False
            schemas = [row[0] for row in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
                "AND nspname <> 'information_schema'")]
            with conn.transaction():
                for schema in schemas:
                    conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
                conn.execute("CREATE SCHEMA public AUTHORIZATION pg_database_owner")
                conn.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")
        return True

    def close(self) -> None:
        """Drops every database of the pool (the end of the session)."""
        if not self._all:
            return
        with self._admin() as conn:
            for dbname in self._all:
                conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        self._all.clear()
        self._free.clear()


def drop_abandoned(admin_url: str) -> None:
    """Drops pool databases of this host whose test process is gone (a killed run's)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.datname, shobj_description(d.oid, 'pg_database') FROM pg_database d "
            "WHERE d.datname LIKE %s", (f"{_PREFIX}%",)).fetchall()
        for dbname, comment in rows:
            parts = (comment or "").split()
            if len(parts) != 3 or parts[0] != "pytest" or parts[1] != _HOST:
                continue
            try:
                os.kill(int(parts[2]), 0)
            except ProcessLookupError:
                conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            except (PermissionError, ValueError):
                continue
