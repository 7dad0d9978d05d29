"""Builds a thread's next chat-completions request, once per step.

The budget node prepares the request to decide whether the conversation fits the
context limit; the reason node sends it. The preparation (compaction included) runs
once: the budget node leaves it in the step's `PreparedRequests` (runtime context,
never stored), and the reason node takes it from there when its state is the one the
request was prepared from. A reason node re-run on its own (resumed after a crash,
without the budget node) prepares the request itself, with the same result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.compaction import compact, estimate_tokens, fits
from nodes.pairing import UnsafeHistoryError, check_request
from nodes.prompts import CONTINUE_PROMPT, SYSTEM_PROMPT
from nodes.state import DEFAULT_CONTEXT_TOKENS, Message, ThreadInfo
from nodes.tool_specs import tool_specs

_ALLOWED_ROLES = ("user", "assistant", "tool")


@dataclass(frozen=True)
class PreparedRequest:
    """One request, ready to send.

    Attributes:
        compacted: The stored conversation compacted to the thread's context limit (what
            the reason node stores with the reply when it differs from the stored one).
        messages: The request's messages: the system prompt, then `compacted` as wire dicts.
        tools: The tool specs offered.
        limit_tokens: The thread's context limit (estimated tokens).
        overhead_tokens: Estimated tokens of the system prompt and the tool specs.
    """

    compacted: list[Message]
    messages: list[Message]
    tools: list[dict[str, Any]]
    limit_tokens: int
    overhead_tokens: int

    def fits(self) -> bool:
        """True when the compacted conversation fits the context limit (nothing more can go)."""
        return fits(self.compacted, self.limit_tokens, self.overhead_tokens)


def prepare_request(thread: ThreadInfo, stored: Sequence[Message]) -> PreparedRequest:
    """Compacts `stored` to the thread's context limit and builds the request from it.

    A conversation that ends with an assistant message without tool calls (a reply cut
    off by the token limit, `nodes.reason`) is followed by `CONTINUE_PROMPT` as a user
    message (`continuation`); it is part of `compacted`, so the reason node stores it with
    the reply that answers it.

    Args:
        thread: The thread's fixed settings (context limit, workspace, writable folder).
        stored: The conversation as stored (task first), with every call answered.

    Raises:
        UnsafeHistoryError: The history breaks the pairing rules or holds a forbidden
            role; nothing may be sent.
    """
    tools = tool_specs(bool(thread.get("workspace")), bool(thread.get("allow_writes")))
    overhead = estimate_tokens([{"role": "system", "content": SYSTEM_PROMPT}]) + estimate_tokens(tools)
    limit = int(thread.get("context_tokens") or DEFAULT_CONTEXT_TOKENS)
    compacted = compact([*stored, *continuation(stored)], limit, overhead)
    messages = request_messages(compacted)
    check_request(messages[1:])
    return PreparedRequest(compacted, messages, tools, limit, overhead)


def continuation(stored: Sequence[Mapping[str, Any]]) -> list[Message]:
    """`[CONTINUE_PROMPT as a user message]` after a cut-off reply (see `prepare_request`), else `[]`."""
    last = stored[-1] if stored else None
    if last is not None and last.get("role") == "assistant" and not last.get("tool_calls"):
        return [{"role": "user", "content": CONTINUE_PROMPT}]
    return []


def request_messages(stored: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Builds the `messages` of a request: the code's system prompt, then stored messages.

    Only the wire keys of each role are copied (`role`, `content`, `tool_calls`,
    `tool_call_id`), so nothing stored can add a key or change a role.

    Raises:
        UnsafeHistoryError: A stored message has a role other than user, assistant
            or tool (INVARIANTS I5: stored text never becomes a system message).
    """
    out: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for index, msg in enumerate(stored):
        role = msg.get("role")
        if role not in _ALLOWED_ROLES:
            raise UnsafeHistoryError(f"stored message {index} has role {role!r}; refusing to send")
        wire: Message = {"role": role, "content": msg.get("content")}
        if role == "assistant" and msg.get("tool_calls"):
            wire["tool_calls"] = msg["tool_calls"]
        if role == "tool":
            wire["tool_call_id"] = msg["tool_call_id"]
        out.append(wire)
    return out


class PreparedRequests:
    """The request the budget node prepared in this step, kept for the reason node.

    Lives in the runtime context (`StepContext.prepared`), never in state, so checkpoints
    are unchanged. It holds at most one request, with the thread settings and the
    conversation it was prepared from.
    """

    def __init__(self) -> None:
        self._source: tuple[ThreadInfo, list[Message]] | None = None
        self._request: PreparedRequest | None = None

    def prepare(self, thread: ThreadInfo, stored: Sequence[Message]) -> PreparedRequest:
        """The request for `stored`, prepared at most once per conversation.

        The one kept is returned if it was prepared from the same thread settings and
        an equal conversation; otherwise a new one is prepared and kept.

        Raises:
            UnsafeHistoryError: As `prepare_request`; nothing is kept then.
        """
        source = (thread, list(stored))
        if self._request is not None and self._source == source:
            return self._request
        request = prepare_request(thread, stored)
        self._source, self._request = source, request
        return request
