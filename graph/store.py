"""An open checkpoint database, whatever the backend: the one shape every entry point uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.approvals import SqlApprovals
from graph.attempt_log import SqlAttemptLog
from graph.digest import SqlDigests
from graph.ledger import SqlLedger
from graph.tombstones import SqlTombstones


@dataclass
class Store:
    """An open checkpoint database (SQLite file or PostgreSQL).

    Attributes:
        location: The file path, or the URL with its password redacted, for messages.
        checkpointer: LangGraph's `SqliteSaver` or `PostgresSaver`, on its own connection.
        conn: The autocommit connection of the ledger, log, tombstones and approvals.
        ledger: The attempt ledger.
        log: The append-only attempt log.
        tombstones: Tombstones of pruned threads.
        approvals: Decisions on write calls.
        locks: Per-thread writer locks (`hold(thread_id)`); None when opened read-only.
    """

    location: str
    checkpointer: Any
    conn: Any
    ledger: SqlLedger
    log: SqlAttemptLog
    tombstones: SqlTombstones
    approvals: SqlApprovals
    locks: Any
    _conns: tuple[Any, ...]

    @classmethod
    def build(cls, location: str, checkpointer: Any, conn: Any, *, placeholder: str,
              locks: Any, conns: tuple[Any, ...], digest_conn: Any = None,
              ledger_type: type[SqlLedger] = SqlLedger) -> Store:
        """A store whose tables all run on `conn` (`?` for sqlite3, `%s` for psycopg).

        The checkpoint digests (`graph.digest`) run on `digest_conn` when given;
        `ledger_type` lets a backend add what its claims need (`graph.sqlite_ledger`).
        """
        checkpointer.digests = SqlDigests(digest_conn or conn, placeholder=placeholder)
        return cls(location, checkpointer, conn, ledger_type(conn, placeholder=placeholder),
                   SqlAttemptLog(conn, placeholder=placeholder),
                   SqlTombstones(conn, placeholder=placeholder),
                   SqlApprovals(conn, placeholder=placeholder), locks, conns)

    def close(self) -> None:
        """Closes the connections, then any lock handle.

        In that order: closing a handle of the database file first would drop SQLite's
        own locks (see `graph.locks`).
        """
        for conn in self._conns:
            conn.close()
        close_locks = getattr(self.locks, "close", None)
        if close_locks is not None:
            close_locks()
