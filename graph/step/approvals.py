"""Human review of write calls: decisions bound to the exact call, applied at most once.

A thread whose tools node paused for review (one LangGraph `interrupt()` per assistant
message) is never invoked again until every paused write call is decided. Each
decision is recorded in `write_approvals` with the call's argument hash; approved
writes are applied here, locally (an approval never makes a model request), then the
interrupt is resumed with `Command(resume=...)` carrying the call ids and hashes, and
the graph stops before the budget node.

Decisions belong to one turn: the paused message is the reply of the thread's
current attempt, and rows are keyed by thread, attempt and call id (see
`graph.store.sql.approvals`), so a call id reused by a later reply never finds them.

At most once in effect: just before each write (in call order, so two writes to one
file chain), the decision row records the file's hash before and the hash it will have
after (the idempotency key is thread, attempt, call id and argument hash). A write is
a temporary file, fsync and rename; it is then marked applied. After a crash at any
point, a file already at the planned hash is marked applied without writing again; a
file still at the old hash is written; a file changed by anyone else is refused.

An approved write that can no longer be applied (its folder was removed, its path now
goes through a symlink or names a folder, the file system refuses it) is not an
error of the run: its row records why, nothing is written for it, and the model is
told in its tool result, so the thread continues.

Pitfalls handled (LangGraph 1.2): a `Command(resume=...)` sent while a thread is paused
by `interrupt_after` is consumed by the next `interrupt()`, and invoking with `None`
while waiting re-runs the tools node; so the thread's pending interrupt is checked
before any resume, and a waiting thread is never invoked otherwise.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from graph.errors import ErrorCode, RefusedError, UsageError
from graph.store.rows import now
from nodes.files import file_sha256, sha256_hex
from nodes.write_results import WriteOutcome, WriteResult, write_outcome
from nodes.write_tools import (
    WriteError,
    atomic_write,
    call_hash,
    parse_write,
    planned_content,
    resolve_target,
)

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = ["apply_approved", "decide"]


def _turn(values: dict[str, Any]) -> int:
    """The attempt whose reply is the paused message (tools runs right after reason)."""
    return int(values["progress"]["attempts"])


def _current_calls(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    last = values["messages"][-1]
    return {c["id"]: c for c in last.get("tool_calls") or []} if last["role"] == "assistant" else {}


def _check_unchanged(pending: list[dict[str, Any]], values: dict[str, Any], location: str,
                     thread_id: str) -> None:
    calls = _current_calls(values)
    for item in pending:
        call = calls.get(item["tool_call_id"])
        if call is None or call_hash(call) != item["sha256"]:
            raise RefusedError(f"write call {item['tool_call_id']!r} no longer matches "
                               "what was paused for review; nothing is written",
                               error_code=ErrorCode.TAMPERED, location=location, thread_id=thread_id)


def decide(store: Store, thread_id: str, pending: list[dict[str, Any]], values: dict[str, Any],
           approve: list[str], reject: list[str], reason: str | None) -> dict[str, dict[str, Any]]:
    """Checks and records decisions; returns every decision of the paused turn, by call id.

    Raises:
        UsageError: An unknown or already decided call id (exit 2).
        RefusedError: `tampered` when a stored call no longer matches its hash (exit 4).
    """
    _check_unchanged(pending, values, store.location, thread_id)
    by_id = {p["tool_call_id"]: p for p in pending}
    turn = _turn(values)
    decided = store.approvals.turn(thread_id, turn)
    asked = [(cid, "approve") for cid in approve] + [(cid, "reject") for cid in reject]
    seen: set[str] = set()
    for cid, _ in asked:
        if cid not in by_id:
            raise UsageError(f"the thread is not waiting for a call {cid!r}; pending: "
                             f"{', '.join(by_id) or 'none'}", location=store.location,
                             thread_id=thread_id)
        if cid in decided or cid in seen:
            raise UsageError(f"call {cid!r} is already decided", location=store.location,
                             thread_id=thread_id)
        seen.add(cid)
    calls = _current_calls(values)
    root = values["thread"]["allow_writes"]
    for cid, decision in asked:
        row = {"thread_id": thread_id, "attempt": turn, "tool_call_id": cid,
               "tool": by_id[cid]["name"], "arguments": by_id[cid]["arguments"],
               "args_sha256": by_id[cid]["sha256"], "decision": decision, "decided_at": now(),
               "reason": reason if decision == "reject" else None}
        if decision == "reject":
            result = WriteResult.rejected(reason)
            with contextlib.suppress(WriteError):  # its path, for the record (never written)
                row["target"] = parse_write(calls[cid])[1]
        else:
            try:
                name, rel, text = parse_write(calls[cid])
                row["target"] = rel  # its path, also when it can no longer be applied
                resolve_target(root, rel)
                result = WriteResult.approved(name, rel, len(text.encode()))
            except WriteError as exc:
                result = WriteResult.not_applied(exc)
        store.approvals.add({**row, "result": result.text, "error": result.error})
    return store.approvals.turn(thread_id, turn)


def _apply_one(store: Store, thread_id: str, turn: int, cid: str, row: dict[str, Any],
               call: dict[str, Any], root: str, where: str) -> None:
    """Applies one approved write at most once in effect (see module doc).

    Raises:
        WriteError, OSError: It cannot be applied any more (the caller records why).
        RefusedError: `conflict`: the file changed since the write was planned.
    """
    name, rel, text = parse_write(call)
    target = resolve_target(root, rel)
    if row["before_sha256"] is None:  # plan first, so a crash can tell done from not
        row["before_sha256"] = file_sha256(target)
        row["after_sha256"] = sha256_hex(planned_content(target, name, text))
        store.approvals.plan(thread_id, turn, cid, row["before_sha256"], row["after_sha256"])
        # The plan guards the file write: it must survive a lost -wal (see graph.store.sqlite.ledger).
        store.ledger.make_durable(f"{where}: the plan of write {cid!r} is recorded, but")
    current = file_sha256(target)
    if current == row["before_sha256"]:
        atomic_write(target, planned_content(target, name, text))
    elif current != row["after_sha256"]:
        raise RefusedError(f"{rel} changed since the write was approved; nothing is written",
                           error_code=ErrorCode.CONFLICT, location=store.location, thread_id=thread_id)
    store.approvals.mark_applied(thread_id, turn, cid)


def apply_approved(store: Store, thread_id: str, values: dict[str, Any],
                   decisions: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Applies every approved, not yet applied write of the paused turn, at most once in effect.

    A write that can no longer be applied is recorded as not applied, with the reason,
    and its tool result tells the model; the others still apply.

    Returns:
        The turn's decisions by call id, as stored afterwards.

    Raises:
        RefusedError: `tampered` (the call changed since approval) or `conflict` (the
            file changed since approval); nothing more is written.
    """
    where = f"{store.location}: thread {thread_id!r}"
    calls = _current_calls(values)
    root = values["thread"]["allow_writes"]
    turn = _turn(values)
    todo = [(cid, row) for cid, row in decisions.items()
            if write_outcome(row) is WriteOutcome.PENDING]
    for cid, row in todo:  # every call checked before anything is written
        call = calls.get(cid)
        if call is None or call_hash(call) != row["args_sha256"]:
            raise RefusedError(f"write call {cid!r} changed after it was approved; nothing is "
                               "written", error_code=ErrorCode.TAMPERED, location=store.location,
                               thread_id=thread_id)
    order = list(calls)
    for cid, row in sorted(todo, key=lambda item: order.index(item[0])):  # call order
        try:
            _apply_one(store, thread_id, turn, cid, row, calls[cid], root, where)
        except (WriteError, OSError) as exc:
            reason = str(exc) if isinstance(exc, WriteError) else (
                f"{exc.strerror or type(exc).__name__} ({row.get('target')})")
            failed = WriteResult.not_applied(reason)
            store.approvals.mark_failed(thread_id, turn, cid, reason, failed.text)
    return store.approvals.turn(thread_id, turn)
