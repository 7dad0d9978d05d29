"""Read-only tools offered to the model, and the **tools** node that runs them.

A tool error the model can fix (unknown tool, unparsable or wrong arguments, nothing
found) goes back to the model as a `tool` message starting with `TOOL_ERROR_PREFIX`;
a bug in a tool still raises. Tool output is data: it is only ever sent with the
`tool` role (INVARIANTS I5), and it is capped at `MAX_TOOL_OUTPUT_CHARS`. Every result,
run here or decided by a reviewer, enters state and the attempt log through
`nodes.redaction.stored_text`: valid Unicode, and without the API key (I9, I13).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from langgraph.runtime import Runtime

from nodes import references
from nodes.arguments import ArgumentsError, parse_arguments
from nodes.context import StepContext
from nodes.prompts import TOOL_ERROR_PREFIX
from nodes.redaction import secrets_of, stored_text
from nodes.review import open_calls_of_last, review, split_writes
from nodes.state import Message, ThreadState, ThreadUpdate
from nodes.tool_specs import tool_specs
from nodes.workspace import Workspace, WorkspaceError

MAX_TOOL_OUTPUT_CHARS = 8_000
"""Longest tool result kept and sent (characters); longer output is cut and marked."""


class ToolInputError(Exception):
    """The model asked for something a tool cannot do; reported back to the model."""


Handler = Callable[[Mapping[str, Any], "Workspace | None"], Any]


def _search_references(args: Mapping[str, Any], workspace: Workspace | None) -> Any:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolInputError("'query' must be a non-empty string")
    limit = args.get("limit", 3)
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise ToolInputError("'limit' must be an integer")
    hits = references.search(query, limit)
    return {"query": query, "hits": hits, "evidence": [h["id"] for h in hits]}


def _get_reference(args: Mapping[str, Any], workspace: Workspace | None) -> Any:
    ref_id = args.get("ref_id")
    if not isinstance(ref_id, str):
        raise ToolInputError("'ref_id' must be a string")
    found = references.get(ref_id)
    if found is None:
        raise ToolInputError(f"no reference with id {ref_id!r}")
    return {**found, "evidence": [ref_id]}


def _list_references(args: Mapping[str, Any], workspace: Workspace | None) -> Any:
    topic = args.get("topic")
    if topic is not None and not isinstance(topic, str):
        raise ToolInputError("'topic' must be a string")
    return {"references": references.listing(topic), "evidence": []}


def _workspace_tool(method: str) -> Handler:
    def handler(args: Mapping[str, Any], workspace: Workspace | None) -> Any:
        if workspace is None:
            raise ToolInputError("this thread has no workspace")
        allowed = {"list_files": {"path"}, "read_file": {"path", "offset", "limit"},
                   "search_text": {"query", "path"}}[method]
        extra = set(args) - allowed
        if extra:
            raise ToolInputError(f"unexpected argument(s) {sorted(extra)}")
        try:
            return getattr(workspace, method)(**args)
        except WorkspaceError as exc:
            raise ToolInputError(str(exc)) from None
    return handler


_HANDLERS: dict[str, Handler] = {
    "search_references": _search_references,
    "get_reference": _get_reference,
    "list_references": _list_references,
    "list_files": _workspace_tool("list_files"),
    "read_file": _workspace_tool("read_file"),
    "search_text": _workspace_tool("search_text"),
}


def run_tool_call(call: Mapping[str, Any], workspace: Workspace | None = None) -> str:
    """Runs one tool call and returns the text of its `tool` message.

    Args:
        call: One entry of an assistant message's `tool_calls`:
            `{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}`.
        workspace: The thread's workspace; without one, workspace tools are unknown.

    Returns:
        JSON text of the result, or `TOOL_ERROR_PREFIX` and a one-line reason;
        at most `MAX_TOOL_OUTPUT_CHARS` characters.
    """
    function = call.get("function") or {}
    name = function.get("name")
    try:
        handler = _HANDLERS.get(name)  # type: ignore[arg-type]
        offered = {spec["function"]["name"] for spec in tool_specs(workspace is not None)}
        if handler is None or name not in offered:
            raise ToolInputError(f"unknown tool {name!r}")
        try:
            args = parse_arguments(function.get("arguments"))
        except ArgumentsError as exc:
            raise ToolInputError(str(exc)) from None
        text = json.dumps(handler(args, workspace), ensure_ascii=False, sort_keys=True)
    except ToolInputError as exc:
        text = f"{TOOL_ERROR_PREFIX}{exc}"
    if len(text) > MAX_TOOL_OUTPUT_CHARS:
        text = text[: MAX_TOOL_OUTPUT_CHARS - 20] + " ...[output cut]"
    return text


def tools_node(state: ThreadState, runtime: Runtime[StepContext]) -> ThreadUpdate:
    """The **tools** node: answers every tool call of the latest assistant message.

    Write calls (only offered with `--allow-writes`) are never executed here: the node
    first pauses for review (`interrupt`), and their results come from the reviewer's
    decisions. Each result is also appended to the attempt log (whole, for history).

    Returns:
        `{"messages": [...]}` with one `tool` message per call, in call order, each
        carrying the call's `tool_call_id` unchanged (INVARIANTS I6).
    """
    calls = open_calls_of_last(state["messages"])
    writes, reviewed = split_writes(state["thread"].get("allow_writes"), calls)
    if writes:
        reviewed.update(review(writes))
    return answer_calls(state, runtime.context, reviewed)


def answer_calls(state: ThreadState, ctx: StepContext, reviewed: dict[str, str]) -> ThreadUpdate:
    """Answers the latest message's calls: `reviewed` results by call id, the others run here.

    Returns:
        As `tools_node`; each result is appended to the attempt log, as stored: valid
        Unicode with the model's secrets (the API key) replaced (`stored_text`).
    """
    root = state["thread"].get("workspace")
    workspace = Workspace(root) if root else None
    secrets = secrets_of(ctx.model)
    results: list[Message] = []
    for call in open_calls_of_last(state["messages"]):
        text = reviewed[call["id"]] if call["id"] in reviewed else run_tool_call(call, workspace)
        text = stored_text(text, secrets)
        ctx.log.record(ctx.thread_id, int(state["progress"]["attempts"]), "tool", {
            "tool_call_id": call["id"], "name": (call.get("function") or {}).get("name"),
            "arguments": (call.get("function") or {}).get("arguments"), "observation": text})
        results.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    return {"messages": results}
