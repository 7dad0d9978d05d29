"""The **reason** node: exactly one chat-completions request per counted attempt.

Before sending, the node claims the attempt number that the budget node counted. A
claim succeeds once per attempt, so when LangGraph re-runs this node after an
exception or a kill (it resumes at the failed node, skipping the budget node), the
re-run finds its attempt already claimed, sends nothing and routes back to the
budget node (INVARIANTS I1, I3). A failed request is recorded and not retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from nodes.compaction import edit_script, estimate_tokens, fits
from nodes.context import StepContext
from nodes.errors import ModelRequestError, ReplyStopCode, RequestErrorCode, StopReason
from nodes.pairing import not_executed_results
from nodes.redaction import redact_continued, secrets_of
from nodes.replies import assign_call_ids, check_reply, cut_calls, finish_kind, read_usage
from nodes.request import PreparedRequest, prepare_request
from nodes.server_errors import sanitize
from nodes.state import (
    EDIT,
    REPLACE,
    Message,
    Progress,
    ThreadState,
    ThreadUpdate,
    Usage,
    append_messages,
)


def _check_new_call_ids(message: Mapping[str, Any]) -> None:
    """Refuses a reply that uses one tool-call id for two of its calls.

    Ids reused from earlier replies are accepted: pairing is positional (a tool result
    answers the assistant message right before it), and several servers number their
    calls `call_0`, `call_1`, ... afresh in every reply.

    Raises:
        ModelRequestError: `bad_response` (the attempt stays spent; nothing is stored, so
            the thread stays resumable).
    """
    ids = [c["id"] for c in message.get("tool_calls") or []]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ModelRequestError(RequestErrorCode.BAD_RESPONSE, f"the reply uses tool call id(s) {twice} for "
                                "more than one call")


def _add_usage(total: Mapping[str, Any], more: Mapping[str, Any]) -> Usage:
    return Usage(prompt_tokens=int(total.get("prompt_tokens", 0)) + int(more.get("prompt_tokens", 0)),
                 completion_tokens=int(total.get("completion_tokens", 0))
                 + int(more.get("completion_tokens", 0)),
                 total_tokens=int(total.get("total_tokens", 0)) + int(more.get("total_tokens", 0)))


def _refused(ctx: StepContext, attempt: int, exc: ModelRequestError, usage: Mapping[str, Any] | None,
             progress: Progress, spent: Progress, **logged: Any) -> ThreadUpdate:
    """The update and log row of a failed or refused request.

    The reported usage of a paid but refused reply still counts toward the thread's
    token cap and shows in its step-log row (INVARIANTS I11). `logged` adds fields to the
    row (a stopped reply's `finish_reason` and text).
    """
    error = {"attempt": attempt, "error_code": str(exc.error_code), "message": exc.message}
    row: dict[str, Any] = {"outcome": "error", **error, **logged}
    update = Progress(outcome="error", last_error=error, **spent)
    if exc.stop_reason is not None:  # no rerun can fix it (nodes.server_errors): stop here
        update.update(Progress(status="exhausted", stop_reason=str(exc.stop_reason)))
    if usage is not None:
        row["usage"] = dict(usage)
        update["usage"] = _add_usage(progress.get("usage") or {}, usage)
    ctx.log.record(ctx.thread_id, attempt, "reason", row)
    return {"progress": update}


def _filtered(text: str | None) -> ModelRequestError:
    """The error of a reply the server's content filter stopped, showing what it sent."""
    said = sanitize(text or "")
    return ModelRequestError(
        ReplyStopCode.CONTENT_FILTER,
        "the server's content filter stopped the reply (finish_reason content_filter); "
        + (f"it sent: {said!r}" if said else "it sent no text"),
        stop_reason=StopReason.CONTENT_FILTER)


def _joined(partial: str | None, message: Message, secrets: tuple[str, ...]) -> tuple[str, Message]:
    """The answer so far with this reply's text after it, and the reply as it may be stored.

    A reply cut off by the token limit is continued by the next (`outcome` `truncated`);
    the joined text is the parts' texts in order, exactly as sent (whitespace-only parts
    included; an empty last part finishes it). Each part was redacted on its own
    (`nodes.mandapi`), so an API key split across parts is in none of them: the start of
    this part that completes it is replaced (`nodes.redaction.redact_continued`), in the
    stored reply and so in the joined text, which never holds the key (INVARIANTS I9).
    The earlier part's piece of the key stays: it was stored, and shown as
    `partial_answer`, when it came. The joined text stays the concatenation of the stored
    parts, so an export of the thread replays to the same answer.

    Args:
        partial: `progress.partial_answer` (None when this reply does not continue one).
        message: The checked reply.
        secrets: The texts no stored value may hold (`nodes.redaction.secrets_of`).

    Returns:
        (the joined text; `message` with its content redacted as above).
    """
    content = message.get("content") or ""
    if partial is None:
        return content, message
    stored = redact_continued(partial, content, secrets)
    if stored != content:
        message = {**message, "content": stored}
    return partial + stored, message


def _check_fits(thread: Any, request: PreparedRequest, message: Message) -> None:
    """Refuses a reply with tool calls after which no request can fit the context limit.

    Calls whose arguments alone fill the context limit (the reply cap, `MAX_REPLY_CHARS`,
    is far larger than a small limit) would be stored and then stop the thread for good
    (`context_limit`, `nodes.budget`): the last exchange is never compacted. Refused
    instead, as a counted `bad_response` that stores nothing, the thread stays `ready`:
    the next attempt asks again, and a person may first add a user message
    (`update_state`) asking for shorter arguments. The check is the budget node's: the
    conversation with the reply, each call answered by the shortest result
    (`not_executed_results`), compacted. Text cut off by the token limit is not refused
    so: it is kept, and a continuation that cannot fit stops the thread with its partial
    answer flagged (asking again would only cut it off again).

    A conversation that fits without compacting again is not compacted (the step
    compacts once, in the budget node: `nodes.request.PreparedRequests`); only one that
    does not is compacted here to decide.

    Raises:
        ModelRequestError: `bad_response` naming the limit.
    """
    after = [*request.compacted, message]
    answered = [*after, *not_executed_results(after)]
    if fits(answered, request.limit_tokens, request.overhead_tokens):
        return
    prepared = prepare_request(thread, answered)
    if not prepared.fits():
        limit = prepared.limit_tokens
        raise ModelRequestError(
            RequestErrorCode.BAD_RESPONSE,
            f"the reply's tool calls cannot fit the thread's context limit of {limit} tokens "
            f"(about {estimate_tokens(message)} tokens in this reply alone); it is not stored, "
            "so the next attempt asks again")


def _stored_messages(stored: list[Message], compacted: list[Message], message: Message) -> Any:
    """The `messages` update that stores the compacted conversation and the reply.

    The stored state stays bounded as the task grows. Only what changed is written:
    the reply alone when nothing was compacted, else an `EDIT` of the stored list
    (`REPLACE` of the whole list, should the edit not rebuild it exactly).
    """
    if compacted == stored:
        return [message]
    pieces = edit_script(stored, compacted)
    if append_messages(stored, {EDIT: pieces}) != compacted:
        return {REPLACE: [*compacted, message]}
    return {EDIT: [*pieces, message]}


def reason_node(state: ThreadState, runtime: Runtime[StepContext]) -> ThreadUpdate:
    """Claims the counted attempt, sends one request, and records what came back.

    The request carries the conversation compacted to the thread's context limit
    (`nodes.request`, prepared by the budget node of the same step when there was one)
    and is checked for tool-call pairing before the claim.

    What the reply's `finish_reason` changes (`nodes.replies.finish_kind`; it is kept in
    the attempt-log row, never in a message): `length` is not an answer: its text is
    stored (the next request asks the model to continue, `nodes.prompts.CONTINUE_PROMPT`),
    calls whose arguments were cut off are dropped and named in the row
    (`cut_tool_calls`), and `progress.partial_answer` holds the text so far;
    a later reply's text is joined to it (`_joined`: an empty last part finishes the
    answer with the parts before it, and its row says `stored` false); a reply whose
    calls cannot fit the context limit is refused (`_check_fits`);
    `content_filter` stores nothing and stops the thread (`exhausted`, `stop_reason`
    `content_filter`, the server's text in `last_error`). Any other value, or none, is
    decided by the content as before.

    Returns:
        A state update. `progress.outcome` is `tool_calls`, `answer`, `truncated` (cut off
        by the token limit; the thread stays `ready`), `error` (the request failed or
        its reply was refused or filtered; `last_error` says how, and a valid reported
        usage still counts) or `not_sent` (no claimable attempt).
        When the thread's last attempt ends without an answer, `status` becomes
        `exhausted` at once (a partial answer stays in `partial_answer`, never `answer`).

    Raises:
        UnsafeHistoryError: The history must not be sent (nothing was claimed).
    """
    ctx = runtime.context
    progress = state["progress"]
    attempt = int(progress["attempts"])
    request = ctx.prepared.prepare(state["thread"], state["messages"])  # refuses before the claim
    if not ctx.ledger.claim(ctx.thread_id, attempt, ctx.charge):
        return {"progress": {"outcome": "not_sent"}}
    last_attempt = attempt >= int(state["thread"]["max_attempts"])
    spent = Progress(status="exhausted", stop_reason="budget") if last_attempt else Progress()
    usage = None
    cut: list[dict[str, Any]] = []
    try:
        reply = ctx.model.complete(request.messages, request.tools)
        usage = read_usage(reply.usage)  # once valid, it counts whatever the content is
        reply = check_reply(reply)
        kind = finish_kind(reply.finish_reason)
        if kind == "content_filter":  # nothing of it is stored: the thread stops
            return _refused(ctx, attempt, _filtered(reply.message.get("content")), usage, progress,
                            spent, finish_reason=reply.finish_reason,
                            thought=reply.message.get("content"), tool_calls=_logged(reply.message))
        message = assign_call_ids(reply.message, ctx.thread_id, attempt, state["messages"])
        if kind == "length":  # arguments cut off are never executed: the call is not kept
            message, cut = cut_calls(message)
        partial = None if message.get("tool_calls") else progress.get("partial_answer")
        joined, message = _joined(partial, message, secrets_of(ctx.model))
        if not message.get("tool_calls") and kind != "length" and not joined.strip():
            raise ModelRequestError(RequestErrorCode.BAD_RESPONSE,
                                    "the model returned neither text nor a tool call")
        _check_new_call_ids(message)
        keep = bool(message.get("tool_calls") or message.get("content"))
        if message.get("tool_calls"):
            _check_fits(state["thread"], request, message)
    except ModelRequestError as exc:
        return _refused(ctx, attempt, exc, usage or exc.usage, progress, spent)
    done = Progress(usage=_add_usage(progress.get("usage") or {}, reply.usage))
    update: ThreadUpdate = {"progress": done}
    if keep:
        update["messages"] = _stored_messages(state["messages"], request.compacted, message)
    if message.get("tool_calls"):
        done.update(Progress(outcome="tool_calls", partial_answer=None, last_error=None, **spent))
    elif kind == "length":  # not an answer: the next step asks the model to continue
        done.update(Progress(outcome="truncated", partial_answer=joined or partial, last_error=None,
                             **spent))
    else:
        done.update(Progress(outcome="answer", status="done", answer=joined, partial_answer=None,
                             last_error=None))
    row: dict[str, Any] = {
        "outcome": done["outcome"],
        "thought": message.get("content"),
        "tool_calls": _logged(message),
        "usage": dict(reply.usage),
        "finish_reason": reply.finish_reason,
    }
    if not keep and kind != "length":  # an empty last part: the answer is the parts before it
        row["stored"] = False
    if kind == "length":
        row.update(truncated=True, stored=keep,
                   cut_tool_calls=_logged({"tool_calls": cut}))
    ctx.log.record(ctx.thread_id, attempt, "reason", row)
    return update


def _logged(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A message's tool calls as the attempt log keeps them: `id`, `name`, `arguments`."""
    return [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in message.get("tool_calls") or []]
