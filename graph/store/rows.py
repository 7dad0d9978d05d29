"""The rows of this project's own tables, whatever the backend: their types and exact checks.

Tables: the attempt ledger, the attempt log, tombstones, decisions on write calls. The
row types (`LedgerRow`, `Tombstone`) and what a stored value must be (`LOG_PAYLOAD_KEYS`,
`APPROVAL_TYPES`, ...) are here, so the SQL tables (`graph.store.sql`) and the Redis
ones (`graph.store.redis`) check the same things.

SQLite stores any value in any column (a ledger count of `'a'` or `1.5` passes its
CHECK constraints), and Redis keeps only bytes, so every row is checked as it is read;
a wrong type or shape is refused as `damaged` (exit 4) instead of crashing or being
copied onward.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from graph.errors import ErrorCode, RefusedError
from graph.outcome import USAGE_KEYS
from nodes.context import LedgerEntry
from nodes.state import FINAL_STATUSES

__all__ = ["APPROVAL_COLUMNS", "APPROVAL_TYPES", "FINAL_STATUSES", "LOG_PAYLOAD_KEYS",
           "LedgerRow", "LogTally", "Tombstone", "add_logged_usage", "check_log_payload", "check_row",
           "damaged", "is_int",
           "is_iso_time", "is_text", "is_text_or_none", "json_object", "now", "text_refused"]


@dataclass(frozen=True)
class LedgerRow:
    """A whole ledger row, as `graph.copy` moves it (times: UTC, ISO 8601)."""

    thread_id: str
    attempts: int
    claimed: int
    max_attempts: int
    created_at: str
    updated_at: str

    @property
    def entry(self) -> LedgerEntry:
        """The counts the nodes use."""
        return LedgerEntry(self.attempts, self.claimed, self.max_attempts)


@dataclass(frozen=True)
class LogTally:
    """What one read of a thread's attempt log gives a step (`AttemptLog.tally`).

    Attributes:
        last_attempt: The highest attempt of the thread's `reason` rows; 0 when none.
        usage: `prompt_tokens`, `completion_tokens` and `total_tokens` summed over those
            rows (tokens; `graph.outcome.Figures`).
        rows: The checked rows the tally was made from where the backend reads them all
            (Redis: `covers` judges them), else None (SQL: one aggregate).
    """

    last_attempt: int
    usage: dict[str, int]
    rows: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Tombstone:
    """A pruned thread: its id, its status when pruned (`FINAL_STATUSES`), when (UTC, ISO 8601)."""

    thread_id: str
    final_status: str
    pruned_at: str


def now() -> str:
    """UTC now, ISO 8601, to the second (a decision's `decided_at` and `applied_at`)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def damaged(table: str, why: str) -> RefusedError:
    """The refusal for a damaged row of `table`."""
    return RefusedError(f"table {table} is damaged: {why}", error_code=ErrorCode.DAMAGED)


def add_logged_usage(total: dict[str, int], kind: str, payload: dict[str, Any]) -> None:
    """Adds what one attempt-log row counts toward its thread's tokens to `total`, in place.

    The one rule by which the log's usage is summed: a `reason` row's `usage`, each of
    `USAGE_KEYS` (an absent one is 0); other rows count nothing. Used for the Redis log's
    sums (`graph.store.redis.tables`) and a step's figures (`graph.step.invocation`); the
    SQL log sums the same in one statement (`graph.store.sql.attempt_log`).

    Raises:
        RefusedError: `damaged` for a value that is not a non-negative whole number.
    """
    usage = (payload.get("usage") if kind == "reason" else None) or {}
    for key in USAGE_KEYS:
        tokens = usage.get(key)
        if tokens is None:
            continue
        if not is_int(tokens):
            raise damaged("attempt_log", "the recorded token usage is not a whole number")
        total[key] += tokens


def is_int(value: Any, minimum: int = 0) -> bool:
    """True for an `int` (not a bool) of at least `minimum`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def is_text(value: Any) -> bool:
    """True for a `str`."""
    return isinstance(value, str)


def is_iso_time(value: Any) -> bool:
    """True for text that `datetime.fromisoformat` reads with a time zone (how we write times)."""
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def is_text_or_none(value: Any) -> bool:
    """True for a `str` or None."""
    return value is None or isinstance(value, str)


LOG_PAYLOAD_KEYS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "reason": {"outcome": is_text, "thought": is_text_or_none,
               "tool_calls": lambda v: isinstance(v, list) and all(
                   isinstance(c, dict) and is_text(c.get("id")) for c in v),
               "usage": lambda v: v is None or isinstance(v, dict),
               "error_code": is_text_or_none, "message": is_text_or_none,
               "finish_reason": is_text_or_none},
    "tool": {"tool_call_id": is_text, "observation": is_text},
}
"""The kinds of attempt-log row, the payload keys their readers use, and their types."""
_LOG_REQUIRED = frozenset({"outcome", "tool_call_id", "observation"})


def check_log_payload(kind: str, payload: dict[str, Any]) -> None:
    """Checks an attempt-log payload of `kind` (a key of `LOG_PAYLOAD_KEYS`).

    Raises:
        RefusedError: `damaged` for a key its readers need that is missing, or a key
            of the wrong type.
    """
    for key, ok in LOG_PAYLOAD_KEYS[kind].items():
        if key in payload and not ok(payload[key]) or key not in payload and key in _LOG_REQUIRED:
            raise damaged("attempt_log", f"a {kind} payload's {key!r} is missing or "
                          "has the wrong type")


APPROVAL_COLUMNS = ("thread_id", "attempt", "tool_call_id", "tool", "arguments", "args_sha256",
                    "decision", "reason", "decided_at", "target", "before_sha256",
                    "after_sha256", "result", "error", "applied_at")
"""Columns of a decision row, in table order. `arguments` is the canonical text approved
(None on rows from before it was kept); `error` says why an approved write was not
applied (`applied_at` is then None)."""
_APPROVAL_OPTIONAL = ("arguments", "reason", "target", "before_sha256", "after_sha256", "error",
                      "applied_at")
APPROVAL_TYPES: dict[str, Callable[[Any], bool]] = {
    c: is_text_or_none if c in _APPROVAL_OPTIONAL else is_text for c in APPROVAL_COLUMNS}
APPROVAL_TYPES["attempt"] = is_int
APPROVAL_TYPES["decision"] = lambda v: v in ("approve", "reject")
"""What each column of a decision row holds, by column (`check_row`)."""


def check_row(table: str, row: Any, columns: dict[str, Callable[[Any], bool]]) -> None:
    """Checks each column of `row` (in the order of `columns`) with its predicate.

    Raises:
        RefusedError: `damaged`, naming the table, column and stored type.
    """
    for (name, ok), value in zip(columns.items(), row, strict=True):
        if not ok(value):
            raise damaged(table, f"column {name} holds {type(value).__name__} {value!r:.40}")


def json_object(table: str, text: Any) -> dict[str, Any]:
    """Parses a JSON object stored as text; duplicate keys and other values are refused.

    Raises:
        RefusedError: `damaged`.
    """
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate key")
        return dict(pairs)

    if not isinstance(text, str):
        raise damaged(table, f"a JSON column holds {type(text).__name__}")
    try:
        value = json.loads(text, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise damaged(table, f"a JSON column is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise damaged(table, f"a JSON column holds {type(value).__name__}, not an object")
    return value


@contextmanager
def text_refused(table: str) -> Iterator[None]:
    """Refuses SQLite text that is not valid UTF-8 (sqlite3 cannot even return it)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc):
            raise
        raise damaged(table, f"a text column is not valid UTF-8 ({exc})") from None
