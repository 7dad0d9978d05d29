"""Shared fixtures: a clean environment, and every behaviour test on SQLite, PostgreSQL, Redis.

PostgreSQL tests (marked `postgres`) read the server's URL from `GRAPH_TEST_POSTGRES_URL`
and get a fresh database each; without the variable they are deselected at collection,
with one summary line saying how many and how to enable them, and with
`GRAPH_REQUIRE_POSTGRES=1` (set by `.ci/run`) they are kept and each one fails.

Redis tests (marked `redis`) run on the session's private server (`tests/redis_server.py`),
flushed per test (`tests/redis_adapter.py`); without valkey-server or the modules they
skip, and fail under `GRAPH_REQUIRE_REDIS=1`. A test that is SQL by nature (it runs SQL,
reads a SQLite file, or plants bytes only a SQL store holds) is marked
`@pytest.mark.sql_only("why; the Redis test covering the same promise")` and skips its
`redis` case with that reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.pg_pool import PostgresPool, drop_abandoned
from tests.redis_server import (  # noqa: F401 - fixtures of the Redis tests
    module_redis_server,
    redis_client,
    redis_pool,
    redis_server,
    redis_url,
)
from tests.sealing import checksummed_dumps, reseal

if TYPE_CHECKING:
    from tests.harness import GraphHarness

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
_CLEARED = ("MANDAPI_API_KEY", "MANDAPI_MODEL_ID", "MANDAPI_BASE_URL", "MANDAPI_TIMEOUT", "GRAPH_DB",
            "GRAPH_QUEUE_DB")
_OUR_TABLES = ("attempt_ledger",)
_PG_HOWTO = ("set GRAPH_TEST_POSTGRES_URL, for example "
             "GRAPH_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test")


_PG_DESELECTED = pytest.StashKey[int]()


def _postgres_tests_run() -> bool:
    """True when PostgreSQL tests are kept: a server is named, or its absence must fail."""
    return bool(os.environ.get("GRAPH_TEST_POSTGRES_URL")) or os.environ.get("GRAPH_REQUIRE_POSTGRES") == "1"


_MEMORY_TEMP = Path("/dev/shm")
_MEMORY_TEMP_MIN_FREE = 2 << 30
"""Bytes a memory file system must have free to hold the run's temporary folders."""


def _temp_in_memory(config: pytest.Config) -> None:
    """Puts the run's temporary folders on a memory file system, when the machine has one.

    The tests write SQLite files with `synchronous=FULL` and Redis AOFs fsynced on every
    write; on a disk each sync waits for the device (measured here: the SQLite cases of
    `checkpoints/test_damage.py` took 15.8 s on disk, 2.1 s on tmpfs). No test's promise depends on
    the device: they kill processes, never the machine, and a killed process's written
    pages are kept either way. A `--basetemp`, or a `PYTEST_DEBUG_TEMPROOT` already set,
    wins; the controller sets it, and xdist's workers and every child inherit it.
    """
    if hasattr(config, "workerinput") or config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return
    try:
        stats = os.statvfs(_MEMORY_TEMP)
    except OSError:
        return
    if stats.f_bavail * stats.f_frsize >= _MEMORY_TEMP_MIN_FREE and os.access(_MEMORY_TEMP, os.W_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(_MEMORY_TEMP)


def pytest_configure(config: pytest.Config) -> None:
    """Registers the Redis marks; temporary folders go to memory where it can hold them."""
    config.addinivalue_line("markers", "redis: runs on the private Redis server of tests/redis_server.py")
    config.addinivalue_line("markers", "sql_only(reason): the test's redis case is left out, for reason")
    _temp_in_memory(config)


_SQL_ONLY_DROPPED = pytest.StashKey[int]()


def _drop_sql_only(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Removes the `redis` case of every `sql_only` test or case: it does not apply to Redis.

    The mark's reason says why, and names the Redis test that covers the same promise;
    the run's summary says how many were left out. A reason is required.
    """
    dropped = []
    for item in items:
        mark = item.get_closest_marker("sql_only")
        callspec = getattr(item, "callspec", None)
        if mark is None or callspec is None or callspec.params.get("backend") != "redis":
            continue
        reason = mark.args[0] if mark.args else mark.kwargs.get("reason", "")
        assert reason, f"{item.nodeid}: sql_only needs a reason"
        dropped.append(item)
    if dropped:
        items[:] = [item for item in items if item not in set(dropped)]
        config.hook.pytest_deselected(items=dropped)
    config.stash[_SQL_ONLY_DROPPED] = len(dropped)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leaves out SQL-only Redis cases, and `postgres` tests when no server is named."""
    _drop_sql_only(config, items)
    if _postgres_tests_run():
        return
    deselected = [item for item in items if item.get_closest_marker("postgres") is not None]
    if deselected:
        items[:] = [item for item in items if item.get_closest_marker("postgres") is None]
        config.hook.pytest_deselected(items=deselected)
    config.stash[_PG_DESELECTED] = len(deselected)


_LEFT_OUT = {"pg_deselected": _PG_DESELECTED, "sql_only_dropped": _SQL_ONLY_DROPPED}
"""The counts of left-out tests, by the name an xdist worker sends them under."""


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller collects nothing: it takes the counts a worker left out."""
    output = getattr(node, "workeroutput", {})
    for name, key in _LEFT_OUT.items():
        if name in output:
            node.config.stash[key] = max(output[name], node.config.stash.get(key, 0))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Says once how many PostgreSQL tests did not run, and how to run them; and how many
    SQL-only cases were left out of Redis (with xdist, as its workers counted them)."""
    count = config.stash.get(_PG_DESELECTED, 0)
    if count:
        terminalreporter.write_line(f"SKIPPED [{count}] PostgreSQL tests deselected: {_PG_HOWTO}")
    count = config.stash.get(_SQL_ONLY_DROPPED, 0)
    if count:
        terminalreporter.write_line(f"{count} SQL-only cases not run on Redis (sql_only marks say why)")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No test reads a real key or writes a real database: env cleared, cwd is tmp_path."""
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def postgres_admin_url() -> str:
    """The test server's URL, or a skip (a failure under GRAPH_REQUIRE_POSTGRES=1)."""
    url = os.environ.get("GRAPH_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("GRAPH_REQUIRE_POSTGRES") == "1":
            pytest.fail("GRAPH_REQUIRE_POSTGRES=1 but GRAPH_TEST_POSTGRES_URL is not set")
        pytest.skip(f"PostgreSQL tests skipped: {_PG_HOWTO}")
    return url


_PG_POOLS: dict[str, PostgresPool] = {}


def _postgres_pool(admin_url: str) -> PostgresPool:
    """This process's pool of databases on the server of `admin_url` (`tests/pg_pool.py`)."""
    if admin_url not in _PG_POOLS:
        _PG_POOLS[admin_url] = PostgresPool(admin_url)
    return _PG_POOLS[admin_url]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drops this process's pooled PostgreSQL databases; the controller drops a killed run's.

    An xdist worker hands its counts of left-out tests to the controller's summary.
    """
    if hasattr(session.config, "workeroutput"):
        for name, key in _LEFT_OUT.items():
            session.config.workeroutput[name] = session.config.stash.get(key, 0)
    for pool in _PG_POOLS.values():
        pool.close()
    url = os.environ.get("GRAPH_TEST_POSTGRES_URL")
    if url and not hasattr(session.config, "workerinput"):
        try:
            drop_abandoned(url)
        except Exception as exc:  # a cleanup of old runs never fails this one
            session.config.get_terminal_writer().line(f"(left old test databases: {exc})")


class SqliteBackend:
    """A checkpoint file in the test's folder."""

    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = str(path)

    def _conn(self) -> sqlite3.Connection:
        return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)

    def ledger_row(self, thread_id: str) -> tuple[int, int, int] | None:
        """(attempts, claimed, max_attempts) read straight from the database (None if none)."""
        if not self.path.exists():
            return None
        with self._conn() as conn:
            return conn.execute(
                "SELECT attempts, claimed, max_attempts FROM attempt_ledger WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()

    def fingerprint(self) -> str:
        """A hash of every row of every table (logical content), for 'unchanged' checks."""
        digest = hashlib.sha256()
        with self._conn() as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            for table in tables:
                digest.update(table.encode())
                for row in sorted(repr(r) for r in conn.execute(f'SELECT * FROM "{table}"')):
                    digest.update(row.encode())
        return digest.hexdigest()

    def execute(self, sql: str, params: tuple = ()) -> None:
        with closing(sqlite3.connect(self.path)) as conn, conn:
            conn.execute(sql, params)

    def update_ledger(self, thread_id: str, **columns: Any) -> None:
        """Sets columns of the thread's ledger row behind the product's back (SQL `UPDATE`)."""
        sets = ", ".join(f"{name} = ?" for name in columns)
        self.execute(f"UPDATE attempt_ledger SET {sets} WHERE thread_id = ?",
                     (*columns.values(), thread_id))

    def delete_ledger(self, thread_id: str) -> None:
        """Deletes the thread's ledger row behind the product's back."""
        self.execute("DELETE FROM attempt_ledger WHERE thread_id = ?", (thread_id,))

    def _latest(self, conn: sqlite3.Connection, thread_id: str) -> tuple[str, str, bytes]:
        return conn.execute(
            "SELECT checkpoint_id, type, checkpoint FROM checkpoints WHERE thread_id = ? "
            "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1", (thread_id,)).fetchone()

    def get_raw(self, thread_id: str, channel: str) -> tuple[str, bytes]:
        """The stored (type, bytes) holding `channel` (on SQLite: the whole checkpoint)."""
        with closing(sqlite3.connect(self.path)) as conn, conn:
            _, type_, blob = self._latest(conn, thread_id)
        return type_, bytes(blob)

    def set_raw(self, thread_id: str, channel: str, type_: str, data: bytes) -> None:
        with closing(sqlite3.connect(self.path)) as conn, conn:
            checkpoint_id, _, _ = self._latest(conn, thread_id)
            conn.execute("UPDATE checkpoints SET type = ?, checkpoint = ? WHERE thread_id = ? "
                         "AND checkpoint_id = ?", (type_, data, thread_id, checkpoint_id))

    def edit_values(self, thread_id: str, edit: Any) -> None:
        """Applies `edit(channel_values)` to the latest checkpoint, with valid checksums."""
        from graph.store.serde import make_serde

        serde = make_serde()
        checkpoint = serde.loads_typed(self.get_raw(thread_id, ""))
        edit(checkpoint["channel_values"])
        self.set_raw(thread_id, "", *checksummed_dumps(checkpoint))
        reseal(self.db, thread_id)

    def dump(self) -> bytes:
        """Every byte stored: the database file, its WAL and its lock file."""
        return b"".join(p.read_bytes() for p in sorted(self.path.parent.iterdir())
                        if p.name.startswith(self.path.name))


class PostgresBackend:
    """A fresh PostgreSQL database on the test server, dropped afterwards."""

    name = "postgres"
    _pool: PostgresPool | None = None
    """The pool the database was lent from; None for one a subclass made itself."""

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self._psycopg = psycopg
        self.admin_url = admin_url
        self._pool = _postgres_pool(admin_url)
        self.dbname = self._pool.lease()
        self.db = self._pool.url(self.dbname)

    def drop(self) -> None:
        """Gives a pooled database back (emptied before its next loan); drops any other."""
        if self._pool is not None:
            self._pool.release(self.dbname)
            return
        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')

    def ledger_row(self, thread_id: str) -> tuple[int, int, int] | None:
        with self._psycopg.connect(self.db, autocommit=True) as conn:
            exists = conn.execute("SELECT to_regclass('attempt_ledger')").fetchone()[0]
            if exists is None:
                return None
            return conn.execute(
                "SELECT attempts, claimed, max_attempts FROM attempt_ledger WHERE thread_id = %s",
                (thread_id,),
            ).fetchone()

    def no_lock_left(self) -> bool:
        """True when no session holds an advisory lock (a thread's writer lock) in the database.

        A SIGKILLed holder's lock goes when the server's backend process notices the
        closed connection: at once on a quiet host, a moment later on a loaded one.
        """
        with self._psycopg.connect(self.db, autocommit=True) as conn:
            return not conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND d.datname = current_database())").fetchone()[0]

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        with self._psycopg.connect(self.db, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
            for table in tables:
                digest.update(table.encode())
                rows = conn.execute(f'SELECT * FROM "{table}"').fetchall()
                for row in sorted(repr(r) for r in rows):
                    digest.update(row.encode())
        return digest.hexdigest()

    def execute(self, sql: str, params: tuple = ()) -> None:
        with self._psycopg.connect(self.db, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"), params)

    def update_ledger(self, thread_id: str, **columns: Any) -> None:
        """Sets columns of the thread's ledger row behind the product's back (SQL `UPDATE`)."""
        sets = ", ".join(f"{name} = ?" for name in columns)
        self.execute(f"UPDATE attempt_ledger SET {sets} WHERE thread_id = ?",
                     (*columns.values(), thread_id))

    def delete_ledger(self, thread_id: str) -> None:
        """Deletes the thread's ledger row behind the product's back."""
        self.execute("DELETE FROM attempt_ledger WHERE thread_id = ?", (thread_id,))

    def _blob_key(self, conn: Any, thread_id: str, channel: str) -> tuple[str, str]:
        version = conn.execute(
            "SELECT checkpoint -> 'channel_versions' ->> %s FROM checkpoints WHERE thread_id = %s "
            "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
            (channel, thread_id)).fetchone()[0]
        return thread_id, version

    def get_raw(self, thread_id: str, channel: str) -> tuple[str, bytes]:
        """The stored (type, bytes) of `channel`'s latest blob."""
        with self._psycopg.connect(self.db, autocommit=True) as conn:
            tid, version = self._blob_key(conn, thread_id, channel)
            type_, blob = conn.execute(
                "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = %s "
                "AND version = %s", (tid, channel, version)).fetchone()
        return type_, bytes(blob)

    def set_raw(self, thread_id: str, channel: str, type_: str, data: bytes) -> None:
        with self._psycopg.connect(self.db, autocommit=True) as conn:
            tid, version = self._blob_key(conn, thread_id, channel)
            conn.execute("UPDATE checkpoint_blobs SET type = %s, blob = %s WHERE thread_id = %s "
                         "AND channel = %s AND version = %s", (type_, data, tid, channel, version))

    def edit_values(self, thread_id: str, edit: Any) -> None:
        """Applies `edit(values)` to the latest channel blobs, with valid checksums."""
        from graph.store.serde import make_serde

        serde = make_serde()
        channels = ("thread", "messages", "progress")
        values = {c: serde.loads_typed(self.get_raw(thread_id, c)) for c in channels}
        before = {c: repr(values[c]) for c in channels}
        edit(values)
        for channel in channels:
            if channel not in values:
                raise ValueError("cannot remove a channel on PostgreSQL")
            if repr(values[channel]) != before[channel]:
                self.set_raw(thread_id, channel, *checksummed_dumps(values[channel]))
        reseal(self.db, thread_id)

    def dump(self) -> bytes:
        """Every row of every table, as text and raw bytes."""
        out = []
        with self._psycopg.connect(self.db, autocommit=True) as conn:
            for (table,) in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall():
                for row in conn.execute(f'SELECT * FROM "{table}"').fetchall():
                    for value in row:
                        out.append(bytes(value) if isinstance(value, (bytes, memoryview))
                                   else str(value).encode())
        return b"\n".join(out)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                        pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each behaviour test runs on a SQLite file, a fresh PostgreSQL and a flushed Redis database."""
    if request.param == "sqlite":
        yield SqliteBackend(tmp_path / "checkpoints.sqlite")
        return
    if request.param == "redis":
        from tests.redis_adapter import RedisBackend

        rb = RedisBackend(request.getfixturevalue("redis_url"))
        try:
            yield rb
        finally:
            rb.close()
        return
    pg = PostgresBackend(postgres_admin_url())
    try:
        yield pg
    finally:
        pg.drop()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    """A SQLite checkpoint path, for tests about files themselves."""
    return tmp_path / "checkpoints.sqlite"


@pytest.fixture
def graph_harness() -> Iterator[GraphHarness]:
    """A fresh `tests.harness.GraphHarness`; fails the test if scripted replies are left unused."""
    from tests.harness import GraphHarness

    harness = GraphHarness()
    yield harness
    assert not harness.model.script, (
        f"{len(harness.model.script)} scripted model replies were never requested")


def run_cli(argv: list[str], **kwargs: Any) -> dict[str, Any]:
    """Runs `graph.run` in-process with `--json` and returns the parsed object."""
    from graph.run import run

    out = run([*argv, "--json"], **kwargs)
    data = json.loads(out.to_json())
    data["_next"] = out.next_nodes
    return data


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: ours, cleared of MandAPI and DB variables."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def stop_process_group(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """Ends a server a test started with `start_new_session=True`, and what it started.

    SIGTERM to its process group, then SIGKILL if it has not exited within `timeout`.
    """
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
