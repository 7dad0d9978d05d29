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
from typing import Any

from graph.approvals import APPROVALS_DDL
from graph.attempt_log import SQLITE_LOG_DDL
from graph.checked_saver import sqlite_saver
from graph.digest import DIGEST_TABLE, digest_ddl, new_marker
from graph.errors import RefusedError, UsageError
from graph.exitcodes import ErrorCode
from graph.ledger import SQLITE_LEDGER_DDL
from graph.locks import ThreadLocks
from graph.names import NameSlot, check_one_name
from graph.serde import make_serde
from graph.sqlite_ledger import SqliteLedger
from graph.store import Store
from graph.tombstones import TOMBSTONE_DDL
from nodes.files import sweep_stale

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


def _connect(path: Path, **kwargs: Any) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, **kwargs)
    for pragma in _PRAGMAS:
        conn.execute(pragma)
    return conn


SQLITE_HEADER = b"SQLite format 3\x00"
OUR_TABLES = frozenset({"checkpoints", "writes", "attempt_ledger"})


def check_database(path: Path) -> None:
    """Refuses a file that is not an intact checkpoint database, without writing to it.

    A bounded check that keeps start-up fast however large the file: the SQLite
    header, our tables in the schema, and the page count against the file size
    (truncation). Deeper damage is caught by SQLite when a page is read, and by the
    checksums when a value is read; `python -m graph.verify` runs SQLite's full
    `integrity_check`.

    Raises:
        RefusedError: `no_such_file` when missing; `damaged` otherwise.
    """

    def refuse(why: str) -> RefusedError:
        return RefusedError(f"{path}: {why}", error_code=ErrorCode.DAMAGED)

    if not path.exists():
        raise RefusedError(f"no such checkpoint file: {path}", error_code=ErrorCode.NO_SUCH_FILE)
    if not path.is_file():
        raise refuse("is not a regular file")
    with open(path, "rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_HEADER):
        raise refuse("is not a SQLite database" + (" (empty file)" if not header else ""))
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise refuse(f"is not a readable SQLite database ({exc})") from None
    if not OUR_TABLES <= tables:
        raise refuse(f"is a SQLite database but not a mandapi-resume checkpoint database "
                     f"(tables: {', '.join(sorted(tables)) or 'none'})")
    wal = path.with_name(path.name + "-wal")
    if (not wal.exists() or wal.stat().st_size == 0) and path.stat().st_size < pages * page_size:
        raise refuse(f"is truncated ({path.stat().st_size} bytes, {pages} pages of {page_size})")


_SCHEMA = frozenset({
    ("table", "request_caps"), ("table", "attempt_ledger"), ("table", "attempt_log"),
    ("table", "thread_tombstones"), ("table", "write_approvals"), ("table", "checkpoints"),
    ("table", "writes"), ("table", DIGEST_TABLE), ("index", "attempt_log_thread"),
    ("trigger", "attempt_ledger_never_decreases"), ("trigger", "attempt_log_append_only"),
    ("trigger", "request_caps_never_decreases")})
"""Every schema object this program and LangGraph create in a SQLite file."""
_TRIGGERS = {"attempt_ledger_never_decreases": "attempt_ledger",
             "attempt_log_append_only": "attempt_log"}


def schema_needs_setup(path: Path) -> bool:
    """Whether opening `path` for writing must run DDL (an older schema gains tables).

    Read before any DDL, so a refused file keeps its bytes.

    Raises:
        RefusedError: `damaged` when a trigger of ours is missing beside its table
            (dropped: the ledger's promises no longer hold, and re-creating it would
            hide that).
    """
    from graph.access import read_only_uri

    conn = sqlite3.connect(read_only_uri(path), uri=True)  # creates no -wal/-shm it may not
    try:
        found = {(kind, name) for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master")}
        columns = {row[1] for row in conn.execute("PRAGMA table_info(writes)")}
    except sqlite3.DatabaseError as exc:
        raise RefusedError(f"{path}: is not a readable SQLite database ({exc})",
                           error_code=ErrorCode.DAMAGED) from None
    finally:
        conn.close()
    for trigger, table in _TRIGGERS.items():
        if ("table", table) in found and ("trigger", trigger) not in found:
            raise RefusedError(f"{path}: trigger {trigger} of table {table} was dropped; the "
                               "database was changed outside this program", error_code=ErrorCode.DAMAGED)
    return not _SCHEMA <= found or "task_path" not in columns


def _setup_schema(saver_conn: sqlite3.Connection, ledger_conn: sqlite3.Connection, *,
                  ddl: bool = True) -> Any:
    checkpointer = sqlite_saver(saver_conn, make_serde())
    if ddl:
        ledger_conn.executescript(SQLITE_LEDGER_DDL + SQLITE_LOG_DDL + TOMBSTONE_DDL
                                  + APPROVALS_DDL + digest_ddl(new_marker()))
        checkpointer.setup()
    checkpointer.is_setup = True
    return checkpointer


def _create_atomically(path: Path) -> None:
    """Creates a complete, empty checkpoint database at `path`, or leaves an existing one.

    The database is built under a temporary name and hard-linked into place, so a
    process killed during creation never leaves a half-made file that later runs
    would have to refuse.
    """
    for suffix in (".creating", ".creating-wal", ".creating-shm"):  # left by killed creators
        sweep_stale(path.parent, path.name, suffix)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.creating")
    with _private_files():
        conn = _connect(tmp, isolation_level=None)
        try:
            _setup_schema(conn, conn)
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
        checkpointer = _setup_schema(saver_conn, ledger_conn, ddl=False)  # setup() writes
        locks = None
    else:
        ddl = schema_needs_setup(path)
        with _private_files():
            saver_conn = _connect(path)
            ledger_conn = _connect(path, isolation_level=None)
            digest_conn = _connect(path, isolation_level=None)
            checkpointer = _setup_schema(saver_conn, ledger_conn, ddl=ddl)
            locks = ThreadLocks(path)
    return Store.build(str(path), checkpointer, ledger_conn, placeholder="?", locks=locks,
                       conns=(saver_conn, ledger_conn, digest_conn), digest_conn=digest_conn,
                       ledger_type=SqliteLedger)
