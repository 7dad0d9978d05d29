"""Deterministic, extractive context compaction that keeps evidence.

When the conversation to send would exceed the thread's context limit, the oldest
material is compacted, oldest first, until it fits:

1. old tool results become a stub keeping the tool name, arguments, original size and
   every evidence id (reference ids, `path#Lstart-Lend`), so the model can cite them
   and ask for the text again;
2. old assistant text is shortened;
3. if still too long, the oldest whole exchanges (an assistant message with all of its
   tool results) are dropped; their full text stays in the attempt log, and their
   evidence ids move to one evidence index, a `user` message right after the task,
   holding at most `INDEX_ENTRIES` entries (the earliest and the latest half each).

Never touched: the first message (the task), the latest assistant message and its
tool results, and every `tool_call_id`. No model request is made. Tokens are
estimated as one per four characters of the messages' JSON (`estimate_tokens`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

CHARS_PER_TOKEN = 4
STUB_PREFIX = "[compacted]"
_EVIDENCE = re.compile(r"[A-Za-z0-9_./-]+#L\d+-L\d+")
_ASSISTANT_KEEP_CHARS = 200
INDEX_PREFIX = "[compacted] Earlier exchanges were removed to fit the context. Evidence read so far"
INDEX_ENTRIES = 40
"""Most entries the evidence index keeps."""


def estimate_tokens(payload: Any) -> int:
    """About one token per four characters of JSON (an upper-side estimate for English)."""
    return len(json.dumps(payload, ensure_ascii=False)) // CHARS_PER_TOKEN + 1


class _Sizes:
    """The JSON length of a message list, kept as a running total while it is edited.

    `json.dumps` of a list is `[` + the items joined by `, ` + `]`, so the list's length
    is the sum of its items' lengths plus 2 per separator and 2 for the brackets: the
    estimate equals `estimate_tokens(list)` exactly, without serializing the whole
    conversation again after each edit (issue 15: that re-serialization was most of a
    step's cost).
    """

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        self.lengths = [self.length(m) for m in messages]
        self.total = sum(self.lengths)

    @staticmethod
    def length(message: dict[str, Any]) -> int:
        return len(json.dumps(message, ensure_ascii=False))

    def update(self, index: int, message: dict[str, Any]) -> None:
        """Message `index` was replaced by `message`."""
        new = self.length(message)
        self.total += new - self.lengths[index]
        self.lengths[index] = new

    def tokens(self, skip: set[int] | frozenset[int] = frozenset(), extra: int = 0) -> int:
        """`estimate_tokens` of the list without the `skip` indexes, plus `extra` items.

        Args:
            skip: Indexes left out (each an index of the list).
            extra: Lengths of items added (each one more item in the list).
        """
        count = len(self.lengths) - len(skip) + (1 if extra else 0)
        kept = self.total - sum(self.lengths[i] for i in skip)
        chars = 2 + kept + extra + (2 * (count - 1) if count else 0)
        return chars // CHARS_PER_TOKEN + 1


def _evidence_of(text: str) -> list[str]:
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        data = None
    if isinstance(data, dict):  # our tools' JSON names its evidence exactly
        return [str(e) for e in data.get("evidence") or []]
    return list(dict.fromkeys(_EVIDENCE.findall(text or "")))


def stub(tool_message: dict[str, Any], call: dict[str, Any] | None) -> dict[str, Any]:
    """The compacted form of a tool result: same role and id, a short stub as content."""
    content = tool_message.get("content") or ""
    function = (call or {}).get("function") or {}
    summary = {"tool": function.get("name"), "arguments": function.get("arguments"),
               "original_chars": len(content), "evidence": _evidence_of(content)}
    return {"role": "tool", "tool_call_id": tool_message["tool_call_id"],
            "content": f"{STUB_PREFIX} {json.dumps(summary, ensure_ascii=False)} "
                       "(call the tool again to re-read)"}


def calls_by_position(messages: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The call each tool result answers, by the result's index in `messages`.

    Pairing is positional: a result answers the call with its id in the latest
    assistant message before it, so an id used again by a later turn never picks
    up another turn's call.
    """
    found: dict[int, dict[str, Any]] = {}
    current: dict[str, dict[str, Any]] = {}
    for index, msg in enumerate(messages):
        if msg["role"] == "assistant":
            current = {c["id"]: c for c in msg.get("tool_calls") or []}
        elif msg["role"] == "tool" and msg.get("tool_call_id") in current:
            found[index] = current[msg["tool_call_id"]]
    return found


def _units(messages: Sequence[dict[str, Any]]) -> list[list[int]]:
    """Indexes grouped into exchanges: each assistant message with its tool results."""
    units: list[list[int]] = []
    for index, msg in enumerate(messages[1:], start=1):
        if msg["role"] == "tool" and units:
            units[-1].append(index)
        else:
            units.append([index])
    return units


def compact(messages: Sequence[dict[str, Any]], limit_tokens: int,
            overhead_tokens: int = 0) -> list[dict[str, Any]]:
    """Returns `messages` compacted to fit `limit_tokens` (see module doc).

    Args:
        messages: The stored conversation, task first, pairing intact.
        limit_tokens: The thread's context limit (tokens, estimated).
        overhead_tokens: Tokens the request spends besides these messages (system
            prompt, tool specs).

    Returns:
        A new list (the input is not changed); the same messages when they fit. It may
        still exceed the limit when the protected messages alone do (see `fits`).
    """
    out = [dict(m) for m in messages]
    budget = limit_tokens - overhead_tokens
    sizes = _Sizes(out)
    if sizes.tokens() <= budget:
        return out
    units = _units(out)
    protected = set(units[-1]) if units else set()
    calls = calls_by_position(out)
    for unit in units[:-1]:  # 1. stub old tool results, oldest first
        for index in unit:
            msg = out[index]
            if msg["role"] == "tool" and not str(msg["content"]).startswith(STUB_PREFIX):
                out[index] = stub(msg, calls.get(index))
                sizes.update(index, out[index])
        if sizes.tokens() <= budget:
            return out
    for unit in units[:-1]:  # 2. shorten old assistant text
        msg = out[unit[0]]
        if msg["role"] == "assistant" and len(msg.get("content") or "") > _ASSISTANT_KEEP_CHARS:
            out[unit[0]] = {**msg, "content": msg["content"][:_ASSISTANT_KEEP_CHARS] + " …"}
            sizes.update(unit[0], out[unit[0]])
        if sizes.tokens() <= budget:
            return out
    index_at = 1 if len(out) > 1 and _is_index(out[1]) else None
    entries = _index_entries(out[1]) if index_at else []
    dropped: set[int] = set()  # 3. drop the oldest whole exchanges, keeping their evidence
    for unit in units[:-1]:
        if unit == [index_at]:
            continue
        dropped.update(unit)
        for index in unit:
            if out[index]["role"] == "tool":
                entries += _entries_of(out[index], calls.get(index))
        index_msg = _index_message(entries)
        skip = dropped | ({index_at} if index_at is not None else set())
        extra = sizes.length(index_msg) if index_msg is not None else 0
        if sizes.tokens(skip, extra) <= budget:
            return _with_index([m for i, m in enumerate(out) if i not in skip], entries)
    return _with_index([m for i, m in enumerate(out)
                        if (i not in dropped or i in protected) and i != index_at], entries)


def _is_index(msg: dict[str, Any]) -> bool:
    return msg.get("role") == "user" and str(msg.get("content", "")).startswith(INDEX_PREFIX)


def _index_entries(msg: dict[str, Any]) -> list[str]:
    return [line[2:] for line in str(msg["content"]).splitlines()[1:] if line.startswith("- ")]


def _entries_of(tool_message: dict[str, Any], call: dict[str, Any] | None) -> list[str]:
    content = str(tool_message.get("content") or "")
    if content.startswith(STUB_PREFIX):
        summary = json.loads(content[len(STUB_PREFIX):].rsplit(" (call the tool", 1)[0])
        evidence = summary.get("evidence") or []
    else:
        evidence = _evidence_of(content)
    function = (call or {}).get("function") or {}
    how = f"{function.get('name')} {str(function.get('arguments'))[:80]}"
    return [f"{e} (via {how})" for e in evidence]


def _index_message(entries: list[str]) -> dict[str, Any] | None:
    """The evidence index message (deduplicated, capped), or None without entries."""
    unique = list(dict.fromkeys(entries))
    if len(unique) > INDEX_ENTRIES:
        half = INDEX_ENTRIES // 2
        unique = unique[:half] + unique[-half:]
    if not unique:
        return None
    return {"role": "user", "content": INDEX_PREFIX + " (cite these ids; call the tool again "
            "to re-read):\n" + "\n".join(f"- {e}" for e in unique)}


def _with_index(messages: list[dict[str, Any]], entries: list[str]) -> list[dict[str, Any]]:
    """`messages` with the evidence index (deduplicated, capped) right after the task."""
    index = _index_message(entries)
    if index is None:
        return messages
    return [messages[0], index, *messages[1:]]


def fits(messages: Sequence[dict[str, Any]], limit_tokens: int, overhead_tokens: int = 0) -> bool:
    """True when `messages` fit the limit (after `compact`, nothing more can be removed)."""
    return estimate_tokens(list(messages)) <= limit_tokens - overhead_tokens


def edit_script(stored: Sequence[dict[str, Any]], compacted: Sequence[dict[str, Any]]
                ) -> list[Any]:
    """Pieces that rebuild `compacted` from `stored` (`nodes.state.EDIT`), mostly slices.

    Compaction keeps messages in order, replaces some and drops others, so a message of
    `compacted` equal to a later message of `stored` becomes part of a `[start, stop]`
    slice, and any other is a piece of its own. Applying the pieces to `stored` gives
    a list equal to `compacted`, message by message (the caller checks it).
    """
    where: dict[tuple[Any, Any], list[int]] = {}
    for index, msg in enumerate(stored):
        where.setdefault(_key(msg), []).append(index)
    pieces: list[Any] = []
    after = 0  # the stored messages before this index are behind us
    for msg in compacted:
        found = next((i for i in where.get(_key(msg), ()) if i >= after and stored[i] == msg),
                     None)
        if found is None:
            pieces.append(msg)
            continue
        index = found
        last = pieces[-1] if pieces else None
        if isinstance(last, list) and last[1] == index:
            last[1] = index + 1
        else:
            pieces.append([index, index + 1])
        after = index + 1
    return pieces


def _key(msg: dict[str, Any]) -> tuple[Any, Any]:
    """A hashable summary of a message that equal messages share."""
    content = msg.get("content")
    return msg.get("role"), content if isinstance(content, str) else None
