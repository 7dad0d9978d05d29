"""Decisions on write calls in Redis (`graph.store.base.Approvals`).

The rows of `graph.store.sql.approvals` (same columns, same key: the thread, the attempt
whose reply asked for the call, and the call id), as one hash per thread
(`graph.store.redis.keys.APPROVALS`) whose field `attempt:tool_call_id` holds the row as JSON.
A second decision for the same call is refused (`HSETNX`); the updates that follow a
decision (the planned hashes, applied, failed) change a row only in the state the SQL
`UPDATE ... WHERE` would, written by compare-and-set (read again when it changed). Every
write is a script fenced by the thread's writer lease (`graph.store.redis.lua`): a writer
that lost it changes nothing (`BusyError`, exit 5). Each row
is checked as it is read (`graph.store.rows`): another shape is `damaged` (exit 4). Each
write is on disk before it returns (`RedisTable._durable`): a decision and the planned
hashes must outlive a crash after the file is written (approvals applied once).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from graph.errors import ErrorCode, RefusedError
from graph.store.redis import keys
from graph.store.redis.tables import RedisTable
from graph.store.rows import APPROVAL_COLUMNS as COLUMNS
from graph.store.rows import APPROVAL_TYPES, check_row, damaged, now

__all__ = ["RedisApprovals"]


def _field(attempt: int, tool_call_id: str) -> bytes:
    return f"{attempt}:{tool_call_id}".encode("utf-8", "surrogateescape")


def _encoded(row: dict[str, Any]) -> bytes:
    stored = {c: row.get(c) for c in COLUMNS}
    return json.dumps({**stored, "digest": _digest(stored)}).encode()  # ASCII: any text


def _digest(columns: dict[str, Any]) -> str:
    """SHA-256 of a decision's columns (sorted-key JSON): any one edited is refused on read.

    Every write of a row (the decision, its planned hashes, applied or failed) goes
    through `_encoded`, which stores it; a SQL row is guarded by its table's constraints.
    """
    return hashlib.sha256(json.dumps(columns, sort_keys=True).encode()).hexdigest()


def _row(thread_id: str, field: bytes, raw: bytes) -> dict[str, Any]:
    """One stored decision, checked: its columns with their types, and its own key."""
    try:
        row = json.loads(raw.decode())
    except ValueError:  # UnicodeDecodeError included
        raise damaged("write_approvals", "a decision is not JSON") from None
    if isinstance(row, dict) and "digest" in row:  # rows from before digests have none
        if row.pop("digest") != _digest({c: row.get(c) for c in COLUMNS}):
            raise damaged("write_approvals", "a decision does not match its digest: edited")
    if not isinstance(row, dict) or set(row) != set(COLUMNS):
        raise damaged("write_approvals", "a decision has other fields")
    check_row("write_approvals", tuple(row[c] for c in COLUMNS), APPROVAL_TYPES)
    if row["decision"] not in ("approve", "reject"):  # the SQL table's CHECK
        raise damaged("write_approvals", "a decision is neither approve nor reject")
    if row["thread_id"] != thread_id or _field(row["attempt"], row["tool_call_id"]) != field:
        raise damaged("write_approvals", "a decision is stored under another call's key")
    return row


class RedisApprovals(RedisTable):
    """Decision rows on write calls (module doc)."""

    def rows(self, thread_id: str) -> dict[tuple[int, str], dict[str, Any]]:
        """Every decision of a thread by (attempt, call id), in decision order.

        Raises:
            RefusedError: `damaged` for a key or a row that fails its checks.
        """
        raw: dict[bytes, bytes] = self._call("write_approvals", "hgetall",
                                             keys.approvals_key(thread_id))
        found = [_row(thread_id, field, value) for field, value in raw.items()]
        found.sort(key=lambda r: (r["decided_at"], r["attempt"], r["tool_call_id"]))
        return {(r["attempt"], r["tool_call_id"]): r for r in found}

    def turn(self, thread_id: str, attempt: int) -> dict[str, dict[str, Any]]:
        """The decisions on the calls of one turn (the reply of `attempt`), by call id."""
        return {cid: row for (turn, cid), row in self.rows(thread_id).items() if turn == attempt}

    def add(self, row: dict[str, Any]) -> None:
        """Records one decision.

        Raises:
            RefusedError: `exists` when the call has a decision already (nothing written).
        """
        thread_id = row["thread_id"]
        status = self._fenced("ADD_DECISION", thread_id,
                              [keys.approvals_key(thread_id), keys.lock_key(thread_id)],
                              [_field(row["attempt"], row["tool_call_id"]), _encoded(row)])[0]
        if status == "exists":
            raise RefusedError(f"call {row['tool_call_id']!r} of attempt {row['attempt']} has a "
                               "decision already", thread_id=row["thread_id"],
                               error_code=ErrorCode.EXISTS, location=self.location)
        self._durable(f"the decision on call {row['tool_call_id']!r} is stored, but")

    def _update(self, thread_id: str, attempt: int, tool_call_id: str,
                change: Callable[[dict[str, Any]], bool]) -> None:
        """Applies `change` to the row when it returns True, by compare-and-set (`SET_DECISION`).

        Raises:
            BusyError: The thread's lease is another's, or this process lost it (exit 5).
        """
        key, field = keys.approvals_key(thread_id), _field(attempt, tool_call_id)
        while True:
            raw = self._call("write_approvals", "hget", key, field)
            if raw is None:
                break
            row = _row(thread_id, field, raw)
            if not change(row):
                break
            status = self._fenced("SET_DECISION", thread_id, [key, keys.lock_key(thread_id)],
                                  [field, raw, _encoded(row)])[0]
            if status != "changed":
                break
        self._durable(f"the decision on call {tool_call_id!r} is updated, but")

    def plan(self, thread_id: str, attempt: int, tool_call_id: str, before: str | None,
             after: str) -> None:
        """Records, before writing, the file's hash now and the hash it will have after."""
        def change(row: dict[str, Any]) -> bool:
            if row["before_sha256"] is not None:
                return False
            row.update(before_sha256=before, after_sha256=after)
            return True

        self._update(thread_id, attempt, tool_call_id, change)

    def mark_applied(self, thread_id: str, attempt: int, tool_call_id: str) -> None:
        """Marks an approved write as done."""
        def change(row: dict[str, Any]) -> bool:
            if row["applied_at"] is not None or row["error"] is not None:
                return False
            row["applied_at"] = now()
            return True

        self._update(thread_id, attempt, tool_call_id, change)

    def mark_failed(self, thread_id: str, attempt: int, tool_call_id: str, error: str,
                    result: str) -> None:
        """Records that an approved write could not be applied, why, and what the model is told."""
        def change(row: dict[str, Any]) -> bool:
            if row["applied_at"] is not None or row["error"] is not None:
                return False
            row.update(error=error, result=result)
            return True

        self._update(thread_id, attempt, tool_call_id, change)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's decisions (retention)."""
        self._fenced("DELETE", thread_id,
                     [keys.lock_key(thread_id), keys.approvals_key(thread_id)], [])
