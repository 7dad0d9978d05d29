"""Reading a chat-completions answer into a reply that can always be stored.

A paid reply that the state, the serializer (msgpack) or a database cannot hold must
be refused *before* anything is stored: otherwise the step fails after its request
was counted, nothing is kept, and every rerun pays again (INVARIANTS I11, I13). So
`parse_reply` checks every value it keeps: types, integer ranges, text that is valid
UTF-8 without U+0000 (PostgreSQL text cannot hold it), and sizes. A failure is a
`bad_response`; when the answer's usage itself was readable, the error carries it so
the tokens still count toward the thread's cap.

Real OpenAI-compatible servers (llama.cpp, vLLM, Ollama, gateways) differ from the
reference in a few known ways. Each difference this module accepts is one named rule
below (`TOLERANCES`), with the public report it comes from; anything else that is still
malformed stays a `bad_response` naming what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from nodes.arguments import ArgumentsError, canonical, parse_arguments
from nodes.context import ModelReply
from nodes.errors import ModelRequestError, RequestErrorCode
from nodes.redaction import redact_value
from nodes.state import Usage

MAX_REPLY_BYTES = 2 * 1024 * 1024
"""Largest HTTP body read from the model service (bytes, after content decoding)."""
MAX_REPLY_CHARS = 200_000
"""Largest text of one reply: content, tool-call ids, names and arguments together."""
MAX_TOOL_CALLS = 64
"""Most tool calls accepted in one reply."""
MAX_NAME_CHARS = 256
"""Longest tool-call id or tool name (characters)."""
MAX_TOKENS_PER_REPLY = 10**12
"""Largest token count accepted in one reply's usage, per field. With at most 10^6
attempts per thread, a thread's totals stay below 2^63 (msgpack, SQLite and
PostgreSQL integers) and below 2^53 per reply (exact in JSON readers)."""

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _bad(why: str, usage: Usage | None = None) -> ModelRequestError:
    return ModelRequestError(RequestErrorCode.BAD_RESPONSE, f"unusable chat-completions answer: {why}",
                             usage=usage)


def _honest_count(value: Any) -> int | None:
    """A reported token count as the largest count it honestly stands for, or None.

    An integer in range is itself. A count the server sent but no store can keep is
    read so that it never under-counts: past `MAX_TOKENS_PER_REPLY` it is that cap,
    a finite fraction is rounded up, a negative number is 0. Anything that is not a
    number (text, a boolean, an object) stands for no count: None.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        value = MAX_TOKENS_PER_REPLY if math.isinf(value) else math.ceil(value)
    return min(max(value, 0), MAX_TOKENS_PER_REPLY)


def read_usage(raw: Any) -> Usage:
    """The usage of an answer, checked.

    The rule for a usage that is wrong (INVARIANTS I11: every paid reply's usage counts,
    never less than it reported): the reply is refused as a `bad_response`, and the
    error carries the largest honest count of what was reported (`_honest_count` per
    field, then the total rule below), so the tokens still count toward the thread's
    cap. A huge count that no store can keep counts as `MAX_TOKENS_PER_REPLY`, which
    stops any thread with a token cap; it is never dropped.

    Args:
        raw: The answer's `usage` value (None or absent means not reported: zeros).

    Returns:
        The three counts; `total_tokens` is at least the sum of the other two (a
        missing or smaller total is replaced by that sum).

    Raises:
        ModelRequestError: `bad_response` when `usage` is not an object (carrying no
            usage: nothing in it is a count) or a count is not an integer in
            0..`MAX_TOKENS_PER_REPLY` (carrying the honest counts, above).
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise _bad("usage is not an object")
    counts: dict[str, int] = {}
    wrong: list[str] = []
    for key in _USAGE_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            wrong.append(f"usage.{key} is not an integer")
        elif not 0 <= value <= MAX_TOKENS_PER_REPLY:
            wrong.append(f"usage.{key} is outside 0..{MAX_TOKENS_PER_REPLY}")
        honest = _honest_count(value)
        if honest is not None:
            counts[key] = honest
    prompt, completion = counts.get("prompt_tokens", 0), counts.get("completion_tokens", 0)
    # The cap counts the larger of the reported total and the parts, so a total that
    # understates its own parts never lets spend past --max-tokens.
    total = max(counts.get("total_tokens", 0), prompt + completion)
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)
    if wrong:
        raise _bad("; ".join(wrong), usage)
    return usage


def _text(value: Any, where: str, usage: Usage, *, limit: int | None = None) -> str:
    """`value` if it is text every store can hold, else a `bad_response`."""
    if not isinstance(value, str):
        raise _bad(f"{where} is not text", usage)
    if limit is not None and len(value) > limit:
        raise _bad(f"{where} is longer than {limit} characters", usage)
    if "\x00" in value:
        raise _bad(f"{where} holds U+0000, which the database cannot store", usage)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(f"{where} holds a lone surrogate (not valid Unicode text)", usage) from None
    return value

MISSING_ID = ""
"""The id a call keeps between `parse_reply` and `assign_call_ids` when its server gave none."""


def tolerate_missing_id(value: Any) -> Any:
    """Tolerance: a tool call whose `id` is missing, `null` or empty gets one assigned later.

    llama.cpp sends tool calls without an id for some templates (ggml-org/llama.cpp#11992),
    and providers reached through gateways send `"id": ""` (vercel/ai#7834). Such a call
    is kept with `MISSING_ID`; `assign_call_ids` gives it an id once, when the reply is
    stored, and that id is never renamed (INVARIANTS I6). Any other value is returned
    unchanged (and checked as text by the caller).
    """
    return MISSING_ID if value is None or value == "" else value


def tolerate_object_arguments(value: Any) -> Any:
    """Tolerance: `function.arguments` sent as a JSON object, or `null`, instead of text.

    llama.cpp (ggml-org/llama.cpp#20198) and Ollama (ollama/ollama#6155) send the
    arguments as an object; some servers send `null`. An object becomes its canonical
    text (`nodes.arguments.canonical`: exactly what review shows and the approval hash
    covers, INVARIANTS I12); `null` and a missing value mean `{}`. Text is returned
    unchanged (it is parsed strictly when the tool runs).

    Raises:
        ArgumentsError: An object holding text no JSON can carry (a lone surrogate).
    """
    if value is None:
        return "{}"
    if isinstance(value, dict):
        text = canonical(value)
        parse_arguments(text)  # the same strict reading every call gets (surrogates, ...)
        return text
    return value


FINISH_LENGTH = "length"
"""`finish_reason` of a reply cut off by the token limit: never an answer."""
FINISH_CONTENT_FILTER = "content_filter"
"""`finish_reason` of a reply stopped by the server's content filter: stops the thread."""

FinishKind = Literal["length", "content_filter", "by_content"]


def read_finish_reason(raw: Any) -> str | None:
    """`choices[0].finish_reason` as it is kept in the attempt log, or None (unknown).

    Text is kept exactly as sent when a store can hold it (at most `MAX_NAME_CHARS`
    characters, no U+0000, valid Unicode); anything else (absent, `null`, a number,
    unstorable text) reads as unknown, never as a refusal: the content decides then.
    """
    if not isinstance(raw, str) or len(raw) > MAX_NAME_CHARS or "\x00" in raw:
        return None
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return raw


def finish_kind(finish_reason: str | None) -> FinishKind:
    """Tolerance: a `finish_reason` that is missing, `null` or unfamiliar is decided by the content.

    Only two values change what a reply means: `length` (cut off by the token limit:
    agent-zero#1836, cited in issue 29) and `content_filter` (OpenAI API reference). Every
    other value is decided by the message as before: tool calls are calls, text is an
    answer. That covers `stop` and `tool_calls`, `null` or no value (Ollama, gateways),
    `eos` and `eos_token` (llama.cpp, TGI), the legacy `function_call`, and `stop` sent
    with tool calls (llama.cpp, Ollama: ollama/ollama#6155).
    """
    if finish_reason == FINISH_LENGTH:
        return "length"
    if finish_reason == FINISH_CONTENT_FILTER:
        return "content_filter"
    return "by_content"


def cut_calls(message: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Splits a reply cut off by the token limit into what may be kept and the calls cut off.

    A call is cut off when its arguments are empty or not a whole JSON object
    (`nodes.arguments.parse_arguments`): generation stopped inside them. Such a call is
    never executed, so it is not kept. A call whose arguments are whole is kept.

    Returns:
        The message without the calls cut off (no `tool_calls` key when none is left),
        and those calls (wire form).
    """
    kept: list[dict[str, Any]] = []
    cut: list[dict[str, Any]] = []
    for call in message.get("tool_calls") or []:
        try:
            whole = call["function"]["arguments"].strip() != "" and isinstance(
                parse_arguments(call["function"]["arguments"]), dict)
        except ArgumentsError:
            whole = False
        (kept if whole else cut).append(call)
    if not cut:
        return message, []
    out = {key: value for key, value in message.items() if key != "tool_calls"}
    if kept:
        out["tool_calls"] = kept
    return out, cut


TOLERANCES = (tolerate_missing_id, tolerate_object_arguments, finish_kind)
"""Every way a reply may differ from the reference format and still be stored."""


def _larger_of_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An `object_pairs_hook` reading a key given twice so that no count is under-counted.

    Of two numbers the larger is kept, two objects are merged so, else the later value.
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            value = _larger(out[key], value)
        out[key] = value
    return out


def _larger(first: Any, second: Any) -> Any:
    if isinstance(first, dict) and isinstance(second, dict):
        return _larger_of_twice([*first.items(), *second.items()])
    numbers = [v for v in (first, second) if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) == 2:
        return max(numbers, key=lambda v: _honest_count(v) or 0)
    return second


def billed_usage(payload: Any) -> dict[str, Any] | None:
    """The largest honest usage a decoded body reports, or None when it reports none readable.

    For a reply refused before its usage was read (a key given twice), so its tokens
    still count (INVARIANTS I11): `read_usage`'s counts, taken from its error when the
    usage is wrong too.
    """
    if not isinstance(payload, dict):
        return None
    try:
        return dict(read_usage(payload.get("usage")))
    except ModelRequestError as exc:
        return exc.usage


_USAGE_KEY = re.compile(rb'"usage"\s*:\s*\{')
USAGE_SCAN_LIMIT = 64
"""Most `"usage": {` places `usage_anywhere` reads in one body."""


def usage_anywhere(data: bytes) -> dict[str, Any] | None:
    """The largest honest usage of a body that cannot be read whole, or None if it has none.

    A body over `MAX_REPLY_BYTES` (only its first bytes are kept) or nested too deeply for
    Python's JSON reader was paid for all the same (INVARIANTS I11). Each `"usage": {`
    in the bytes (at most `USAGE_SCAN_LIMIT`) is read as a JSON object where it stands,
    and the largest honest count of each field across them is kept (`read_usage`'s rule):
    never less than the server reported where it can be seen, at worst more (a `usage`
    inside a text field counts too: failing closed). A usage past the kept bytes stays
    unseen (issue 31's reservation charges such a reply whole).
    """
    text = data.decode("latin-1")  # one character a byte: positions agree with the bytes
    decoder = json.JSONDecoder(object_pairs_hook=_larger_of_twice)
    found: dict[str, int] = {}
    for match in list(_USAGE_KEY.finditer(data))[:USAGE_SCAN_LIMIT]:
        try:
            raw, _ = decoder.raw_decode(text, match.end() - 1)
        except (ValueError, RecursionError):
            continue
        usage = billed_usage({"usage": raw})
        for key, value in (usage or {}).items():
            found[key] = max(found.get(key, 0), value)
    return found or None


def decode_body(data: bytes, secrets: tuple[str, ...] = ()) -> Any:
    """The reply body as JSON, refusing a key given twice in any object at any depth.

    Python's `json.loads` keeps the last of two equal keys silently; another reader
    keeps the first. An answer with two meanings is not stored (INVARIANTS I12), but it
    was paid for: the refusal carries its usage (`billed_usage`), read so that a count
    given twice counts as the larger (`_larger_of_twice`).

    Args:
        data: The body's bytes.
        secrets: Text a refusal must not show (the API key, `nodes.redaction`).

    Raises:
        ModelRequestError: `bad_response` naming the key given twice.
        ValueError: Not JSON, not UTF-8, or a number past Python's digit limit.
        RecursionError: Nested too deeply.
    """
    def pairs_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _bad(f"the body gives key {redact_value(key, secrets)!r} twice in one "
                           "object (ambiguous)")
            out[key] = value
        return out

    try:
        return json.loads(data, object_pairs_hook=pairs_once)
    except ModelRequestError as exc:
        try:
            exc.usage = billed_usage(json.loads(data, object_pairs_hook=_larger_of_twice))
        except (ValueError, RecursionError):  # the body fails later too: the key twice is said
            exc.usage = None
        raise


def derived_call_id(thread_id: str, attempt: int, index: int, taken: Iterable[str]) -> str:
    """The id given to call `index` of attempt `attempt`'s reply when its server gave none.

    `call_` and 24 hex digits of SHA-256 over the thread, the attempt and the index (and a
    counter, raised until the id is none of `taken`): the same inputs give the same id, and
    it never equals an id in `taken`.

    Args:
        thread_id: The thread the reply belongs to.
        attempt: The attempt number (1-based) that produced the reply.
        index: The call's position in the reply (0-based).
        taken: Ids it must differ from: the reply's other ids and the conversation's.
    """
    used = set(taken)
    salt = 0
    while True:
        seed = json.dumps([thread_id, attempt, index, salt]).encode()
        candidate = "call_" + hashlib.sha256(seed).hexdigest()[:24]
        if candidate not in used:
            return candidate
        salt += 1


def conversation_ids(messages: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every tool-call id and tool-result id a conversation uses."""
    ids: set[str] = set()
    for msg in messages:
        ids.update(str(c.get("id")) for c in msg.get("tool_calls") or [] if isinstance(c, Mapping))
        if msg.get("tool_call_id") is not None:
            ids.add(str(msg["tool_call_id"]))
    return ids


def assign_call_ids(message: dict[str, Any], thread_id: str, attempt: int,
                    earlier: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """`message` with an id for every call that arrived without one (`tolerate_missing_id`).

    Done once, before the reply is stored; ids the server gave are kept as they are.

    Args:
        message: A checked assistant message (`check_message`).
        thread_id: The thread (part of each derived id).
        attempt: The attempt that produced the reply (part of each derived id).
        earlier: The stored conversation; a derived id differs from every id in it.

    Returns:
        A new message when an id was assigned, else `message` itself.
    """
    calls = message.get("tool_calls") or []
    if all(c["id"] != MISSING_ID for c in calls):
        return message
    taken = conversation_ids(earlier) | {c["id"] for c in calls}
    named = []
    for index, call in enumerate(calls):
        if call["id"] == MISSING_ID:
            call = {**call, "id": derived_call_id(thread_id, attempt, index, taken)}
            taken.add(call["id"])
        named.append(call)
    return {**message, "tool_calls": named}


def _tool_calls(raw: Any, usage: Usage) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise _bad("tool_calls is not a list", usage)
    if len(raw) > MAX_TOOL_CALLS:
        raise _bad(f"more than {MAX_TOOL_CALLS} tool calls", usage)
    clean = []
    for index, call in enumerate(raw):
        where = f"tool call {index}"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise _bad(f"malformed tool call: {where} has no function", usage)
        call_id = _text(tolerate_missing_id(call.get("id")), f"{where} id", usage,
                        limit=MAX_NAME_CHARS)
        name = _text(function.get("name"), f"{where} name", usage, limit=MAX_NAME_CHARS)
        try:
            raw_arguments = tolerate_object_arguments(function.get("arguments"))
        except ArgumentsError as exc:
            raise _bad(f"{where} arguments: {exc}", usage) from None
        arguments = _text(raw_arguments, f"{where} arguments", usage)
        if not name:
            raise _bad(f"malformed tool call: {where} has an empty name", usage)
        clean.append({"id": call_id, "type": "function",
                      "function": {"name": name, "arguments": arguments}})
    return clean


def check_message(raw: Any, usage: Usage) -> dict[str, Any]:
    """The assistant message of an answer, reduced to the wire keys and checked.

    Args:
        raw: `choices[0].message` as received.
        usage: The answer's checked usage, attached to any error raised.

    Returns:
        `role`, `content` (str or None) and, when the model asks for tools,
        `tool_calls` (each `id`, `type`, `function.name`, `function.arguments`).

    Raises:
        ModelRequestError: `bad_response` carrying `usage`: a value of the wrong type,
            text that no store can hold, or a reply past the size caps.
    """
    if not isinstance(raw, dict):
        raise _bad("choices[0] has no message", usage)
    content = raw.get("content")
    if content is not None:
        _text(content, "message content", usage)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = raw.get("tool_calls")
    if calls:
        message["tool_calls"] = _tool_calls(calls, usage)
    size = len(content or "") + sum(len(c["id"]) + len(c["function"]["name"])
                                    + len(c["function"]["arguments"])
                                    for c in message.get("tool_calls") or [])
    if size > MAX_REPLY_CHARS:
        raise _bad(f"the reply's text ({size} characters) is over the cap of {MAX_REPLY_CHARS}",
                   usage)
    return message


def check_reply(reply: ModelReply) -> ModelReply:
    """Checks a reply from any chat model (the same rules as `parse_reply`).

    Raises:
        ModelRequestError: `bad_response`; carries the usage when that was valid.
    """
    usage = read_usage(reply.usage)
    return ModelReply(message=check_message(reply.message, usage), usage=usage,
                      finish_reason=read_finish_reason(reply.finish_reason))


def parse_reply(payload: Any) -> ModelReply:
    """Checks an OpenAI-style chat-completions answer and extracts the assistant message.

    Args:
        payload: The decoded JSON body.

    Returns:
        The reply with `message` reduced to the wire keys (`role`, `content`,
        `tool_calls` when present), `usage` (zeros when absent) and `finish_reason`
        (`read_finish_reason`: None when unknown).

    Raises:
        ModelRequestError: `bad_response` when any kept value is wrong: no
            `choices[0].message`, content that is not text, malformed tool calls, an
            unstorable string, an out-of-range token count, or a reply over the caps.
            When only the message is wrong, the error carries the valid usage.
    """
    if not isinstance(payload, dict):
        raise _bad("body is not a JSON object")
    usage = read_usage(payload.get("usage"))
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad("no choices", usage)
    return ModelReply(message=check_message(choices[0].get("message"), usage), usage=usage,
                      finish_reason=read_finish_reason(choices[0].get("finish_reason")))
