"""The append-only attempt log: what each model attempt and each tool call produced.

Kept in the checkpoint database beside the ledger and written as each attempt ends,
so the step log in `graph.history` survives conversation compaction and the pruning
of old checkpoints. Rows are never updated (a trigger refuses it, `graph.store.sql.schema`);
retention deletes a thread's rows with the thread.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from graph.outcome import USAGE_KEYS
from graph.store.rows import (
    LOG_PAYLOAD_KEYS,
    LogTally,
    check_log_payload,
    check_row,
    damaged,
    is_int,
    is_text,
    json_object,
    text_refused,
)
from graph.store.sql.conn import SqlTable
from graph.store.sql.schema import LOG

__all__ = ["SqlAttemptLog"]


@contextmanager
def _sql_damage_refused() -> Iterator[None]:
    """Refuses as `damaged` what the database reports about the stored values themselves.

    SQLite: malformed JSON or an integer overflow in a sum; PostgreSQL: a data exception
    (SQLSTATE class 22: text that is not JSON, a failed cast).
    """
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "JSON" not in str(exc) and "overflow" not in str(exc):
            raise
        raise damaged("attempt_log", f"a payload cannot be read ({exc})") from None
    except Exception as exc:
        if not str(getattr(exc, "sqlstate", None) or "").startswith("22"):
            raise
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise damaged("attempt_log", f"a payload cannot be read ({first})") from None


class SqlAttemptLog(SqlTable):
    """Appends and reads attempt-log rows (see `graph.store.sql.conn.SqlTable`)."""

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """Appends one row (`kind`: `reason` or `tool`), kept back for the next commit.

        Called by a node: on SQLite the row commits with the node's checkpoint
        (`graph.store.sql.conn.Sql.deferred`), so a row is never logged for output a kill lost;
        on PostgreSQL it commits at once.
        """
        self._fence(thread_id)
        with self._db.deferred():
            self._insert(thread_id, attempt, kind, payload,
                         datetime.now(UTC).isoformat(timespec="seconds"))

    def _insert(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any],
                created_at: str) -> None:
        self._run("INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
                  "VALUES (?, ?, ?, ?, ?)",
                  (thread_id, attempt, kind, json.dumps(payload, ensure_ascii=False), created_at))

    def import_rows(self, thread_id: str, rows: list[dict[str, Any]]) -> None:
        """Appends rows as `rows` returned them elsewhere, times kept (`graph.copy`)."""
        self._fence(thread_id)
        for row in rows:
            self._insert(thread_id, row["attempt"], row["kind"], row["payload"],
                         row["created_at"])

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's rows (retention)."""
        self._fence(thread_id)
        self._run("DELETE FROM attempt_log WHERE thread_id = ?", (thread_id,))

    def last_attempt(self, thread_id: str) -> int:
        """The highest attempt number among the thread's `reason` rows; 0 when there are none.

        One aggregate instead of the whole log: this is all a step needs
        (`graph.store.checks.check_ledger`). Only the value returned is type-checked;
        `rows` checks every row (history, verify and copy read them all). Returns 0 for
        a database written before the log existed.

        Raises:
            RefusedError: `damaged` when the highest stored value is not an integer of at
                least 1.
        """
        with text_refused("attempt_log"):
            found = self._rows_if_table(
                LOG, "SELECT max(attempt) FROM attempt_log WHERE thread_id = ? AND kind = 'reason'",
                (thread_id,))
        return self._last(found[0][0] if found else None)

    def tally(self, thread_id: str) -> LogTally:
        """`last_attempt` and `usage` in one aggregate statement; no rows (`covers` reads none)."""
        found = self._aggregate(thread_id, with_last=True)
        return LogTally(self._last(found[0]), self._usage(found[1:]))

    def _aggregate(self, thread_id: str, *, with_last: bool) -> tuple[Any, ...]:
        """One statement over the thread's `reason` rows: max, sums and wrong values.

        Gives max(attempt) (when `with_last`), then for each of `USAGE_KEYS` its sum and
        how many of its values are wrong.

        The statement counts the values that are not non-negative JSON numbers, so an
        edited row (`"total_tokens": "12"`) is refused instead of being summed as 0
        (SQLite) or failing a cast (PostgreSQL); CASE evaluates only the branch it needs,
        so a number is read only where it is one. An empty tuple's values are NULL and 0
        (no rows, or a database written before the log existed).
        """
        columns = ["max(attempt)"] if with_last else []
        for key in USAGE_KEYS:
            where = {"column": "payload", "path": f"usage.{key}", "path_pg": f"usage,{key}"}
            kind, number = self._db.json_kind.format(**where), self._db.json_number.format(**where)
            columns += [f"sum(CASE WHEN {kind} = 'number' THEN {number} END)",
                        f"count(CASE WHEN {kind} = 'number' THEN CASE WHEN {number} < 0 THEN 1 END "
                        f"WHEN {kind} <> 'null' THEN 1 END)"]
        with text_refused("attempt_log"), _sql_damage_refused():
            found = self._rows_if_table(
                LOG, f"SELECT {', '.join(columns)} FROM attempt_log "
                "WHERE thread_id = ? AND kind = 'reason'", (thread_id,))
        return tuple(found[0]) if found else ((None,) if with_last else ()) + (None, 0) * 3

    @staticmethod
    def _last(value: Any) -> int:
        if value is None:
            return 0
        check_row("attempt_log", (value,), {"attempt": lambda v: is_int(v, 1)})
        return int(value)

    @staticmethod
    def _usage(sums: tuple[Any, ...]) -> dict[str, int]:
        """`USAGE_KEYS` with their sums, from `_aggregate`'s (sum, wrong) pairs.

        Raises:
            RefusedError: `damaged` for wrong values or a sum that is not a whole number.
        """
        usage = {}
        for index, key in enumerate(USAGE_KEYS):
            value, wrong = sums[2 * index], sums[2 * index + 1]
            if wrong:
                raise damaged("attempt_log", f"{wrong} recorded token usage value(s) are not "
                              "non-negative numbers")
            if value is not None and (not math.isfinite(value) or value != int(value)):
                raise damaged("attempt_log", "the recorded token usage is not a whole number")
            usage[key] = 0 if value is None else int(value)
        return usage

    def covers(self, thread_id: str, values: dict[str, Any],
               rows: list[dict[str, Any]] | None = None, usage: dict[str, int] | None = None) -> None:
        """Checks nothing more on SQL: `check_ledger` already holds claimed >= logged.

        The Redis log checks its reply rows against the checkpoint
        (`graph.store.redis.tables.RedisAttemptLog.covers`). An SQL database may hold threads
        whose replies predate this log (made before it existed, kept by migration), so
        fewer rows than replies is not damage here.
        """

    def usage(self, thread_id: str) -> dict[str, int]:
        """`USAGE_KEYS` summed over the thread's `reason` rows: one aggregate (`_aggregate`).

        Zeros for a database written before the log existed.

        Raises:
            RefusedError: `damaged` when a row's payload is not JSON, a value is not a
                non-negative number, or a sum is not a whole number.
        """
        return self._usage(self._aggregate(thread_id, with_last=False))

    def used_tokens(self, thread_id: str) -> int:
        """The sum of `usage.total_tokens` over the thread's `reason` rows; 0 when none.

        Read before each attempt (`nodes.budget`): the token cap is checked against this
        durable total, which a fork from an older checkpoint cannot lower. The same
        statement as `usage` (its checks included).

        Raises:
            RefusedError: `damaged`, as `usage`.
        """
        return self.usage(thread_id)["total_tokens"]

    def rows(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's rows, oldest first: `attempt`, `kind`, `payload` (dict), `created_at`.

        Returns an empty list for a database written before the log existed.
        """
        with text_refused("attempt_log"):
            found = self._rows_if_table(
                LOG, "SELECT attempt, kind, payload, created_at FROM attempt_log "
                "WHERE thread_id = ? ORDER BY id", (thread_id,)) or []
        rows = []
        for row in found:
            check_row("attempt_log", row, {"attempt": lambda v: is_int(v, 1),
                                           "kind": lambda v: v in LOG_PAYLOAD_KEYS,
                                           "payload": is_text, "created_at": is_text})
            payload = json_object("attempt_log", row[2])
            check_log_payload(row[1], payload)
            rows.append({"attempt": row[0], "kind": row[1], "payload": payload,
                         "created_at": row[3]})
        return rows
