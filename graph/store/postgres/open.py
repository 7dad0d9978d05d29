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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from graph.errors import ErrorCode, RefusedError, UsageError
from graph.store.base import Store
from graph.store.digest import SqlDigests, new_marker
from graph.store.postgres.locks import AdvisoryThreadLocks, advisory_key, advisory_lock
from graph.store.saver import postgres_saver
from graph.store.sql.build import sql_store
from graph.store.sql.conn import PostgresSql
from graph.store.sql.schema import LEDGER, POSTGRES_MIGRATIONS_TABLE, TRIGGERS, ddl, postgres_objects_query
from graph.store.urls import CONNECT_TIMEOUT_S, redact

if TYPE_CHECKING:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

__all__ = ["open_postgres", "redact"]

KEEPALIVES = {"keepalives": 1, "keepalives_idle": 20, "keepalives_interval": 5,
              "keepalives_count": 4}
"""libpq TCP keepalive settings of the control connection (seconds, probes)."""
SETUP_LOCK_KEY = advisory_key("schema-setup")
SETUP_TIMEOUT_S = 120.0
"""How long a process waits for another one's schema set-up (seconds)."""


def _schema_ready(db: PostgresSql, migrations: int) -> bool:
    """True when LangGraph's migrations and our tables and triggers are all in place."""
    if not db.value(*postgres_objects_query()):
        return False
    return bool(db.value(f"SELECT max(v) FROM {POSTGRES_MIGRATIONS_TABLE}") == migrations - 1)


def _setup_serialized(control: psycopg.Connection[Any], checkpointer: PostgresSaver) -> None:
    """Runs `PostgresSaver.setup()` and our DDL (`graph.store.sql.schema`) holding the setup lock.

    Raises:
        TimeoutError: Another process held the setup lock for `SETUP_TIMEOUT_S` seconds.
    """
    with advisory_lock(control, SETUP_LOCK_KEY, what="schema setup", timeout_s=SETUP_TIMEOUT_S):
        checkpointer.setup()
        control.execute(ddl("postgres", new_marker()))


def _check_triggers(db: PostgresSql, location: str) -> None:
    """Refuses a database where a guarded trigger of ours was dropped beside its table.

    No DDL runs before this check, so a refused database is left as it was.

    Raises:
        RefusedError: `damaged`.
    """
    for trigger in TRIGGERS:
        if not trigger.guarded:
            continue
        row = db.run(
            "SELECT to_regclass(?) IS NOT NULL, EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = ?"
            " AND tgrelid = to_regclass(?) AND NOT tgisinternal)",
            (trigger.table, trigger.name, trigger.table)).fetchone()
        if row[0] and not row[1]:
            raise RefusedError(f"{location}: trigger {trigger.name} of table {trigger.table} was "
                               "dropped; the database was changed outside this program",
                               error_code=ErrorCode.DAMAGED)


def _connect(url: str, location: str, read_only: bool
             ) -> tuple[psycopg.Connection[Any], psycopg.Connection[Any]]:
    """The saver's connection (dict rows) and the control connection (tuple rows, keepalives).

    Raises:
        UsageError: `db_unreachable` (exit 2), the password never shown.
    """
    import psycopg  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used
    from psycopg.conninfo import make_conninfo  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used
    from psycopg.rows import dict_row  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used

    conninfo = make_conninfo(url, connect_timeout=CONNECT_TIMEOUT_S,
                             options="-c default_transaction_read_only=on" if read_only else None)
    try:
        saver_conn = psycopg.connect(conninfo, autocommit=True, prepare_threshold=0,
                                     row_factory=dict_row)
        try:
            control = psycopg.connect(make_conninfo(conninfo, application_name="mandapi-resume",
                                                    **KEEPALIVES), autocommit=True)
        except BaseException:
            saver_conn.close()
            raise
    except psycopg.OperationalError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0] if lines else type(exc).__name__
        password = urlsplit(url).password
        if password:
            detail = detail.replace(password, "***")
        raise UsageError(f"cannot connect to PostgreSQL at {location}: {detail}",
                         error_code=ErrorCode.DB_UNREACHABLE) from None
    return saver_conn, control


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
        RefusedError: `no_such_file` for a database holding no checkpoint ledger;
            `damaged` for a dropped trigger of ours.
    """
    from langgraph.checkpoint.postgres import PostgresSaver  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used

    location = redact(url)
    saver_conn, control = _connect(url, location, read_only)
    try:
        db = PostgresSql(control)
        checkpointer = postgres_saver(saver_conn, SqlDigests(db))
        if not _schema_ready(db, len(PostgresSaver.MIGRATIONS)):
            if not db.table_exists(LEDGER) and (read_only or not create):
                raise RefusedError(f"{location} holds no mandapi-resume checkpoint database",
                                   error_code=ErrorCode.NO_SUCH_FILE)
            _check_triggers(db, location)
            if not read_only:  # a reader of an older schema reads what is there
                _setup_serialized(control, checkpointer)
        _check_triggers(db, location)
        yield sql_store(location, checkpointer, db, locks=AdvisoryThreadLocks(control),
                        conns=(saver_conn, control), summaries=True, keeps_pool=True)
    finally:
        saver_conn.close()
        control.close()
