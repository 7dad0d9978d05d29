"""The `write_approvals` table: one decision row per write call of one assistant turn.

A call is named by its thread, the attempt whose reply asked for it (one reply per
attempt) and its id, because servers that number `call_0`, `call_1` afresh in every
reply reuse ids across turns: a decision on one turn's `call_0` must never answer
another turn's.

Databases written before this key (`PRIMARY KEY (thread_id, tool_call_id)`: version 1 of
the table, version 2 has `attempt`) are upgraded by the store's one mechanism
(`graph.store.migrations`, step `write_approvals` 1 to 2): read in memory by any reader
(`graph.history` changes nothing), written back before this store's first write to the
table, in one transaction serialized between processes.
"""

from __future__ import annotations

from typing import Any

from graph.store.migrations import read_table, upgrade_table
from graph.store.rows import APPROVAL_TYPES, check_row, now, text_refused
from graph.store.sql.attempt_log import SqlAttemptLog
from graph.store.sql.conn import Sql, SqlTable
from graph.store.sql.schema import APPROVALS, APPROVALS_COLUMNS, APPROVALS_LEGACY_COLUMNS, APPROVALS_MIGRATION

__all__ = ["COLUMNS", "SqlApprovals"]

COLUMNS = APPROVALS_COLUMNS
"""Columns of a decision row (`graph.store.rows.APPROVAL_COLUMNS`)."""
_LEGACY = APPROVALS_LEGACY_COLUMNS
_COLUMN_TYPES = APPROVAL_TYPES
_LEGACY_TYPES = {c: _COLUMN_TYPES[c] for c in _LEGACY}
_SHAPES = {1: (_LEGACY, _LEGACY_TYPES), 2: (COLUMNS, _COLUMN_TYPES)}
"""The columns and their checks of each version of the table."""


class _ReplyTurns:
    """Which attempt's reply carried each call id, from the attempt log (`Lookups`).

    Read once per thread for one upgrade or one read.
    """

    def __init__(self, db: Sql) -> None:
        self._log = SqlAttemptLog(db)
        self._turns: dict[str, dict[str, int]] = {}

    def reply_turn(self, thread_id: str, tool_call_id: str) -> int | None:
        """The attempt whose reply asked for `tool_call_id`, or None when the log does not know."""
        if thread_id not in self._turns:
            self._turns[thread_id] = {
                c["id"]: entry["attempt"] for entry in self._log.rows(thread_id)
                if entry["kind"] == "reason" for c in entry["payload"].get("tool_calls") or []}
        return self._turns[thread_id].get(tool_call_id)


class SqlApprovals(SqlTable):
    """Decision rows on write calls (see `graph.store.sql.conn.SqlTable` and the module doc).

    The table as `graph.store.migrations.upgrade_table` upgrades it (`VersionedTable`).
    """

    name = APPROVALS
    _current = False

    def stored_version(self) -> int | None:
        """1 before the per-turn key (no `attempt` column), else 2; None without the table."""
        if not self._db.table_exists(APPROVALS):
            return None
        cursor = self._run("SELECT * FROM write_approvals WHERE 1 = 0")
        return 2 if "attempt" in (d[0] for d in cursor.description) else 1

    def stored_rows(self, version: int, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Every row (of `thread_id`, or all) as stored at `version`, checked (`graph.store.rows`).

        Raises:
            RefusedError: `damaged` for a row of another type or text that is not UTF-8.
        """
        columns, types = _SHAPES[version]
        where, params = ("WHERE thread_id = ?", (thread_id,)) if thread_id else ("", ())
        with text_refused("write_approvals"):
            found = self._run(f"SELECT {', '.join(columns)} FROM write_approvals {where}",
                              params).fetchall()
        for row in found:
            check_row("write_approvals", row, types)
        return [dict(zip(columns, r, strict=True)) for r in found]

    def rebuild(self, rows: list[dict[str, Any]]) -> None:
        """Drops the table and creates it in today's shape holding `rows` (caller's transaction)."""
        for statement in APPROVALS_MIGRATION:
            self._run(statement)
        for row in rows:
            self._insert(row)

    def lookups(self) -> _ReplyTurns:
        """The attempt log's reply turns (what the 1 to 2 step reads)."""
        return _ReplyTurns(self._db)

    def _ensure_current(self) -> None:
        """Writes the table back in its current version before the first write (once per store)."""
        if self._current:
            return
        upgrade_table(self._db, self)
        self._current = True

    def _insert(self, row: dict[str, Any]) -> None:
        self._run(f"INSERT INTO write_approvals ({', '.join(COLUMNS)}) VALUES "
                  f"({', '.join('?' for _ in COLUMNS)})", tuple(row[c] for c in COLUMNS))

    def rows(self, thread_id: str) -> dict[tuple[int, str], dict[str, Any]]:
        """Every decision of a thread by (attempt, call id), in decision order.

        Empty for a database from before approvals; never writes.
        """
        found = read_table(self, thread_id)
        found.sort(key=lambda r: (r["decided_at"], r["attempt"], r["tool_call_id"]))
        return {(r["attempt"], r["tool_call_id"]): r for r in found}

    def turn(self, thread_id: str, attempt: int) -> dict[str, dict[str, Any]]:
        """The decisions on the calls of one turn (the reply of `attempt`), by call id."""
        return {cid: row for (turn, cid), row in self.rows(thread_id).items() if turn == attempt}

    def add(self, row: dict[str, Any]) -> None:
        """Records one decision; a second decision for the same call is refused by the key."""
        self._fence(row["thread_id"])
        self._ensure_current()
        self._insert({c: row.get(c) for c in COLUMNS})

    def plan(self, thread_id: str, attempt: int, tool_call_id: str, before: str | None,
             after: str) -> None:
        """Records, before writing, the file's hash now and the hash it will have after."""
        self._fence(thread_id)
        self._ensure_current()
        self._run("UPDATE write_approvals SET before_sha256 = ?, after_sha256 = ? WHERE "
                  "thread_id = ? AND attempt = ? AND tool_call_id = ? AND before_sha256 IS NULL",
                  (before, after, thread_id, attempt, tool_call_id))

    def mark_applied(self, thread_id: str, attempt: int, tool_call_id: str) -> None:
        """Marks an approved write as done."""
        self._fence(thread_id)
        self._ensure_current()
        self._run("UPDATE write_approvals SET applied_at = ? WHERE thread_id = ? AND attempt = ? "
                  "AND tool_call_id = ? AND applied_at IS NULL AND error IS NULL",
                  (now(), thread_id, attempt, tool_call_id))

    def mark_failed(self, thread_id: str, attempt: int, tool_call_id: str, error: str,
                    result: str) -> None:
        """Records that an approved write could not be applied, why, and what the model is told."""
        self._fence(thread_id)
        self._ensure_current()
        self._run("UPDATE write_approvals SET error = ?, result = ? WHERE thread_id = ? AND "
                  "attempt = ? AND tool_call_id = ? AND applied_at IS NULL AND error IS NULL",
                  (error, result, thread_id, attempt, tool_call_id))

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's decisions (retention)."""
        self._fence(thread_id)
        self._run("DELETE FROM write_approvals WHERE thread_id = ?", (thread_id,))
