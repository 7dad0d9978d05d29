"""How a request sent during a replay differs from the recorded one, as a readable diff.

Two modes of comparison:

- `exact`: the method, the URL and the whole JSON body (model, messages, tools and any
  other field) must be equal;
- `messages_and_tools`: only the body's `messages` and `tools` must be equal (another
  model id, URL or extra request field is accepted).

A difference is shown as a unified diff of a text rendering made for people: one block
per message (`messages[3] tool call_Zx81`, then its content line by line), tool calls
with their arguments, tool specs as indented JSON.
"""

from __future__ import annotations

import difflib
import json
import textwrap
from typing import Any

from graph.text import escape_controls

__all__ = [
    "MAX_DIFF_LINES",
    "MODES",
    "compared",
    "difference",
    "outcome_difference",
    "render",
]

MODES = ("exact", "messages_and_tools")
MAX_DIFF_LINES = 150
"""Longest diff shown (lines); the rest is cut and counted."""
_WIDTH = 110


def _content_lines(content: Any) -> list[str]:
    if not isinstance(content, str):
        return [f"    {json.dumps(content, ensure_ascii=False)}"]
    lines = []
    for line in content.split("\n") or [""]:
        lines += [f"    {part}" for part in (textwrap.wrap(line, _WIDTH) or [""])]
    return lines


def _message_lines(index: int, message: Any) -> list[str]:
    if not isinstance(message, dict):
        return [f"messages[{index}] {json.dumps(message, ensure_ascii=False)}"]
    head = f"messages[{index}] {message.get('role')}"
    if "tool_call_id" in message:
        head += f" {message['tool_call_id']}"
    extra = sorted(set(message) - {"role", "content", "tool_calls", "tool_call_id"})
    lines = [head + (f" (also {', '.join(extra)})" if extra else ""), *_content_lines(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        lines.append(f"    -> {call.get('id') if isinstance(call, dict) else call} "
                     f"{function.get('name')}({function.get('arguments')})")
    return lines


def render(value: dict[str, Any]) -> list[str]:
    """The lines a diff compares: each field of `value`, messages and tools made readable."""
    lines: list[str] = []
    for key, item in value.items():
        if key == "messages" and isinstance(item, list):
            for index, message in enumerate(item):
                lines += _message_lines(index, message)
        elif key == "tools" and isinstance(item, list):
            for tool in item:
                name = ((tool or {}).get("function") or {}).get("name") if isinstance(tool, dict) else tool
                lines.append(f"tool {name}")
                lines += ["    " + line for line in json.dumps(tool, ensure_ascii=False, indent=1,
                                                              sort_keys=True).splitlines()]
        else:
            lines.append(f"{key}: {json.dumps(item, ensure_ascii=False)}")
    return lines


def compared(method: str, uri: str, body: Any, mode: str) -> dict[str, Any]:
    """The parts of a request that `mode` compares (see the module doc)."""
    if mode == "exact":
        return {"method": method, "url": uri, **(body if isinstance(body, dict) else {"body": body})}
    fields = body if isinstance(body, dict) else {}
    return {"messages": fields.get("messages"), "tools": fields.get("tools")}


def _canonical(value: Any) -> list[str]:
    """`value` as pretty-printed canonical JSON (sorted keys), one line per item."""
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=repr).splitlines()


def _unified(recorded: list[str], other: list[str], name: str) -> str:
    """A unified diff (`recorded` → `name`) of two renderings, cut at `MAX_DIFF_LINES`.

    Control characters are escaped (`graph.text.escape_controls`) after the
    comparison: a recording's text reaches the test report and the terminal, where an
    ESC, OSC 8 link, C1 CSI or bidirectional override would act instead of showing.
    """
    lines = list(difflib.unified_diff(recorded, other, "recorded", name, n=2, lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more diff lines)"]
    return escape_controls("\n".join(lines))


def difference(recorded: dict[str, Any], sent: dict[str, Any]) -> str | None:
    """None when equal; else a unified diff (`recorded` → `sent`), cut at `MAX_DIFF_LINES`.

    The diff is of `render`'s text; when that hides the difference (a field it does
    not show, a number type), of both values as pretty-printed canonical JSON.
    """
    if recorded == sent:
        return None
    old, new = render(recorded), render(sent)
    if old == new:
        old, new = _canonical(recorded), _canonical(sent)
    return _unified(old, new, "sent")


def outcome_difference(recorded: dict[str, Any], replayed: dict[str, Any]) -> str | None:
    """None when equal; else a unified diff of two thread endings (`status`, `answer`, ...).

    Text (an answer) is shown line by line, wrapped; other values as canonical JSON.
    """
    if recorded == replayed:
        return None

    def lines(value: dict[str, Any]) -> list[str]:
        out: list[str] = []
        for key, item in value.items():
            if isinstance(item, str):
                out += [f"{key}:", *_content_lines(item)]
            else:
                out.append(f"{key}: {json.dumps(item, ensure_ascii=False, sort_keys=True)}")
        return out

    old, new = lines(recorded), lines(replayed)
    if old == new:
        old, new = _canonical(recorded), _canonical(replayed)
    return _unified(old, new, "replayed")
