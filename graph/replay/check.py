"""Checks a recording's whole structure once, when it is read, before any graph runs.

A recording is a file people edit (a prompt fixed by hand, an answer shortened) and
that can be damaged, so `graph.replay.format.load_recording` reads it through this
module and refuses, naming the first bad fields by path
(`interactions[2].response.status.code: Input should be a valid integer`), anything
that is not exactly the shape `graph.replay export` writes:

- the file must be at most `MAX_BYTES` long and its JSON nested at most `MAX_DEPTH`
  deep (a deeply nested file would otherwise end in a `RecursionError` somewhere in
  `json`, vcrpy or the diff);
- each field must have its exact type (an integer is not a string of digits nor a
  boolean), as pydantic checks it in strict mode against the `TypedDict`s below;
  request and response bodies are checked in the form vcrpy plays (after
  `graph.replay.format.deserialize`): each request body a JSON object, each response
  body `{"string": text}`;
- `metadata.mandapi_replay.exchanges` must pair one to one with the interactions.

Fields a replay never reads (`outcome.stop_reason`, a message's own fields) are not
checked beyond being JSON.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from graph.text import escape_controls

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "check_cassette",
    "parse_json",
]

MAX_BYTES = 64 * 1024 * 1024
"""Longest recording read (bytes); a long compacted thread is well under 1 MB."""
MAX_DEPTH = 100
"""Deepest JSON nesting accepted (arrays and objects); requests nest about 10 deep."""
_MAX_ERRORS = 5
"""Bad fields named in one refusal; the rest are counted."""

_Count = Annotated[int, Field(ge=0)]
_One = Annotated[int, Field(ge=1, le=1)]
"""The integer 1 (a `Literal[1]` would also take `true`, which equals 1 in Python)."""
_Positive = Annotated[int, Field(ge=1)]
_Headers = dict[str, Annotated[list[str], Field(min_length=1)]]
_STRICT = ConfigDict(strict=True, extra="forbid")
_OPEN = ConfigDict(strict=True, extra="allow")


class _Request(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]  # vcrpy's Request(**fields): no other key
    method: Literal["POST"]
    uri: str
    body: str
    headers: _Headers


class _Status(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    code: Annotated[int, Field(ge=100, le=599)]
    message: str


class _Body(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    string: str


class _Response(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    status: _Status
    headers: _Headers
    body: _Body


class _Interaction(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    request: _Request
    response: _Response


class _Thread(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]
    thread_id: str
    task: str
    model: str
    max_attempts: _Positive
    context_tokens: _Positive
    max_tokens: NotRequired[_Positive | None]
    keep_checkpoints: NotRequired[_Positive | None]
    workspace: NotRequired[str | None]
    allow_writes: NotRequired[str | None]


class _Decision(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]
    attempt: _Positive
    tool_call_id: str
    decision: Literal["approve", "reject"]
    reason: str | None


_Exchange = TypedDict("_Exchange", {  # functional form: `raise` is a keyword
    "attempt": _Positive, "outcome": str | None,
    "raise": NotRequired[Literal["timeout", "connection"]]})
_Exchange.__pydantic_config__ = _OPEN  # type: ignore[attr-defined]


class _Outcome(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]
    status: str
    attempts: _Count
    answer: str | None
    usage: dict[str, int] | None


class _Meta(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]
    format: _One
    thread: _Thread
    decisions: NotRequired[list[_Decision]]
    exchanges: list[_Exchange]
    outcome: _Outcome


class _Metadata(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]
    mandapi_replay: _Meta


class _Cassette(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]
    version: _One
    interactions: list[_Interaction]
    metadata: _Metadata


_CASSETTE = TypeAdapter(_Cassette)


def parse_json(text: str) -> Any:
    r"""`text` as JSON; refused when too long, too deep, or not Unicode text.

    Refused: over `MAX_BYTES`, nested over `MAX_DEPTH`, or holding a lone surrogate
    (a JSON escape such as `"\ud800"`, which vcrpy and httpx cannot encode).

    Raises:
        ValueError: Not JSON, too long, too deep, or not Unicode (the message says which).
    """
    if len(text) > MAX_BYTES:
        raise ValueError(f"longer than {MAX_BYTES} characters")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH}") from None
    stack = [(data, 1)]
    while stack:  # iterative: a deep value must not recurse here either
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH}")
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack += [(item, depth + 1) for item in items if isinstance(item, (dict, list))]
    try:  # a JSON escape can spell a lone surrogate, which no request or reply can carry
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff): not Unicode text") from None
    return data


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "the file"


def check_cassette(data: Any) -> list[str]:
    """What is wrong with a deserialized recording (`graph.replay.format.deserialize`).

    Returns:
        Lines `path: problem`, at most `_MAX_ERRORS` and a count of the rest;
        empty when `data` has the shape `graph.replay export` writes. Control
        characters (from an edited field name) are escaped.
    """
    meta = data.get("metadata") if isinstance(data, dict) else None
    meta = meta.get("mandapi_replay") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and meta.get("format", 1) != 1:
        return [f"format {escape_controls(repr(meta['format']))[:40]}; this version reads 1"]
    try:
        _CASSETTE.validate_python(data)
    except ValidationError as exc:
        errors = [f"{_path(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
        more = len(errors) - _MAX_ERRORS
        return [escape_controls(line) for line in errors[:_MAX_ERRORS]] + (
            [f"and {more} more"] if more > 0 else [])
    problems = []
    for index, item in enumerate(data["interactions"]):
        try:
            body = json.loads(item["request"]["body"])
        except ValueError:
            body = None
        if not isinstance(body, dict):
            problems.append(f"interactions[{index}].request.body: not a JSON object")
    exchanges, items = data["metadata"]["mandapi_replay"]["exchanges"], data["interactions"]
    if len(exchanges) != len(items):
        problems.append(f"metadata.mandapi_replay.exchanges: {len(exchanges)} entries for "
                        f"{len(items)} interactions (one each)")
    return problems[:_MAX_ERRORS]
