"""Opens a SQLite checkpoint database: LangGraph's `SqliteSaver`, our ledger and locks.

One connection serves LangGraph's saver, our tables and the digests, so a superstep
commits once (see `graph.store.saver.sqlite_saver`). It runs with WAL,
`synchronous=FULL` (a commit survives power loss) and a busy timeout, so several
processes can share one file. SQLite files belong on a local disk: WAL needs shared
memory that network filesystems do not provide.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from graph.errors import UsageError
from graph.store.base import ReadOnlyLocks, Store, WriterLocks
from graph.store.digest import SqlDigests, new_marker
from graph.store.saver import sqlite_saver
from graph.store.sql.build import sql_store
from graph.store.sql.conn import SqliteSql
from graph.store.sql.schema import ddl as ddl_sql
from graph.store.sqlite.access import read_only_uri
from graph.store.sqlite.file import check_database, schema_needs_setup
from graph.store.sqlite.handoff import Checked
from graph.store.sqlite.ledger import SqliteLedger
from graph.store.sqlite.locks import ThreadLocks
from graph.store.sqlite.names import NameSlot, check_one_name
from nodes.files import sweep_stale

if TYPE_CHECKING:
    from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = ["open_sqlite"]

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for SQLite's database lock before failing (milliseconds)."""

_PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
)


@contextmanager
def _private_files() -> Iterator[None]:
    """Creates files (database, `-wal`, `-shm`) readable by the owner only (0600)."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def _connect(path: Path) -> sqlite3.Connection:
    """A connection with `_PRAGMAS` and `isolation_level=None` (`graph.store.sql.conn.SqliteSql`)."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    for pragma in _PRAGMAS:
        conn.execute(pragma)
    return conn


def _saver(sql: SqliteSql, *, ddl: bool) -> SqliteSaver:
    """The checked saver and its digests on the connection of `sql`.

    With `ddl`, our schema (`graph.store.sql.schema`) and LangGraph's are set up first.
    """
    checkpointer = sqlite_saver(sql, SqlDigests(sql))
    if ddl:
        sql.conn.executescript(ddl_sql("sqlite", new_marker()))
        checkpointer.setup()
    checkpointer.is_setup = True
    return checkpointer


def _create_atomically(path: Path) -> None:
    """Creates a complete, empty checkpoint database at `path`, or leaves an existing one.

    The database is built under a temporary name and hard-linked into place, so a
    process killed during creation never leaves a half-made file that later runs
    would have to refuse.
    """
    sweep_stale(path.parent, path.name, ".creating*")  # left by killed creators (and -wal, -shm)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.creating")
    with _private_files():
        conn = _connect(tmp)
        try:
            _saver(SqliteSql(conn), ddl=True)
        finally:
            conn.close()
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process created it first; use theirs
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def open_sqlite(path: Path, *, create: bool, read_only: bool = False,
                checked: Checked | None = None) -> Iterator[Store]:
    """Opens (and with `create`, creates) a checkpoint database file.

    Args:
        path: The database file.
        create: Allow creating a new file; when False a missing file is refused and
            nothing is created.
        read_only: Open both connections read-only (`mode=ro`), skip schema set-up and
            lock files: for history and listing, which never write.
        checked: What the poll found of this very file, unchanged since
            (`graph.store.sqlite.handoff`): its checks are not made again.

    Yields:
        The open store; closed on exit.

    Raises:
        RefusedError: `no_such_file` or `damaged` (see `check_database`).
        SecondNameError: The file has a second name (`graph.store.sqlite.names`; exit 2).
    """
    path = path.resolve()
    if create and not read_only and not path.exists():
        if not path.parent.is_dir():
            raise UsageError(f"folder {path.parent} for the database does not exist")
        _create_atomically(path)
    if checked is None:
        check_database(path)
        check_one_name(path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(
            f"warning: {path} is readable by other users (mode {stat.filemode(mode)}); "
            "it holds private task data: chmod 600 it",
            file=sys.stderr,
        )
    slot = NameSlot(path)  # before SQLite opens the file under this name
    try:
        store = _open_store(path, read_only, None if checked is None else checked.needs_setup)
        try:
            yield store
        finally:
            store.close()
    finally:
        slot.close()


def _open_store(path: Path, read_only: bool, needs_setup: bool | None = None) -> Store:
    """Connects (one connection: saver, our tables, digests), setting the schema up when it must.

    `needs_setup`: `schema_needs_setup`'s answer when the poll just gave it; None asks.
    """
    locks: WriterLocks
    if read_only:

        schema_needs_setup(path)  # refuses a dropped trigger for readers too
        conn = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False,
                               isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        sql = SqliteSql(conn)
        checkpointer = _saver(sql, ddl=False)  # setup() writes
        locks = ReadOnlyLocks()
    else:
        ddl_needed = schema_needs_setup(path) if needs_setup is None else needs_setup
        with _private_files():
            conn = _connect(path)
            sql = SqliteSql(conn)
            checkpointer = _saver(sql, ddl=ddl_needed)
            locks = ThreadLocks(path)
    return sql_store(str(path), checkpointer, sql, locks=locks, conns=(conn,),
                       ledger_type=SqliteLedger, summaries=True)
