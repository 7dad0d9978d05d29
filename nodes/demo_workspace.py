"""How the offline demo model works through a workspace folder, one request at a time.

Three turns, each decided only from the conversation it is given, as a real model would:

1. With no tool result yet: list the folder and search it for the task's key words
   (`list_files`, then `search_text` for up to three word fragments, in one message).
2. After the list and search results: rank the files against the task (their path and
   the lines the searches found, `nodes.ranking`) and read the best ones (`read_file`
   around their first match; at most three, each scoring at least half the best).
3. After the reads: answer with the lines that best match the task, quoted and cited
   as `path#Lx-Ly`, from the text actually read.

A thread whose folder holds nothing about the task gets an answer saying so at turn 2.
Each function returns the assistant message's `content` and its tool calls as
`(name, arguments)` pairs; `nodes.demo_model` turns them into wire messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodes import ranking
from nodes.prompts import TOOL_ERROR_PREFIX

MAX_READS = 3
"""Most files read in turn 2."""
READ_LINES = 60
"""Lines asked for per read."""
MAX_CITED_LINES = 6
"""Most lines quoted in the answer."""

Call = tuple[str, dict[str, Any]]
Turn = tuple[str | None, list[Call]]
Result = tuple[str, Mapping[str, Any], str]
"""One tool result of the previous turn: tool name, its arguments, and the result text."""


def parsed(text: str) -> dict[str, Any] | None:
    """A tool result's JSON object, or None for a tool error or anything else."""
    if text.startswith(TOOL_ERROR_PREFIX):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _int(value: Any, default: int = 1) -> int:
    """`value` when it is a positive whole number (not a bool), else `default`."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list (anything else: none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _quoted(items: Sequence[str]) -> str:
    marks = [f"'{item}'" for item in items]
    return marks[0] if len(marks) == 1 else ", ".join(marks[:-1]) + " and " + marks[-1]


def first_turn(task: str) -> Turn:
    """Turn 1: list the folder and search it for the task's key words."""
    fragments = ranking.search_fragments(task)
    calls: list[Call] = [("list_files", {"path": "."})]
    calls += [("search_text", {"query": fragment}) for fragment in fragments]
    searching = f" and search it for {_quoted(fragments)}" if fragments else ""
    return f"I will list the workspace{searching}.", calls


_JSON_TEXT = r'"(?:[^"\\]|\\.)*"'
_SALVAGED = {
    "list_files": (re.compile(r'\{"bytes": \d+, "path": ' + _JSON_TEXT + r'\}'), "files"),
    "search_text": (re.compile(r'\{"line": \d+, "path": ' + _JSON_TEXT + r', "text": ' + _JSON_TEXT
                               + r'\}'), "matches"),
}
"""The whole entries of a result cut at `MAX_TOOL_OUTPUT_CHARS` (keys sorted, as the tools write)."""


def _salvaged(name: str, text: str) -> dict[str, Any]:
    """A listing or search result, or the whole entries left of one cut short."""
    value = parsed(text)
    if value is not None or name not in _SALVAGED or text.startswith(TOOL_ERROR_PREFIX):
        return value or {}
    pattern, key = _SALVAGED[name]
    entries = []
    for found in pattern.finditer(text):
        try:
            entries.append(json.loads(found.group(0)))
        except json.JSONDecodeError:  # a string the pattern took for JSON: skip the entry
            continue
    return {key: entries}


def _candidates(results: Sequence[Result]) -> dict[str, list[tuple[int, str]]]:
    """Every file seen in the listing or the search results, with its matching lines."""
    files: dict[str, list[tuple[int, str]]] = {}
    for name, _, text in results:
        value = _salvaged(name, text)
        if name == "list_files":
            for entry in _dicts(value.get("files")):
                files.setdefault(str(entry.get("path")), [])
        elif name == "search_text":
            for match in _dicts(value.get("matches")):
                found = (_int(match.get("line")), str(match.get("text") or ""))
                lines = files.setdefault(str(match.get("path")), [])
                if found not in lines:
                    lines.append(found)
    return files


def read_turn(task: str, results: Sequence[Result]) -> Turn:
    """Turn 2: read the files that best match the task, or say that none does."""
    files = _candidates(results)
    paths = sorted(files)
    documents = [" ".join([path, *(text for _, text in files[path])]) for path in paths]
    ranked = ranking.rank(task, documents)
    if not ranked:
        errors = [text for _, _, text in results if text.startswith(TOOL_ERROR_PREFIX)]
        if errors and not files:
            return f"I could not look through the workspace: {errors[0]}", []
        searched = [str(args.get("query")) for name, args, _ in results if name == "search_text"]
        looked = f" for {_quoted(searched)}" if searched else ""
        return (f"I searched the workspace's {len(files)} files{looked} and found nothing "
                "about this task, so I cannot answer it from this folder."), []
    best = ranked[0][1]
    chosen = [paths[i] for i, score in ranked if score >= best / 2][:MAX_READS]
    calls: list[Call] = []
    for path in chosen:
        first = min((line for line, _ in files[path]), default=1)
        calls.append(("read_file", {"path": path, "offset": max(1, first - READ_LINES // 3),
                                    "limit": READ_LINES}))
    found = ", ".join(_where(path, files[path]) for path in chosen)
    if len(chosen) == 1:
        return f"The best match is {found}. I will read it.", calls
    return f"The best matches are {found}. I will read them.", calls


def _where(path: str, lines: Sequence[tuple[int, str]]) -> str:
    """`path (line 4)`, `path (lines 4, 9)`, or the path alone when no line matched."""
    numbers = sorted({number for number, _ in lines})[:5]
    if not numbers:
        return path
    return f"{path} (line{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))})"


def _read_lines(results: Sequence[Result]) -> list[tuple[str, int, str]]:
    """`(path, line number, text)` of every line that the reads returned."""
    lines = []
    for name, _, text in results:
        value = parsed(text) if name == "read_file" else None
        if not value or "text" not in value:
            continue
        start = _int(value.get("start_line"))
        for offset, line in enumerate(str(value["text"]).split("\n")):
            lines.append((str(value.get("path")), start + offset, line))
    return lines


def _ranges(numbers: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted line numbers grouped into runs of consecutive lines."""
    runs: list[tuple[int, int]] = []
    for number in sorted(numbers):
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


def answer_turn(task: str, results: Sequence[Result]) -> Turn:
    """Turn 3: the lines read that best match the task, quoted and cited `path#Lx-Ly`."""
    lines = _read_lines(results)
    ranked = ranking.rank(task, [text for _, _, text in lines])
    if not ranked:
        read = sorted({path for path, _, _ in lines})
        if not read:
            return "I could not read any of the files I chose, so I cannot answer this task.", []
        return f"I read {', '.join(read)} but found no line about this task, so I cannot answer it.", []
    best = ranked[0][1]
    keep = [lines[i] for i, score in ranked if score >= best / 2][:MAX_CITED_LINES]
    by_path: dict[str, dict[int, str]] = {}
    for path, number, text in keep:
        by_path.setdefault(path, {})[number] = text.strip()
    parts = []
    for path in by_path:  # the file of the best line first
        numbered = by_path[path]
        for start, end in _ranges(list(numbered)):
            quoted = " / ".join(f"`{numbered[n][:120]}`" for n in range(start, end + 1))
            parts.append(f"{quoted} [{path}#L{start}-L{end}]")
    return "From the files I read: " + "; ".join(parts) + ".", []
