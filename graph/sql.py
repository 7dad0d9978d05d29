"""The small SQL layer our tables share: one autocommit connection, `?` placeholders.

Ledger, attempt log, tombstones and approvals run the same statements on sqlite3 and
psycopg connections; only the parameter marker differs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class SqlTable:
    """Base of our table classes.

    Args:
        conn: A `sqlite3` connection with `isolation_level=None`, or a psycopg
            connection with `autocommit=True` (tuple rows): each statement commits.
        placeholder: The driver's parameter marker: `?` (sqlite3) or `%s` (psycopg).
    """

    def __init__(self, conn: Any, *, placeholder: str = "?") -> None:
        self._conn = conn
        self._ph = placeholder

    def _run(self, sql: str, params: tuple = ()) -> Any:
        """Runs one statement written with `?` markers; returns the cursor."""
        return self._conn.execute(sql.replace("?", self._ph), params)

    def _rows_if_table(self, table: str, sql: str, params: tuple) -> list[tuple] | None:
        """Rows of a query, or None when `table` does not exist (a database from before it)."""
        try:
            return self._run(sql, params).fetchall()
        except Exception as exc:  # noqa: BLE001 - only a missing table is expected here
            if table in str(exc) and ("no such table" in str(exc) or "does not exist" in str(exc)):
                return None
            raise


@contextmanager
def transaction(conn: Any) -> Iterator[None]:
    """One transaction on an autocommit connection (sqlite3 or psycopg); rolls back on error."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    else:
        with conn.transaction():
            yield
