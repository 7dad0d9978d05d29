"""The one tool-call pairing rule of a conversation (INVARIANTS I6), by role and order.

After an assistant message with tool calls, only the tool results of those calls may
follow, each once, until all are answered; then anything may follow. So a `tool`
message answers an unanswered call of the assistant message before it, and a `user` or
`assistant` message after open calls breaks the conversation (langgraph#5109: a user
message added while a call is unanswered makes the next request malformed). An id is
unique within one assistant message; a later message may use it again (servers that
number `call_0`, `call_1` afresh in every reply), and its results then answer that later
message only. Ids are never renamed.

`open_calls` is the rule; every writer of the conversation uses it: the request builder
(`check_request`), the budget node's repairs (`not_executed_results`), the tools node
(`nodes.review.open_calls_of_last`), and on the graph side loading, `update_state`,
Studio edits, copy and verify (`graph.checkpoints.integrity.check_messages`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NOT_EXECUTED = ("TOOL NOT EXECUTED: the process stopped before this call ran; call the tool "
                "again if you still need it.")
"""Content recorded for a call left unanswered by a crash, instead of a request that fails."""


class UnsafeHistoryError(Exception):
    """A conversation that must never be sent: broken pairing or a forbidden role."""


def open_calls(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids of the latest assistant message's calls that have no result yet, in call order.

    The conversation's only pairing rule (see module doc). A conversation may end with
    open calls (the tools node answers them next); anything else after them is broken.

    Args:
        messages: The conversation, wire dicts in order (no system message expected).

    Returns:
        The unanswered ids; empty when every call has its result.

    Raises:
        UnsafeHistoryError: Naming the first message that breaks the rule: a tool result
            with no open call before it (first message, duplicate, unknown id), another
            role after unanswered calls, or one id twice in one assistant message.
    """
    pending: list[str] = []
    for index, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in pending:
                answered = ("no assistant message before it left a call open" if not pending
                            else f"the open call(s) are {pending}")
                raise UnsafeHistoryError(f"message {index} answers tool call {call_id!r}, "
                                         f"which is not an open call ({answered})")
            pending.remove(call_id)
            continue
        if pending:
            raise UnsafeHistoryError(
                f"message {index} ({role}) follows unanswered tool call(s) {pending}; only "
                "their results may come after an assistant message's calls")
        if role == "assistant":
            for call in msg.get("tool_calls") or []:
                if call["id"] in pending:
                    raise UnsafeHistoryError(
                        f"message {index} uses tool call id {call['id']!r} twice")
                pending.append(call["id"])
    return pending


def check_request(messages: Sequence[Mapping[str, Any]]) -> None:
    """Checks an outgoing request's history: pairing intact and every call answered.

    Raises:
        UnsafeHistoryError: Otherwise; nothing must be sent.
    """
    unanswered = open_calls(messages)
    if unanswered:
        raise UnsafeHistoryError(f"tool call(s) {unanswered} have no result")


def not_executed_results(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`tool` messages saying "not executed" for every unanswered call of the last message."""
    return [{"role": "tool", "tool_call_id": call_id, "content": NOT_EXECUTED}
            for call_id in open_calls(messages)]
