"""Which write calls a person reviews, and the review pause itself (`interrupt`).

The tools node never writes: a write call that could never be applied (bad or
ambiguous arguments, a path outside the writable folder) is a tool error at once;
the others pause the thread, and their results come from the reviewer's decisions
(see `graph.step.approvals`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.types import interrupt

from nodes.pairing import open_calls
from nodes.prompts import TOOL_ERROR_PREFIX
from nodes.write_tools import (
    WRITE_TOOLS,
    WriteError,
    call_hash,
    canonical_arguments,
    check_path,
    parse_write,
)


class ApprovalMismatch(Exception):
    """A resume value whose decisions do not match the calls paused for review."""


def open_calls_of_last(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The calls of the latest assistant message still without a result, in call order.

    Read with the one pairing rule (`nodes.pairing.open_calls`): a tool result answers
    the assistant message right before it, so a call id an earlier turn also used
    (servers that number `call_0` afresh in every reply) is a new call here.

    Raises:
        UnsafeHistoryError: The conversation breaks the pairing rule.
    """
    pending = open_calls(messages)
    if not pending:
        return []
    last = next(m for m in reversed(messages) if m.get("role") == "assistant")
    return [call for call in last.get("tool_calls") or [] if call["id"] in pending]


def split_writes(root: str | None, calls: list[dict[str, Any]]
                 ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(write calls to review, tool-error texts by call id of writes never applicable).

    Decided from the calls alone (arguments and path syntax, never the file system),
    so a re-run of the node on resume pauses for exactly the same calls; whether the
    folder still allows the write is checked when a decision is made and applied.
    """
    writes: list[dict[str, Any]] = []
    refused: dict[str, str] = {}
    if not root:
        return writes, refused
    for call in calls:
        if (call.get("function") or {}).get("name") not in WRITE_TOOLS:
            continue
        try:
            check_path(parse_write(call)[1])
            writes.append(call)
        except WriteError as exc:
            refused[call["id"]] = f"{TOOL_ERROR_PREFIX}{exc}"
    return writes, refused


def needs_review(state: Mapping[str, Any]) -> bool:
    """True when the tools node would pause this state for a person's review."""
    calls = open_calls_of_last(state["messages"])
    return bool(split_writes(state["thread"].get("allow_writes"), calls)[0])


def pending_items(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a review shows of each write call: id, tool, canonical arguments and hash."""
    return [{"tool_call_id": c["id"], "name": c["function"]["name"],
             "arguments": canonical_arguments(c["function"]["arguments"]),
             "sha256": call_hash(c)} for c in calls]


def review(calls: list[dict[str, Any]]) -> dict[str, str]:
    """Pauses for review of the write calls; returns each call's tool result text.

    One LangGraph `interrupt()` per assistant message, listing every write call with
    its id, tool, canonical arguments (exactly what the hash covers and what an
    approval applies) and argument hash. The resume value must decide exactly those
    calls with exactly those hashes (see `graph.step.approvals`).

    Raises:
        ApprovalMismatch: The decisions name other calls or other hashes.
    """
    pending = pending_items(calls)
    answer = interrupt({"kind": "approval", "pending": pending})
    decisions = {d["tool_call_id"]: d for d in (answer or {}).get("decisions", [])}
    if set(decisions) != {p["tool_call_id"] for p in pending} or any(
            decisions[p["tool_call_id"]]["sha256"] != p["sha256"] for p in pending):
        raise ApprovalMismatch("the decisions do not match the calls paused for review")
    return {call_id: str(d["result"]) for call_id, d in decisions.items()}
