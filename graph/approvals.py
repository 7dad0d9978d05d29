"""Human review of write calls: decisions bound to the exact call, applied at most once.

A thread whose tools node paused for review (one LangGraph `interrupt()` per assistant
message) is never invoked again until every paused write call is decided. Each
decision is recorded in `write_approvals` with the call's argument hash; approved
writes are applied here, locally (an approval never makes a model request), then the
interrupt is resumed with `Command(resume=...)` carrying the call ids and hashes, and
the graph stops before the budget node.

At most once in effect: just before each write (in call order, so two writes to one
file chain), the decision row records the file's hash before and the hash it will have
after (the idempotency key is thread, call id and argument hash). A write is a
temporary file, fsync and rename; it is then marked applied. After a crash at any
point, a file already at the planned hash is marked applied without writing again; a
file still at the old hash is written; a file changed by anyone else is refused.

Pitfalls handled (LangGraph 1.2): a `Command(resume=...)` sent while a thread is paused
by `interrupt_after` is consumed by the next `interrupt()`, and invoking with `None`
while waiting re-runs the tools node; so the thread's pending interrupt is checked
before any resume, and a waiting thread is never invoked otherwise.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from graph.errors import RefusedError, UsageError
from graph.rowcheck import check_row, is_text, is_text_or_none, text_refused
from graph.sql import SqlTable
from nodes.write_tools import (
    WriteError,
    atomic_write,
    call_hash,
    file_sha256,
    parse_write,
    planned_content,
    resolve_target,
)

APPROVALS_DDL = """
CREATE TABLE IF NOT EXISTS write_approvals (
    thread_id     TEXT NOT NULL,
    tool_call_id  TEXT NOT NULL,
    tool          TEXT NOT NULL,
    args_sha256   TEXT NOT NULL,
    decision      TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    reason        TEXT,
    decided_at    TEXT NOT NULL,
    target        TEXT,
    before_sha256 TEXT,
    after_sha256  TEXT,
    result        TEXT NOT NULL,
    applied_at    TEXT,
    PRIMARY KEY (thread_id, tool_call_id)
);
"""
_COLUMNS = ("thread_id", "tool_call_id", "tool", "args_sha256", "decision", "reason",
            "decided_at", "target", "before_sha256", "after_sha256", "result", "applied_at")


_COLUMN_TYPES = {c: is_text_or_none if c in ("reason", "target", "before_sha256",
                                              "after_sha256", "applied_at") else is_text
                 for c in _COLUMNS}
_COLUMN_TYPES["decision"] = lambda v: v in ("approve", "reject")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class SqlApprovals(SqlTable):
    """Decision rows on write calls (see `graph.sql.SqlTable`)."""

    def rows(self, thread_id: str) -> dict[str, dict[str, Any]]:
        """The thread's decisions by call id (empty for a database from before approvals)."""
        with text_refused("write_approvals"):
            found = self._rows_if_table(
                "write_approvals", f"SELECT {', '.join(_COLUMNS)} FROM write_approvals "
                "WHERE thread_id = ? ORDER BY decided_at, tool_call_id", (thread_id,)) or []
        for row in found:
            check_row("write_approvals", row, _COLUMN_TYPES)
        return {row[1]: dict(zip(_COLUMNS, row, strict=True)) for row in found}

    def add(self, row: dict[str, Any]) -> None:
        """Records one decision; a second decision for the same call is refused by the key."""
        self._run(f"INSERT INTO write_approvals ({', '.join(_COLUMNS)}) VALUES "
                  f"({', '.join('?' for _ in _COLUMNS)})", tuple(row[c] for c in _COLUMNS))

    def plan(self, thread_id: str, tool_call_id: str, before: str, after: str) -> None:
        """Records, before writing, the file's hash now and the hash it will have after."""
        self._run("UPDATE write_approvals SET before_sha256 = ?, after_sha256 = ? WHERE "
                  "thread_id = ? AND tool_call_id = ? AND before_sha256 IS NULL",
                  (before, after, thread_id, tool_call_id))

    def mark_applied(self, thread_id: str, tool_call_id: str) -> None:
        """Marks an approved write as done."""
        self._run("UPDATE write_approvals SET applied_at = ? WHERE thread_id = ? AND "
                  "tool_call_id = ? AND applied_at IS NULL", (_now(), thread_id, tool_call_id))


def pending_review(snapshot: Any) -> list[dict[str, Any]] | None:
    """The write calls a thread is paused on, or None when it is not waiting for review.

    Returns:
        Each with `tool_call_id`, `name`, `arguments` and `sha256`, in call order.
    """
    for task in snapshot.tasks or ():
        for pending in task.interrupts or ():
            value = pending.value
            if isinstance(value, dict) and value.get("kind") == "approval":
                return list(value["pending"])
    return None


def _current_calls(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    last = values["messages"][-1]
    return {c["id"]: c for c in last.get("tool_calls") or []} if last["role"] == "assistant" else {}


def _check_unchanged(pending: list[dict[str, Any]], values: dict[str, Any], where: str) -> None:
    calls = _current_calls(values)
    for item in pending:
        call = calls.get(item["tool_call_id"])
        if call is None or call_hash(call) != item["sha256"]:
            raise RefusedError(f"{where}: write call {item['tool_call_id']!r} no longer matches "
                               "what was paused for review; nothing is written",
                               error_code="tampered")


def decide(store: Any, thread_id: str, pending: list[dict[str, Any]], values: dict[str, Any],
           approve: list[str], reject: list[str], reason: str | None) -> dict[str, dict[str, Any]]:
    """Checks and records decisions; returns every decision of the paused calls.

    Raises:
        UsageError: An unknown or already decided call id (exit 2).
        RefusedError: `tampered` when a stored call no longer matches its hash (exit 4).
    """
    where = f"{store.location}: thread {thread_id!r}"
    _check_unchanged(pending, values, where)
    by_id = {p["tool_call_id"]: p for p in pending}
    decided = store.approvals.rows(thread_id)
    asked = [(cid, "approve") for cid in approve] + [(cid, "reject") for cid in reject]
    seen: set[str] = set()
    for cid, _ in asked:
        if cid not in by_id:
            raise UsageError(f"{where} is not waiting for a call {cid!r}; pending: "
                             f"{', '.join(by_id) or 'none'}")
        if cid in decided or cid in seen:
            raise UsageError(f"{where}: call {cid!r} is already decided")
        seen.add(cid)
    calls = _current_calls(values)
    root = values["thread"]["allow_writes"]
    for cid, decision in asked:
        call = calls[cid]
        row = {"thread_id": thread_id, "tool_call_id": cid, "tool": by_id[cid]["name"],
               "args_sha256": by_id[cid]["sha256"], "decision": decision, "decided_at": _now(),
               "reason": reason if decision == "reject" else None, "target": None,
               "before_sha256": None, "after_sha256": None, "applied_at": None}
        if decision == "reject":
            row["result"] = (f"REJECTED by the reviewer: {reason or 'no reason given'}. "
                             "Nothing was written.")
        else:
            try:
                name, rel, text = parse_write(call)
                resolve_target(root, rel)
                row.update(target=rel, result=f"Approved by the reviewer and applied: {name} "
                                              f"{rel} ({len(text.encode())} bytes).")
            except WriteError as exc:
                row.update(result=f"TOOL ERROR: approved, but the write cannot be done: {exc}",
                           applied_at=_now())
        store.approvals.add(row)
    return store.approvals.rows(thread_id)


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def apply_approved(store: Any, thread_id: str, values: dict[str, Any],
                   decisions: dict[str, dict[str, Any]]) -> None:
    """Applies every approved, not yet applied write, at most once in effect.

    Raises:
        RefusedError: `tampered` (the call changed since approval) or `conflict` (the
            file changed since approval); nothing is written.
    """
    where = f"{store.location}: thread {thread_id!r}"
    calls = _current_calls(values)
    root = values["thread"]["allow_writes"]
    todo = [(cid, row) for cid, row in decisions.items()
            if row["decision"] == "approve" and row["applied_at"] is None]
    for cid, row in todo:  # every call checked before anything is written
        call = calls.get(cid)
        if call is None or call_hash(call) != row["args_sha256"]:
            raise RefusedError(f"{where}: write call {cid!r} changed after it was approved; "
                               "nothing is written", error_code="tampered")
    order = list(calls)
    for cid, row in sorted(todo, key=lambda item: order.index(item[0])):  # call order
        name, rel, text = parse_write(calls[cid])
        target = resolve_target(root, rel)
        if row["before_sha256"] is None:  # plan first, so a crash can tell done from not
            row["before_sha256"] = file_sha256(target)
            row["after_sha256"] = _sha(planned_content(target, name, text))
            store.approvals.plan(thread_id, cid, row["before_sha256"], row["after_sha256"])
        current = file_sha256(target)
        if current == row["before_sha256"]:
            atomic_write(target, planned_content(target, name, text))
        elif current != row["after_sha256"]:
            raise RefusedError(f"{where}: {rel} changed since the write was approved; nothing "
                               "is written", error_code="conflict")
        store.approvals.mark_applied(thread_id, cid)
