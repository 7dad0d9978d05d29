"""The offline demo model: no network, no key, deterministic.

It decides each turn only from the request it is given (the conversation and the
tools offered), as a real model would:

- **The shop's references** (a thread without a workspace): on its first turn it
  searches the references for the task (`search_references`); once the result is in
  the conversation it answers with the best hit's text, citing its id (`[ship-02]`).
  The search ranks by BM25+ over word stems (`nodes.ranking`), so each demo question
  finds its own reference.
- **A workspace folder** (a thread created with `--workspace`, seen from the
  workspace tools offered): list and search the folder, read the best files, then
  answer quoting the lines read, cited `path#Lx-Ly` (`nodes.demo_workspace`): three
  requests, within the default budget of four.
- **Saving the answer** (a thread created with `--allow-writes`, seen from the write
  tools offered, whose task asks to save to a file: `... to shipping.md`, a `.md` or
  `.txt` path): once it has its answer it asks to write it there (`write_file`, with
  `path` and `text`), which pauses the thread for review; after the decision it answers,
  saying whether the file was written (`nodes.write_results` words the tool result).
  One more request than without the write: three for the shop's references.

It is the default model (`offline-demo`), so the main job and the tests run without
spending money.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nodes.write_results import APPLIED_TEXT

if TYPE_CHECKING:
    from nodes.context import ModelReply
    from nodes.demo_workspace import Result, Turn

DEMO_MODEL_ID = "offline-demo"

_WORKSPACE_TOOLS = frozenset({"list_files", "read_file", "search_text"})
_WRITE_TOOL = "write_file"
_SAVE_TO = re.compile(r"\b(?:to|into)\s+[`'\"]?((?:[\w-]+/)*[\w-]+\.(?:md|txt))\b", re.IGNORECASE)
"""A task asking to save to a file: `... to shipping.md`, `... into notes/answer.txt`."""


def _estimate_tokens(payload: Any) -> int:
    """About four characters per token, as a stand-in for a real tokenizer."""
    return max(1, len(json.dumps(payload, ensure_ascii=False)) // 4)


def last_results(messages: Sequence[dict[str, Any]]) -> list[Result]:
    """The tool results that answer the conversation's last assistant message.

    Returns:
        `(tool name, arguments, result text)` per call of that message, in call order
        (paired by position and id, as the chat-completions format pairs them); empty
        when the conversation does not end with tool results. Arguments that are not a
        JSON object read as `{}`.
    """
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    if last < 0:
        return []
    answers = {m.get("tool_call_id"): m.get("content") or "" for m in messages[last + 1:]
               if m.get("role") == "tool"}
    results: list[Result] = []
    for call in messages[last].get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            args = {}
        if call.get("id") in answers:
            results.append((str(function.get("name")), args if isinstance(args, dict) else {},
                            str(answers[call.get("id")])))
    return results


def _workspace_turn(task: str, results: list[Result], started: bool) -> Turn:
    from nodes import demo_workspace as ws  # noqa: PLC0415 - ranking (rank_bm25, numpy) stays out of a plain import

    names = {name for name, _, _ in results}
    if "read_file" in names:
        return ws.answer_turn(task, results)
    if names & {"list_files", "search_text"}:
        return ws.read_turn(task, results)
    if not started:
        return ws.first_turn(task)
    return "I could not finish looking through the workspace, so I cannot answer this task.", []


def save_target(task: str) -> str | None:
    """The file a task asks the demo model to save its answer to, or None.

    Returns:
        The relative path after `to` or `into` (`Save the shipping times to shipping.md`:
        `shipping.md`); only `.md` and `.txt` files are written.
    """
    found = _SAVE_TO.search(task)
    return found.group(1) if found else None


def _after_write(results: list[Result]) -> str | None:
    """The answer once the write the model asked for was decided, or None before it."""
    for name, args, text in results:
        if name != _WRITE_TOOL:
            continue
        path, answer = str(args.get("path")), str(args.get("text") or "").strip()
        if text.startswith(APPLIED_TEXT):
            return f"I saved the answer to {path}: {answer}"
        return f"I did not save the answer to {path}. {text.strip()} The answer: {answer}"
    return None


def _reference_turn(task: str, results: list[Result], started: bool) -> Turn:
    if not started:
        return "I will look this up in the shop's references.", [("search_references", {"query": task})]
    texts = [text for name, _, text in results if name == "search_references"]
    return OfflineDemoModel.answer(texts[-1] if texts else ""), []


class OfflineDemoModel:
    """A scripted stand-in for MandAPI that follows the same `ChatModel` protocol.

    Args:
        secrets: Text no result may store (a configured API key, though never sent).
    """

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self.secrets = secrets

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Returns the next turn: tool calls while it is looking things up, then a cited answer."""
        from nodes.context import ModelReply  # noqa: PLC0415 - DEMO_MODEL_ID stays cheap to import on graph.run's quick path
        from nodes.state import Usage  # noqa: PLC0415 - DEMO_MODEL_ID stays cheap to import on graph.run's quick path

        task = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        offered = {(spec.get("function") or {}).get("name") for spec in tools}
        results = last_results(messages)
        started = any(m.get("role") == "assistant" for m in messages)
        turn_of = _workspace_turn if _WORKSPACE_TOOLS <= offered else _reference_turn
        saved = _after_write(results) if _WRITE_TOOL in offered else None
        content, calls = (saved, []) if saved is not None else turn_of(task, results, started)
        target = save_target(task) if _WRITE_TOOL in offered else None
        if saved is None and not calls and target is not None and content:
            content, calls = (f"I will save the answer to {target}.",
                              [(_WRITE_TOOL, {"path": target, "text": content + "\n"})])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            turn = sum(1 for m in messages if m.get("role") == "assistant") + 1
            message["tool_calls"] = [
                {"id": f"call_demo_{turn}" + (f"_{index}" if index else ""), "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for index, (name, args) in enumerate(calls)]
        prompt = _estimate_tokens(messages) + _estimate_tokens(tools)
        completion = _estimate_tokens(message)
        usage = Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
        # As a server says it: history and export show what a real reply would carry.
        return ModelReply(message=message, usage=usage,
                          finish_reason="tool_calls" if calls else "stop")

    @staticmethod
    def answer(tool_text: str) -> str:
        """The answer to a `search_references` result: the best hit's text and id."""
        try:
            hits = json.loads(tool_text).get("hits") or []
        except (json.JSONDecodeError, AttributeError):
            hits = []
        best = hits[0] if isinstance(hits, list) and hits and isinstance(hits[0], dict) else {}
        if not best.get("text") or not best.get("id"):
            return "I found no reference that answers this task, so I cannot answer it."
        return f"{best['text']} [{best['id']}]"
