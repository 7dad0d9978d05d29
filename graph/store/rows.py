"""Exact type checks for rows of this project's own tables (ledger, log, tombstones, approvals).

SQLite stores any value in any column (a ledger count of `'a'` or `1.5` passes its
CHECK constraints), so every row is checked as it is read; a wrong type or shape is
refused as `damaged` (exit 4) instead of crashing or being copied onward.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from graph.errors import ErrorCode, RefusedError


def damaged(table: str, why: str) -> RefusedError:
    """The refusal for a damaged row of `table`."""
    return RefusedError(f"table {table} is damaged: {why}", error_code=ErrorCode.DAMAGED)


def is_int(value: Any, minimum: int = 0) -> bool:
    """True for an `int` (not a bool) of at least `minimum`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def is_text(value: Any) -> bool:
    """True for a `str`."""
    return isinstance(value, str)


def is_iso_time(value: Any) -> bool:
    """True for text that `datetime.fromisoformat` reads with a time zone (how we write times)."""
    from datetime import datetime

    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def is_text_or_none(value: Any) -> bool:
    """True for a `str` or None."""
    return value is None or isinstance(value, str)


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
