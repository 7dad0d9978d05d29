"""Opens a PostgreSQL checkpoint database: LangGraph's `PostgresSaver`, our ledger and locks.

Three promises need care on PostgreSQL:

* Schema setup runs once even when many workers start on an empty database at the
  same moment: concurrent `PostgresSaver.setup()` calls fail with unique violations,
  so setup is serialized by a session-level advisory lock (not a transaction: its
  migrations use `CREATE INDEX CONCURRENTLY`, which cannot run inside one).
* One writer per thread across machines: a session-level advisory lock per thread on
  a dedicated "control" connection with TCP keepalives, so the lock dies with its
  process, and within about a minute with a machine that lost power or network. The
  ledger runs on the same connection: if the connection (and so the lock) is lost,
  the claim before sending fails too, and nothing is sent.
* A password in the URL never appears in output or errors (`redact`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from graph.approvals import APPROVALS_DDL
from graph.attempt_log import POSTGRES_LOG_DDL
from graph.checked_saver import postgres_saver
from graph.digest import digest_ddl, new_marker
from graph.errors import BusyError, RefusedError, UsageError
from graph.exitcodes import ErrorCode
from graph.ledger import POSTGRES_LEDGER_DDL
from graph.store import Store
from graph.tombstones import TOMBSTONE_DDL

KEEPALIVES = {"keepalives": 1, "keepalives_idle": 20, "keepalives_interval": 5,
              "keepalives_count": 4}
"""libpq TCP keepalive settings of the control connection (seconds, probes)."""
CONNECT_TIMEOUT_S = 10


def _key(name: str) -> int:
    """A signed 64-bit advisory-lock key for `name`."""
    return int.from_bytes(hashlib.sha256(f"mandapi-resume:{name}".encode()).digest()[:8],
                          "big", signed=True)


SETUP_LOCK_KEY = _key("schema-setup")


def redact(url: str) -> str:
    """Returns `url` with any password (in the user part or a query parameter) as `***`."""
    import re

    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[-1]}"
        query = re.sub(r"(?i)(^|&)(password|passfile)=[^&]*", r"\1\2=***", parts.query)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return "postgresql://(unparsable URL)"


class AdvisoryThreadLocks:
    """Per-thread session-level advisory locks (`pg_try_advisory_lock`).

    Args:
        conn: The control connection; a lock lives as long as this session.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @contextmanager
    def hold(self, thread_id: str) -> Iterator[None]:
        """Holds the thread's lock for the block; fails at once if another session has it.

        Raises:
            BusyError: Another session holds the lock (exit 5).
        """
        key = _key(f"thread:{thread_id}")
        if not self._conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
            raise BusyError.for_thread(thread_id)
        try:
            yield
        finally:
            if not self._conn.closed:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _schema_ready(conn: Any, migrations: int) -> bool:
    """True when LangGraph's migrations and our ledger are all in place (no lock needed)."""
    row = conn.execute(
        "SELECT to_regclass('attempt_ledger') IS NOT NULL AND to_regclass('attempt_log') IS NOT NULL"
        " AND to_regclass('thread_tombstones') IS NOT NULL"
        " AND to_regclass('write_approvals') IS NOT NULL"
        " AND to_regclass('checkpoint_digests') IS NOT NULL"
        " AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'request_caps_never_decreases'"
        " AND tgrelid = to_regclass('request_caps')), to_regclass('checkpoint_migrations')"
    ).fetchone()
    if not row[0] or row[1] is None:
        return False
    latest = conn.execute("SELECT max(v) FROM checkpoint_migrations").fetchone()[0]
    return latest == migrations - 1


def _setup_serialized(control: Any, checkpointer: Any, timeout_s: float = 120.0) -> None:
    """Runs `PostgresSaver.setup()` and our DDL while holding the setup advisory lock.

    The lock is taken with `pg_try_advisory_lock` in a polling loop, not the blocking
    `pg_advisory_lock`: a session blocked inside a statement keeps a snapshot open, and
    `CREATE INDEX CONCURRENTLY` in the holder's migrations waits for every older
    snapshot to finish, so blocking waiters and the holder would wait on each other.

    Raises:
        TimeoutError: Another process held the setup lock for `timeout_s` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not control.execute("SELECT pg_try_advisory_lock(%s)", (SETUP_LOCK_KEY,)).fetchone()[0]:
        if time.monotonic() > deadline:
            raise TimeoutError("PostgreSQL schema setup lock held too long by another process")
        time.sleep(0.05)
    try:
        checkpointer.setup()
        control.execute(POSTGRES_LEDGER_DDL + POSTGRES_LOG_DDL + TOMBSTONE_DDL + APPROVALS_DDL
                        + digest_ddl(new_marker()))
    finally:
        control.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))


_TRIGGERS = {"attempt_ledger_never_decreases": "attempt_ledger",
             "attempt_log_append_only": "attempt_log"}


def _check_triggers(control: Any, location: str) -> None:
    """Refuses a database where a trigger of ours was dropped beside its table (no DDL runs).

    Raises:
        RefusedError: `damaged`.
    """
    for trigger, table in _TRIGGERS.items():
        row = control.execute(
            "SELECT to_regclass(%s) IS NOT NULL, EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = %s"
            " AND tgrelid = to_regclass(%s) AND NOT tgisinternal)", (table, trigger, table)
        ).fetchone()
        if row[0] and not row[1]:
            raise RefusedError(f"{location}: trigger {trigger} of table {table} was dropped; "
                               "the database was changed outside this program",
                               error_code=ErrorCode.DAMAGED)


@contextmanager
def open_postgres(url: str, *, create: bool = True, read_only: bool = False
                  ) -> Iterator[Store]:
    """Connects, sets the schema up once (serialized), and yields the store.

    A database without our ledger is set up only with `create` (a new thread); resuming,
    history and verification refuse it instead of adding tables. An older schema of ours
    gains the tables it lacks. With `read_only`, both sessions run with
    `default_transaction_read_only` and nothing is set up.

    Raises:
        UsageError: The server cannot be reached or refuses the login (exit 2).
        RefusedError: `no_such_file` for a database holding no checkpoint ledger.

    Raises:
        UsageError: The server cannot be reached or refuses the login (exit 2).
    """
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from graph.serde import make_serde

    location = redact(url)
    extra = {"options": "-c default_transaction_read_only=on"} if read_only else {}
    try:
        saver_conn = psycopg.connect(url, autocommit=True, prepare_threshold=0,
                                     row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S,
                                     **extra)
        control = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                  application_name="mandapi-resume", **KEEPALIVES, **extra)
    except psycopg.OperationalError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0] if lines else type(exc).__name__
        password = urlsplit(url).password
        if password:
            detail = detail.replace(password, "***")
        raise UsageError(f"cannot connect to PostgreSQL at {location}: {detail}",
                         error_code=ErrorCode.DB_UNREACHABLE) from None
    conns = (saver_conn, control)
    try:
        checkpointer = postgres_saver(saver_conn, make_serde())
        if not _schema_ready(control, len(PostgresSaver.MIGRATIONS)):
            ours = control.execute("SELECT to_regclass('attempt_ledger')").fetchone()[0]
            if ours is None and (read_only or not create):
                raise RefusedError(f"{location} holds no mandapi-resume checkpoint database",
                                   error_code=ErrorCode.NO_SUCH_FILE)
            _check_triggers(control, location)
            if not read_only:  # a reader of an older schema reads what is there
                _setup_serialized(control, checkpointer)
        _check_triggers(control, location)
        store = Store.build(location, checkpointer, control, placeholder="%s",
                            locks=AdvisoryThreadLocks(control), conns=conns)
        yield store
    finally:
        for conn in conns:
            conn.close()
