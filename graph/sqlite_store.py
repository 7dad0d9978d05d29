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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph.errors import RefusedError
from graph.locks import ThreadLocks
from graph.serde import make_serde
from graph.ledger import SQLITE_LEDGER_DDL, SqlLedger

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for SQLite's database lock before failing (milliseconds)."""

_PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
)


@contextmanager
def _private_files() -> Iterator[None]:
    """Creates files (database, `-wal`, `-shm`, lock) readable by the owner only (0600)."""
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


def check_readable(path: Path) -> None:
    """Refuses a file that is not a SQLite database, without writing to it.

    Opens the file read-only and reads its schema. Deeper checks are in
    `graph.integrity`.

    Raises:
        RefusedError: `no_such_file` when missing, `damaged` when not a database.
    """
    if not path.exists():
        raise RefusedError(f"no such checkpoint file: {path}", error_code="no_such_file")
    if not path.is_file():
        raise RefusedError(f"{path} is not a regular file", error_code="damaged")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise RefusedError(
            f"{path} is not a readable SQLite database ({exc})", error_code="damaged"
        ) from None


@dataclass
class SqliteStore:
    """An open SQLite checkpoint database.

    Attributes:
        location: The database path, for messages.
        checkpointer: LangGraph's `SqliteSaver` on its own connection.
        ledger: The attempt ledger on a second, autocommit connection.
        locks: Per-thread writer locks (`<db>.lock`).
    """

    location: str
    checkpointer: Any
    ledger: SqlLedger
    locks: ThreadLocks
    _conns: tuple[sqlite3.Connection, ...]

    def close(self) -> None:
        """Closes both connections and the lock file."""
        for conn in self._conns:
            conn.close()
        self.locks.close()


@contextmanager
def open_sqlite(path: Path, *, create: bool) -> Iterator[SqliteStore]:
    """Opens (and with `create`, creates) a checkpoint database file.

    Args:
        path: The database file.
        create: Allow creating a new file; when False a missing file is refused and
            nothing is created.

    Yields:
        The open store; closed on exit.

    Raises:
        RefusedError: `no_such_file` or `damaged` (see `check_readable`).
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    existed = path.exists()
    if existed or not create:
        check_readable(path)
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            print(
                f"warning: {path} is readable by other users (mode {stat.filemode(mode)}); "
                "it holds private task data: chmod 600 it",
                file=sys.stderr,
            )
    with _private_files():
        saver_conn = _connect(path)
        ledger_conn = _connect(path, isolation_level=None)
        locks = ThreadLocks(path.with_name(path.name + ".lock"))
        ledger_conn.executescript(SQLITE_LEDGER_DDL)
        checkpointer = SqliteSaver(saver_conn, serde=make_serde())
        checkpointer.setup()
    store = SqliteStore(str(path), checkpointer, SqlLedger(ledger_conn), locks, (saver_conn, ledger_conn))
    try:
        yield store
    finally:
        store.close()
