"""The small SQL layer our tables share: one autocommit connection and its dialect.

Ledger, attempt log, tombstones, approvals and digests run the same statements, written
with `?` markers, on sqlite3 and psycopg connections. `SqliteSql` and `PostgresSql` are
the only places that know how the two differ: the parameter marker, how a transaction
starts, how the catalogue says a table exists, how a migration is serialized, and how
space is measured and reclaimed.

On SQLite the connection is shared with LangGraph's saver, so that a superstep commits
once (`SqliteSql.deferred`, `graph.store.saver`); on PostgreSQL every statement commits.
"""

from __future__ import annotations

import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import psycopg

__all__ = ["Cursor", "PostgresSql", "Sql", "SqlTable", "SqliteSql"]


class Cursor(Protocol):
    """What our tables use of a sqlite3 or psycopg cursor."""

    @property
    def rowcount(self) -> int:
        """Rows changed by the statement."""

    @property
    def description(self) -> Any:
        """Column descriptions (`[0]` is the name), or None for a statement without rows."""

    def fetchone(self) -> Any:
        """The next row (a tuple), or None."""

    def fetchall(self) -> list[Any]:
        """The remaining rows (tuples)."""


class _Rows:
    """A statement's rows, fetched while the connection's lock was held (a `Cursor`)."""

    def __init__(self, rows: list[Any], rowcount: int, description: Any) -> None:
        self._rows, self.rowcount, self.description = iter(rows), rowcount, description

    def fetchone(self) -> Any:
        """The next row, or None."""
        return next(self._rows, None)

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        return list(self._rows)


class Sql(ABC):
    """One autocommit connection of ours (each statement commits) and its dialect.

    Attributes:
        placeholder: The driver's parameter marker that replaces `?` in statements.
    """

    placeholder: ClassVar[str]
    json_number: ClassVar[str]
    """An expression template reading a number at `{path}` (`a.b`) / `{path_pg}` (`a,b`) of
    the JSON text in `{column}` (SQLite `json_extract`, PostgreSQL `jsonb`)."""
    json_kind: ClassVar[str]
    """An expression template giving the JSON type at the same place: `number`, `null`,
    another type's name, or NULL when nothing is there (read `json_number` only when it
    is `number`: PostgreSQL's cast fails on text)."""
    _exists_sql: ClassVar[str]
    """A query whose one value says whether the table named by its parameter exists."""

    def __init__(self) -> None:
        self._tables: set[str] = set()

    @abstractmethod
    def _execute(self, sql: str, params: Sequence[Any]) -> Cursor:
        """Runs a statement already in the driver's marker style."""

    def run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Runs one statement written with `?` markers; returns its cursor."""
        return self._execute(sql.replace("?", self.placeholder), params)

    def value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row of a query, or None when it has no row."""
        row = self.run(sql, params).fetchone()
        return None if row is None else row[0]

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """One transaction on the autocommit connection; rolls back on any error."""

    def deferred(self) -> AbstractContextManager[None]:
        """Writes in the block may wait for the next commit instead of committing now.

        For writes that a later commit of the same step makes durable in time (the
        count before its claim, an attempt-log row with its node's checkpoint). Here
        each statement still commits; `SqliteSql` keeps them for the next commit.
        """
        return nullcontext()

    def commit(self) -> None:  # noqa: B027 - a default that backends may override
        """Commits writes that `deferred` kept back; here nothing is ever kept back."""

    def table_exists(self, table: str) -> bool:
        """Whether `table` exists, read from the catalogue (a database from before it lacks it).

        Tables of ours are never dropped once they exist (a migration rebuilds one in
        the same transaction), so a table found once is not looked up again.
        """
        if table not in self._tables and self.value(self._exists_sql, (table,)):
            self._tables.add(table)
        return table in self._tables

    @abstractmethod
    def serialize_migration(self, key: int) -> None:
        """Inside a transaction: waits until no other process migrates (lock `key`)."""

    @abstractmethod
    def used_bytes(self) -> int:
        """Bytes the database uses."""

    @abstractmethod
    def reclaim_space(self) -> None:
        """Gives free space back to the file system when that is worth it."""


class SqliteSql(Sql):
    """A sqlite3 connection with `isolation_level=None`, shared with LangGraph's saver.

    A statement outside any block commits at once, with whatever `deferred` kept back
    (a read commits nothing). `deferred` opens a transaction (`BEGIN IMMEDIATE`) that
    the next commit closes: the saver's `put` (`graph.store.saver`), a write outside a
    block, a `transaction`, `commit`, or closing the store. Statements and blocks run
    under `lock`, which the saver shares, so LangGraph's background threads never
    interleave with a block and never commit or roll one back half done.

    Attributes:
        conn: The connection.
        lock: Held by every statement and block (reentrant).
    """

    placeholder = "?"
    json_number = "json_extract({column}, '$.{path}')"
    json_kind = ("(CASE json_type({column}, '$.{path}') WHEN 'integer' THEN 'number' "
                 "WHEN 'real' THEN 'number' ELSE json_type({column}, '$.{path}') END)")
    _exists_sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__()
        self.conn = conn
        self.lock = threading.RLock()
        self.holds = 0
        """Blocks (`deferred`, `transaction`) open on the thread holding `lock`."""

    def _execute(self, sql: str, params: Sequence[Any]) -> Cursor:
        with self.lock:
            changes = self.conn.total_changes
            cursor = self.conn.execute(sql, params)
            rows = _Rows(cursor.fetchall(), cursor.rowcount, cursor.description)
            if not self.holds and self.conn.in_transaction and self.conn.total_changes != changes:
                self.conn.execute("COMMIT")
            return rows

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Joins the open transaction, or opens one with `BEGIN IMMEDIATE`; commits nothing."""
        with self.lock:
            if not self.conn.in_transaction:
                self.conn.execute("BEGIN IMMEDIATE")
            self.holds += 1
            try:
                yield
            finally:
                self.holds -= 1

    def commit(self) -> None:
        """Commits what `deferred` kept back; inside a block, does nothing."""
        with self.lock:
            if not self.holds and self.conn.in_transaction:
                self.conn.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """An atomic block, committed at its end with what was kept back before it.

        `BEGIN IMMEDIATE` (the write lock at once, so no other writer interleaves); inside
        an open transaction a savepoint, so an error rolls back only the block. Inside
        another block, the outer block commits.
        """
        with self.lock:
            nested = self.conn.in_transaction
            self.conn.execute("SAVEPOINT block" if nested else "BEGIN IMMEDIATE")
            self.holds += 1
            try:
                yield
            except BaseException:
                if nested:
                    self.conn.execute("ROLLBACK TO block")
                    self.conn.execute("RELEASE block")
                else:
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self.holds -= 1
            if nested:
                self.conn.execute("RELEASE block")
            self.commit()

    def serialize_migration(self, key: int) -> None:
        """Nothing more: `BEGIN IMMEDIATE` already holds the file's write lock."""

    def _pages(self) -> tuple[int, int, int]:
        """`(page_count, freelist_count, page_size)`."""
        return (self.value("PRAGMA page_count"), self.value("PRAGMA freelist_count"),
                self.value("PRAGMA page_size"))

    def used_bytes(self) -> int:
        """`(page_count - freelist_count) * page_size`."""
        pages, free, size = self._pages()
        return int((pages - free) * size)

    def reclaim_space(self) -> None:
        """`VACUUM` when over a quarter of the file (and 1 MiB) is free pages."""
        pages, free, size = self._pages()
        if free * size >= 1 << 20 and free * 4 >= pages:
            self.commit()  # VACUUM runs outside a transaction
            try:
                self.conn.execute("VACUUM")
            except sqlite3.OperationalError:
                pass  # another process is using the file; the free pages are reused anyway


class PostgresSql(Sql):
    """A psycopg connection with `autocommit=True` and tuple rows."""

    placeholder = "%s"
    json_number = "({column}::jsonb #>> '{{{path_pg}}}')::numeric"
    json_kind = "jsonb_typeof({column}::jsonb #> '{{{path_pg}}}')"
    _exists_sql = "SELECT to_regclass(?) IS NOT NULL"

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        super().__init__()
        self.conn = conn

    def _execute(self, sql: str, params: Sequence[Any]) -> Cursor:
        return self.conn.execute(sql, params)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """The `Connection.transaction()` of psycopg."""
        with self.conn.transaction():
            yield

    def serialize_migration(self, key: int) -> None:
        """`pg_advisory_xact_lock(key)`: held until the transaction ends."""
        self.run("SELECT pg_advisory_xact_lock(?)", (key,))

    def used_bytes(self) -> int:
        """`pg_database_size` of the current database (autovacuum reclaims space)."""
        return int(self.value("SELECT pg_database_size(current_database())"))

    def reclaim_space(self) -> None:
        """Nothing: PostgreSQL's autovacuum reclaims space."""


class SqlTable:
    """Base of our table classes.

    Args:
        db: The connection the table's statements run on.
        fence: The store's fencing hook (`graph.store.base.WriterLocks.fence`), called
            before each write of a thread's rows; None for a table used on its own
            (tests, the quick poll, which only reads).
    """

    def __init__(self, db: Sql, fence: Callable[[str], str] | None = None) -> None:
        self._db = db
        self._fencer = fence

    def _fence(self, thread_id: str) -> None:
        """Refuses a write of the thread's rows by a store that may not write it (`fence`)."""
        if self._fencer is not None:
            self._fencer(thread_id)

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Runs one statement written with `?` markers; returns the cursor."""
        return self._db.run(sql, params)

    def _rows_if_table(self, table: str, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """Rows of a query, or None when `table` does not exist (a database from before it)."""
        if not self._db.table_exists(table):
            return None
        return self._run(sql, params).fetchall()
