"""Rebuilds a thread's exchanges with the model from its database (`graph.replay export`).

The database keeps no HTTP request. It keeps what a request is made of: the thread's
fixed settings and the append-only attempt log (each attempt's reply: assistant text,
tool calls and usage, or its error; each tool result whole). A request is a pure
function of those (`nodes.request.prepare_request`: the system prompt in code, the
conversation compacted to the thread's limit, the tool specs), so the export plays the
conversation forward attempt by attempt, as the reason and tools nodes did, and then
checks it against the latest checkpoint: its conversation and its token totals must
come out equal. A thread the log does not reproduce (edited with `update_state`,
forked from an older checkpoint, written before the attempt log existed) is refused as
`not_replayable`, naming which it was, never exported wrong.

What the database does not keep, and what stands in for it in a recording:

- the bytes of a refused reply (`bad_response`): a body without choices, with the
  usage the reply reported (so the same tokens count);
- the body of an HTTP error: `{"error": {"message": ...}}` with the recorded status;
- the reply of an attempt whose process was killed mid-request: none, so the exchange
  raises a connection error, which spends the attempt the same way.

A reply's `finish_reason` is the one its row logged (`length`, `content_filter`, `eos`,
...); a row without one (written before it was logged) exports `null`: unknown, which the
client decides by the content, as the original run did. A reply cut off by the token
limit carries the calls it cut off (`cut_tool_calls`) again, and a reply the content
filter stopped carries its text: replayed, they are dropped and refused as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from graph.checkpoints.load import check_stored_thread, graph_of, pending_review
from graph.errors import ErrorCode, RefusedError
from graph.replay.format import FORMAT, META_KEY, NO_ANSWER, interaction, json_response
from graph.store.base import Store
from nodes.errors import ReplyStopCode, RequestErrorCode
from nodes.pairing import UnsafeHistoryError
from nodes.request import prepare_request
from nodes.server_errors import error_body_of
from nodes.state import Message

__all__ = [
    "export_thread",
]


def _not_replayable(store: Store, thread_id: str, why: str) -> RefusedError:
    return RefusedError(f"cannot export: {why}", error_code=ErrorCode.NOT_REPLAYABLE,
                        location=store.location, thread_id=thread_id)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _assistant(row: Mapping[str, Any]) -> Message | None:
    """The assistant message a `reason` row logged, as the reason node stored it; None if malformed."""
    message: Message = {"role": "assistant", "content": row.get("thought")}
    calls = row.get("tool_calls") or []
    if not all(_text(c.get("id")) and _text(c.get("name")) and _text(c.get("arguments"))
               for c in calls) or not (message["content"] is None or _text(message["content"])):
        return None
    if calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in calls]
    return message


def _failed(model: str, attempt: int, row: Mapping[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """(cassette response, error to raise) standing in for a failed or unlogged attempt (module doc).

    A reply the content filter stopped is answered as it came (its logged text and
    `finish_reason`), so the replay stops the thread the same way.
    """
    if row is None:  # killed mid-request: no reply known
        return NO_ANSWER, str(RequestErrorCode.CONNECTION)
    code, message = row.get("error_code"), row.get("message") or ""
    filtered = _assistant(row) if code == ReplyStopCode.CONTENT_FILTER else None
    if filtered is not None:  # a paid reply, stopped by the server's filter: sent again as it came
        return _reply(model, attempt, filtered, row.get("usage"), row), None
    if code in (RequestErrorCode.TIMEOUT, RequestErrorCode.CONNECTION):
        return NO_ANSWER, str(code)
    answered = error_body_of(message) if code == RequestErrorCode.HTTP_STATUS else None
    if answered is not None:  # the server's message alone, classified as it was live
        return json_response(answered[0], answered[1], "Error"), None
    status = re.search(r"HTTP (\d{3})\b", message) if code != RequestErrorCode.BAD_RESPONSE else None
    if status is not None:
        return json_response(int(status.group(1)), {"error": {"message": message}}, "Error"), None
    payload: dict[str, Any] = {"choices": []}
    if isinstance(row.get("usage"), dict):
        payload["usage"] = row["usage"]
    return json_response(200, payload), None


def _reply(model: str, attempt: int, message: Message, usage: Any,
           row: Mapping[str, Any]) -> dict[str, Any]:
    """The 200 answer of a logged reply, with the `finish_reason` its row logged (module doc)."""
    finish = row.get("finish_reason")
    return json_response(200, {
        "id": f"chatcmpl-replay-{attempt}", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": finish if isinstance(finish, str) else None}],
        "usage": usage})


def _as_sent(row: Mapping[str, Any], stored: Message) -> Message | None:
    """The reply's message as the server sent it: `stored` plus the calls it cut off, if any."""
    cut = row.get("cut_tool_calls") or []
    if not cut:
        return stored
    return _assistant({"thought": stored.get("content"),
                       "tool_calls": [*(row.get("tool_calls") or []), *cut]})


def _usage(row: Mapping[str, Any] | None) -> dict[str, int] | None:
    """A logged reply's usage with whole-number counts; None when not logged or malformed."""
    usage = (row or {}).get("usage") or {}
    counts = {key: usage.get(key, 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")}
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()):
        return None
    return counts


def _log_by_attempt(rows: list[dict[str, Any]]) -> tuple[dict[int, dict], dict[tuple[int, str], str]]:
    """(first `reason` payload by attempt, first tool observation by (attempt, call id))."""
    reasons: dict[int, dict[str, Any]] = {}
    observations: dict[tuple[int, str], str] = {}
    for row in rows:
        payload = row["payload"]
        if row["kind"] == "tool":
            observations.setdefault((row["attempt"], payload["tool_call_id"]), payload["observation"])
        else:
            reasons.setdefault(row["attempt"], payload)
    return reasons, observations


def _rebuild(store: Store, thread_id: str, thread: dict[str, Any], claimed: int,
             uri: str) -> tuple[list[dict], list[dict], list[Message], dict[str, int]]:
    """(interactions, exchange metadata, conversation after the last attempt, usage total).

    Raises:
        RefusedError: `not_replayable` when a logged reply is malformed or a tool turn is
            answered in part, or the conversation cannot be sent.
    """
    reasons, observations = _log_by_attempt(store.log.rows(thread_id))
    stored: list[Message] = [{"role": "user", "content": thread["task"]}]
    items: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for attempt in range(1, claimed + 1):
        try:
            prepared = prepare_request(thread, stored)  # type: ignore[arg-type]
        except UnsafeHistoryError as exc:
            raise _not_replayable(store, thread_id, f"attempt {attempt}'s request: {exc}") from None
        body = {"model": thread["model"], "messages": prepared.messages, "tools": prepared.tools}
        row = reasons.get(attempt)
        counts = _usage(row)
        if counts is None:
            raise _not_replayable(store, thread_id, f"attempt {attempt}'s logged usage is malformed")
        for key, value in counts.items():
            usage[key] += value
        if row is None or row.get("outcome") == "error":
            response, raises = _failed(thread["model"], attempt, row)
            items.append(interaction(uri, body, response))
            exchanges.append({"attempt": attempt, "outcome": "error" if row else "no record",
                              **({"raise": raises} if raises else {})})
            continue
        message = _assistant(row)
        sent = _as_sent(row, message) if message is not None else None
        if message is None or sent is None:
            raise _not_replayable(store, thread_id, f"attempt {attempt}'s logged reply is malformed")
        items.append(interaction(uri, body, _reply(thread["model"], attempt, sent, row.get("usage"),
                                                   row)))
        exchanges.append({"attempt": attempt, "outcome": row.get("outcome")})
        if row.get("stored") is False:  # nothing kept (cut off in a call, an empty last part)
            continue
        stored = [*prepared.compacted, message]
        results = [observations.get((attempt, c["id"])) for c in message.get("tool_calls") or []]
        if all(r is not None for r in results):
            stored += [{"role": "tool", "tool_call_id": c["id"], "content": r}
                       for c, r in zip(message.get("tool_calls") or [], results, strict=True)]
        elif any(r is not None for r in results) or attempt != claimed:
            raise _not_replayable(store, thread_id, f"attempt {attempt}'s tool calls were answered "
                                  "in part")
    return items, exchanges, stored, usage


def _changed_by(store: Store, thread_id: str) -> str:
    """What changed the thread outside its steps, read from its latest checkpoint's lineage.

    LangGraph marks a checkpoint written by `update_state` with source `update`, and the
    copy an invocation from an older checkpoint starts with (a fork, time travel) with
    source `fork`; the newest such mark on the way back from the latest checkpoint is
    named. Checkpoints trimmed by the window may hide it: then every cause is named.
    """
    saved = {t.config["configurable"]["checkpoint_id"]: t for t in store.checkpointer.list(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})}
    latest = max(saved, default=None)
    seen: set[str] = set()
    while latest is not None and latest in saved and latest not in seen:
        seen.add(latest)
        found = saved[latest]
        parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        source = (found.metadata or {}).get("source")
        if source == "fork":
            return (f"the thread was forked from an older checkpoint ({parent}): its latest "
                    "state is a branch started there (time travel, as in the README's fork "
                    "example), and a recording replays one thread straight through, which the "
                    "attempt log (every attempt of every branch, in order) cannot rebuild for a "
                    "branch; export a thread that was not forked")
        if source == "update":
            return (f"the conversation was changed with update_state (checkpoint {latest}), so "
                    "the requests were not made from what the attempt log holds")
        latest = parent
    return ("the thread was changed outside its steps: with update_state, by a fork from an "
            "older checkpoint (time travel), or by an edit of the database")


def export_thread(store: Store, thread_id: str, uri: str) -> dict[str, Any]:
    """The recording of `thread_id` (a cassette dict for `graph.replay.format.write_recording`).

    Args:
        store: The thread's database, opened read-only.
        thread_id: The thread to export.
        uri: The chat-completions URL the requests are recorded as sent to.

    Raises:
        RefusedError: `no_such_thread`; any refusal of `graph.checkpoints.load.check_stored_thread`
            (the thread is checked whole first); `not_replayable` (module doc).
    """
    loaded = check_stored_thread(store, graph_of(store), thread_id)
    if loaded is None:
        raise RefusedError("no such thread", error_code=ErrorCode.NO_SUCH_THREAD,
                           location=store.location, thread_id=thread_id)
    values, entry = loaded.values, store.ledger.read(thread_id)
    thread, progress = values["thread"], values["progress"]
    items, exchanges, stored, usage = _rebuild(store, thread_id, thread, entry.claimed if entry else 0,
                                               uri)
    if stored != list(values["messages"]):
        same = sum(1 for _ in zip(stored, values["messages"], strict=False))
        first = next((i for i in range(same) if stored[i] != values["messages"][i]), same)
        raise _not_replayable(store, thread_id, "the attempt log does not reproduce the stored "
                              f"conversation (they differ from message {first}): "
                              f"{_changed_by(store, thread_id)}")
    if usage != dict(progress.get("usage") or usage):
        raise _not_replayable(store, thread_id, f"the attempt log's token counts {usage} differ "
                              f"from the thread's {dict(progress.get('usage') or {})}: "
                              f"{_changed_by(store, thread_id)}")
    pending = pending_review(loaded.snapshot)
    meta = {
        "format": FORMAT,
        "thread": {key: thread.get(key) for key in (
            "thread_id", "task", "model", "max_attempts", "max_tokens", "context_tokens",
            "keep_checkpoints", "workspace", "allow_writes")},
        "decisions": [{"attempt": row["attempt"], "tool_call_id": row["tool_call_id"],
                       "decision": row["decision"], "reason": row["reason"]}
                      for row in store.approvals.rows(thread_id).values()],
        "exchanges": exchanges,
        "outcome": {"status": "awaiting_approval" if pending else progress["status"],
                    "attempts": progress["attempts"], "answer": progress.get("answer"),
                    "stop_reason": progress.get("stop_reason"), "usage": usage},
    }
    return {"version": 1, "interactions": items, "metadata": {META_KEY: meta}}
