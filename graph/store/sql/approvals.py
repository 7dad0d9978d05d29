"""The `write_approvals` table: one decision row per write call of one assistant turn.

A call is named by its thread, the attempt whose reply asked for it (one reply per
attempt) and its id, because servers that number `call_0`, `call_1` afresh in every
reply reuse ids across turns: a decision on one turn's `call_0` must never answer
another turn's.

Databases written before this key (`PRIMARY KEY (thread_id, tool_call_id)`) are
migrated on first write, in one transaction, serialized between processes: each old
row gets the attempt whose reply carried its call id (ids were unique in a thread
then; the attempt log says which reply), or 0 when the log does not know (a row that
then answers no turn and stays visible in history). Reading such a database without
writing (`graph.history`) maps the attempts the same way and changes nothing.
"""

from __future__ import annotations

from typing import Any

from graph.store.rows import APPROVAL_TYPES, check_row, now, text_refused
from graph.store.sql.attempt_log import SqlAttemptLog
from graph.store.sql.conn import SqlTable
from graph.store.sql.schema import APPROVALS, APPROVALS_COLUMNS, APPROVALS_LEGACY_COLUMNS, APPROVALS_MIGRATION
from nodes.write_results import legacy_error

COLUMNS = APPROVALS_COLUMNS
"""Columns of a decision row (`graph.store.rows.APPROVAL_COLUMNS`)."""
_LEGACY = APPROVALS_LEGACY_COLUMNS
_COLUMN_TYPES = APPROVAL_TYPES
_LEGACY_TYPES = {c: _COLUMN_TYPES[c] for c in _LEGACY}
_MIGRATION_LOCK = 0x6D72_6170  # PostgreSQL advisory lock key: "mrap"


class SqlApprovals(SqlTable):
    """Decision rows on write calls (see `graph.store.sql.conn.SqlTable` and the module doc)."""

    _current = False

    def _columns(self) -> tuple[str, ...] | None:
        """The table's columns, or None when there is no table (a database from before it)."""
        if not self._db.table_exists(APPROVALS):
            return None
        cursor = self._run("SELECT * FROM write_approvals WHERE 1 = 0")
        return tuple(d[0] for d in cursor.description)

    def _legacy_rows(self, thread_id: str | None) -> list[dict[str, Any]]:
        where, params = ("WHERE thread_id = ?", (thread_id,)) if thread_id else ("", ())
        with text_refused("write_approvals"):
            found = self._run(f"SELECT {', '.join(_LEGACY)} FROM write_approvals {where}",
                              params).fetchall()
        for row in found:
            check_row("write_approvals", row, _LEGACY_TYPES)
        rows = [dict(zip(_LEGACY, r, strict=True)) for r in found]
        turns: dict[str, dict[str, int]] = {}
        log = SqlAttemptLog(self._db)
        for row in rows:
            tid = row["thread_id"]
            if tid not in turns:
                turns[tid] = {c["id"]: entry["attempt"] for entry in log.rows(tid)
                              if entry["kind"] == "reason"
                              for c in entry["payload"].get("tool_calls") or []}
            failed = legacy_error(row["decision"], row["result"]) is not None
            row.update(attempt=turns[tid].get(row["tool_call_id"], 0), arguments=None,
                       error=row["result"] if failed else None,
                       applied_at=None if failed else row["applied_at"])
        return rows

    def _ensure_current(self) -> None:
        """Migrates a table from before the per-turn key (see module doc); once per store."""
        if self._current:
            return
        with self._db.transaction():
            self._db.serialize_migration(_MIGRATION_LOCK)
            columns = self._columns()
            if columns is not None and "attempt" not in columns:
                rows = self._legacy_rows(None)
                for statement in APPROVALS_MIGRATION:
                    self._run(statement)
                for row in rows:
                    self._insert(row)
        self._current = True

    def _insert(self, row: dict[str, Any]) -> None:
        self._run(f"INSERT INTO write_approvals ({', '.join(COLUMNS)}) VALUES "
                  f"({', '.join('?' for _ in COLUMNS)})", tuple(row[c] for c in COLUMNS))

    def rows(self, thread_id: str) -> dict[tuple[int, str], dict[str, Any]]:
        """Every decision of a thread by (attempt, call id), in decision order.

        Empty for a database from before approvals; never writes.
        """
        columns = self._columns()
        if columns is None:
            return {}
        if "attempt" not in columns:
            found = self._legacy_rows(thread_id)
        else:
            with text_refused("write_approvals"):
                raw = self._run(f"SELECT {', '.join(COLUMNS)} FROM write_approvals "
                                "WHERE thread_id = ?", (thread_id,)).fetchall()
            for row in raw:
                check_row("write_approvals", row, _COLUMN_TYPES)
            found = [dict(zip(COLUMNS, r, strict=True)) for r in raw]
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
