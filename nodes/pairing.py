"""Tool-call pairing rules for a conversation (INVARIANTS I6).

Pairing is positional, as in the chat-completions format: every `tool` message
answers a call of the latest assistant message with calls, once; every call has its
result before the next assistant message. An id is unique within one assistant
message; a later message may use it again (servers that number `call_0`, `call_1`
afresh in every reply), and its results then answer that later message only. Ids are
never renamed.
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

    Raises:
        UnsafeHistoryError: The pairing is broken anywhere (a result that answers no
            open call of the latest assistant message, an id twice in one message, a
            message after unanswered calls).
    """
    pending: list[str] = []
    for index, msg in enumerate(messages):
        role = msg.get("role")
        if role == "assistant":
            if pending:
                raise UnsafeHistoryError(
                    f"message {index} follows unanswered tool call(s) {pending}")
            for call in msg.get("tool_calls") or []:
                if call["id"] in pending:
                    raise UnsafeHistoryError(
                        f"message {index} uses tool call id {call['id']!r} twice")
                pending.append(call["id"])
        elif role == "tool":
            if msg.get("tool_call_id") not in pending:
                raise UnsafeHistoryError(
                    f"message {index} answers tool call {msg.get('tool_call_id')!r}, "
                    "which no earlier assistant message left open")
            pending.remove(msg["tool_call_id"])
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
