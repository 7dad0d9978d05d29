"""The **reason** node: exactly one chat-completions request per counted attempt.

Before sending, the node claims the attempt number that the budget node counted. A
claim succeeds once per attempt, so when LangGraph re-runs this node after an
exception or a kill (it resumes at the failed node, skipping the budget node), the
re-run finds its attempt already claimed, sends nothing and routes back to the
budget node (INVARIANTS I1, I3). A failed request is recorded and not retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.runtime import Runtime

from nodes.compaction import compact, estimate_tokens
from nodes.context import StepContext
from nodes.errors import ModelRequestError
from nodes.pairing import UnsafeHistoryError, check_request
from nodes.prompts import SYSTEM_PROMPT
from nodes.replies import check_reply, read_usage
from nodes.tools import tool_specs

_ALLOWED_ROLES = ("user", "assistant", "tool")

__all__ = ["UnsafeHistoryError", "prepare_request", "reason_node", "request_messages"]


def prepare_request(state: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                        list[dict[str, Any]]]:
    """The compacted conversation, the request messages and the tool specs for a thread.

    Returns:
        `(compacted, messages, tools)`: the stored conversation compacted to the
        thread's context limit, the request's messages (system prompt first), and the
        tools offered.

    Raises:
        UnsafeHistoryError: The history breaks the pairing rules or holds a forbidden
            role; nothing may be sent.
    """
    thread = state["thread"]
    tools = tool_specs(bool(thread.get("workspace")), bool(thread.get("allow_writes")))
    overhead = estimate_tokens([{"role": "system", "content": SYSTEM_PROMPT}]) + estimate_tokens(tools)
    compacted = compact(state["messages"], int(thread.get("context_tokens") or 16_000), overhead)
    messages = request_messages(compacted)
    check_request(messages[1:])
    return compacted, messages, tools


def request_messages(stored: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Builds the `messages` of a request: the code's system prompt, then stored messages.

    Only the wire keys of each role are copied (`role`, `content`, `tool_calls`,
    `tool_call_id`), so nothing stored can add a key or change a role.

    Raises:
        UnsafeHistoryError: A stored message has a role other than user, assistant
            or tool (INVARIANTS I5: stored text never becomes a system message).
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for index, msg in enumerate(stored):
        role = msg.get("role")
        if role not in _ALLOWED_ROLES:
            raise UnsafeHistoryError(f"stored message {index} has role {role!r}; refusing to send")
        wire: dict[str, Any] = {"role": role, "content": msg.get("content")}
        if role == "assistant" and msg.get("tool_calls"):
            wire["tool_calls"] = msg["tool_calls"]
        if role == "tool":
            wire["tool_call_id"] = msg["tool_call_id"]
        out.append(wire)
    return out


def _check_new_call_ids(message: Mapping[str, Any], stored: list[Mapping[str, Any]]) -> None:
    """Refuses a reply that uses one tool-call id for two of its calls.

    Ids reused from earlier replies are accepted: pairing is positional (a tool result
    answers the assistant message right before it), and several servers number their
    calls `call_0`, `call_1`, ... afresh in every reply. `stored` is unused and kept
    for callers.

    Raises:
        ModelRequestError: `bad_response` (the attempt stays spent; nothing is stored, so
            the thread stays resumable).
    """
    ids = [c["id"] for c in message.get("tool_calls") or []]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ModelRequestError("bad_response", f"the reply uses tool call id(s) {twice} for "
                                "more than one call")


def _add_usage(total: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, int]:
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return {k: int(total.get(k, 0)) + int(more.get(k, 0)) for k in keys}


def _refused(ctx: StepContext, attempt: int, exc: ModelRequestError, usage: Mapping[str, Any] | None,
             progress: Mapping[str, Any], spent: dict[str, Any]) -> dict[str, Any]:
    """The update and log row of a failed or refused request.

    The reported usage of a paid but refused reply still counts toward the thread's
    token cap and shows in its step-log row (INVARIANTS I11).
    """
    error = {"attempt": attempt, "error_code": exc.error_code, "message": exc.message}
    row: dict[str, Any] = {"outcome": "error", **error}
    update: dict[str, Any] = {"outcome": "error", "last_error": error, **spent}
    if usage is not None:
        row["usage"] = dict(usage)
        update["usage"] = _add_usage(progress.get("usage") or {}, usage)
    ctx.log.record(ctx.thread_id, attempt, "reason", row)
    return {"progress": update}


def reason_node(state: Mapping[str, Any], runtime: Runtime[StepContext]) -> dict[str, Any]:
    """Claims the counted attempt, sends one request, and records what came back.

    The request carries the conversation compacted to the thread's context limit
    (`nodes.compaction`) and is checked for tool-call pairing before the claim.

    Returns:
        A state update. `progress.outcome` is `tool_calls`, `answer`, `error` (the
        request failed or its reply was refused; `last_error` says how, and a valid
        reported usage still counts) or `not_sent` (no claimable attempt).
        When the thread's last attempt ends without an answer, `status` becomes
        `exhausted` at once.

    Raises:
        UnsafeHistoryError: The history must not be sent (nothing was claimed).
    """
    ctx = runtime.context
    progress = state["progress"]
    attempt = int(progress["attempts"])
    compacted, messages, tools = prepare_request(state)  # refuses before the claim
    if not ctx.ledger.claim(ctx.thread_id, attempt, ctx.charge):
        return {"progress": {"outcome": "not_sent"}}
    last_attempt = attempt >= int(state["thread"]["max_attempts"])
    spent = {"status": "exhausted", "stop_reason": "budget"} if last_attempt else {}
    usage = None
    try:
        reply = ctx.model.complete(messages, tools)
        usage = read_usage(reply.usage)  # once valid, it counts whatever the content is
        reply = check_reply(reply)
        message = reply.message
        if not message.get("tool_calls") and not (message.get("content") or "").strip():
            raise ModelRequestError("bad_response", "the model returned neither text nor a tool call")
        _check_new_call_ids(message, state["messages"])
    except ModelRequestError as exc:
        return _refused(ctx, attempt, exc, usage or exc.usage, progress, spent)
    # Store the compacted conversation, so stored state stays bounded as the task grows.
    stored = [message] if compacted == list(state["messages"]) else {"__replace__": [*compacted, message]}
    update: dict[str, Any] = {
        "messages": stored,
        "progress": {"usage": _add_usage(progress.get("usage") or {}, reply.usage)},
    }
    if message.get("tool_calls"):
        update["progress"].update(outcome="tool_calls", last_error=None, **spent)
    else:
        update["progress"].update(
            outcome="answer", status="done", answer=message["content"], last_error=None
        )
    ctx.log.record(ctx.thread_id, attempt, "reason", {
        "outcome": update["progress"]["outcome"],
        "thought": message.get("content"),
        "tool_calls": [{"id": c["id"], "name": c["function"]["name"],
                        "arguments": c["function"]["arguments"]}
                       for c in message.get("tool_calls") or []],
        "usage": dict(reply.usage),
    })
    return update
