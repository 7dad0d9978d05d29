"""Opens a SQLite checkpoint database: LangGraph's `SqliteSaver`, our ledger and locks.

Both connections run with WAL, `synchronous=FULL` (a commit survives power loss) and a
busy timeout, so several processes can share one file. SQLite files belong on a
local disk: WAL needs shared memory that network filesystems do not provide.
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

from graph.checked_saver import sqlite_saver
from graph.database import ReadOnlyLocks, Store, WriterLocks
from graph.digest import SqlDigests, new_marker
from graph.errors import UsageError
from graph.locks import ThreadLocks
from graph.names import NameSlot, check_one_name
from graph.schema import ddl
from graph.sql import SqliteSql
from graph.sqlite_file import check_database, schema_needs_setup
from graph.sqlite_ledger import SqliteLedger
from nodes.files import sweep_stale

if TYPE_CHECKING:
    from langgraph.checkpoint.sqlite import SqliteSaver

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


def _connect(path: Path, *, autocommit: bool = False) -> sqlite3.Connection:
    """A connection with `_PRAGMAS`; with `autocommit`, each statement commits."""
    conn = sqlite3.connect(path, check_same_thread=False,
                           isolation_level=None if autocommit else "DEFERRED")
    for pragma in _PRAGMAS:
        conn.execute(pragma)
    return conn


def _saver(saver_conn: sqlite3.Connection, digest_conn: sqlite3.Connection, *,
           ddl_conn: sqlite3.Connection | None) -> SqliteSaver:
    """The checked saver, its digests on `digest_conn` (a connection of their own).

    With `ddl_conn`, our schema (`graph.schema`) and LangGraph's are set up first.
    """
    checkpointer = sqlite_saver(saver_conn, SqlDigests(SqliteSql(digest_conn)))
    if ddl_conn is not None:
        ddl_conn.executescript(ddl("sqlite", new_marker()))
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
        conn = _connect(tmp, autocommit=True)
        try:
            _saver(conn, conn, ddl_conn=conn)
        finally:
            conn.close()
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process created it first; use theirs
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def open_sqlite(path: Path, *, create: bool, read_only: bool = False) -> Iterator[Store]:
    """Opens (and with `create`, creates) a checkpoint database file.

    Args:
        path: The database file.
        create: Allow creating a new file; when False a missing file is refused and
            nothing is created.
        read_only: Open both connections read-only (`mode=ro`), skip schema set-up and
            lock files: for history and listing, which never write.

    Yields:
        The open store; closed on exit.

    Raises:
        RefusedError: `no_such_file` or `damaged` (see `check_database`).
        SecondNameError: The file has a second name (`graph.names`; exit 2).
    """
    path = path.resolve()
    if create and not read_only and not path.exists():
        if not path.parent.is_dir():
            raise UsageError(f"folder {path.parent} for the database does not exist")
        _create_atomically(path)
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
        store = _open_store(path, read_only)
        try:
            yield store
        finally:
            store.close()
    finally:
        slot.close()


def _open_store(path: Path, read_only: bool) -> Store:
    """Connects (saver, our tables, digests), setting the schema up when it must."""
    locks: WriterLocks
    if read_only:
        from graph.access import read_only_uri

        schema_needs_setup(path)  # refuses a dropped trigger for readers too
        uri = read_only_uri(path)
        saver_conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        ledger_conn = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                      isolation_level=None)
        digest_conn = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                      isolation_level=None)
        for conn in (saver_conn, ledger_conn, digest_conn):
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        checkpointer = _saver(saver_conn, digest_conn, ddl_conn=None)  # setup() writes
        locks = ReadOnlyLocks()
    else:
        ddl_needed = schema_needs_setup(path)
        with _private_files():
            saver_conn = _connect(path)
            ledger_conn = _connect(path, autocommit=True)
            digest_conn = _connect(path, autocommit=True)
            checkpointer = _saver(saver_conn, digest_conn,
                                  ddl_conn=ledger_conn if ddl_needed else None)
            locks = ThreadLocks(path)
    return Store.build(str(path), checkpointer, SqliteSql(ledger_conn), locks=locks,
                       conns=(saver_conn, ledger_conn, digest_conn), ledger_type=SqliteLedger,
                       summaries=True)
