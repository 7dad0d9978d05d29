r"""Removing the API key from whatever the model service sends back (INVARIANTS I9).

A server, or a model told to, can echo the key it was sent: in an error message, in
the reply's content, in a tool call's id, name or arguments. Everything kept from a
reply is stored (checkpoint, attempt log), printed and exported, so the key is
replaced where a reply enters: `redact_value` on the decoded body before it is
checked (`nodes.mandapi`), `redact` on an error message (`nodes.server_errors`). The
other texts that enter stored state come from the user's machine: a tool's result (a
`.env` file read by `read_file`) goes through `stored_text` in the **tools** node, with
the secrets the thread's model holds (`secrets_of`); a task holding the key is refused
before the thread is created (`graph.settings`).

Only the key's exact characters are replaced, however short the key (a wrongly short
key mangles some text; a kept key would leak). A string that is itself JSON text (a
tool call's arguments) may spell the key with escapes (`\u0073k-...`); such a string
is decoded, redacted and written back as JSON, with every key of every object kept in
order, duplicates too (so `nodes.arguments` still refuses an ambiguous call).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

REDACTED = "[redacted: API key]"
"""What replaces the API key in a reply's text."""
MIN_KEY_CHARS = 16
"""The shortest API key `--live` accepts (`graph.settings.resolve`, exit 2): no real key is
shorter, and a shorter one would be replaced inside ordinary text (a path, a word) wherever
it happens to occur, so redaction could not be sure of it (issue 30)."""


def key_to_scrub(key: str | None) -> str | None:
    """The API key every output must not show, or None: a key shorter than `MIN_KEY_CHARS`.

    Such a key is refused for `--live`, so it is never sent and no server can echo it;
    an offline run with one set in the environment leaves text as it is instead of
    replacing, say, every `sk-x` in a path.
    """
    return key if key and len(key) >= MIN_KEY_CHARS else None


def redact(text: str, secrets: Sequence[str], marker: str = REDACTED) -> str:
    """`text` with every occurrence of each non-empty secret replaced by `marker`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, marker)
    return text


def redact_continued(before: str, after: str, secrets: Sequence[str], marker: str = REDACTED) -> str:
    """`after` as it may be stored after `before`: no secret spelled across the two.

    For a text that comes in parts (a reply continued after `finish_reason` `length`):
    each part was redacted on its own, so a secret split between the end of `before`
    and the start of `after` is in neither. The start of `after` that completes such a
    secret is replaced by `marker` (the longest completion, when several secrets end
    there), and `after` is redacted as a whole. `before` keeps its end: it was stored
    already, and alone it is not the secret.
    """
    cut = 0
    for secret in secrets:
        for split in range(1, len(secret)):
            if before.endswith(secret[:split]) and after.startswith(secret[split:]):
                cut = max(cut, len(secret) - split)
    return marker + redact(after[cut:], secrets, marker) if cut else redact(after, secrets, marker)


_SURROGATE = re.compile("[\ud800-\udfff]")


def secrets_of(model: object) -> tuple[str, ...]:
    """The texts `model` (a `ChatModel`) holds that must never be stored: its `secrets`.

    `nodes.mandapi.MandApiModel` and `nodes.demo_model.OfflineDemoModel` carry the
    configured API key there; a model without the attribute (a test's fake) holds none.
    """
    found = getattr(model, "secrets", ())
    return tuple(s for s in found if isinstance(s, str) and s) if isinstance(found, tuple) else ()


def stored_text(text: str, secrets: Sequence[str]) -> str:
    """`text` as it may be stored, logged and sent: valid Unicode without any secret.

    Each lone surrogate (a file name that is not UTF-8, an escape no text can hold) becomes
    U+FFFD, so no checkpoint or attempt-log write can fail on it (INVARIANTS I13), and each
    secret becomes `REDACTED` (I9).
    """
    return redact(_SURROGATE.sub("\ufffd", text), secrets)


class _Pairs(list[tuple[str, Any]]):
    """A JSON object decoded as its pairs, in order and with any duplicate key."""


def _dump(value: Any, secrets: Sequence[str]) -> str:
    """`value` (decoded with `_Pairs`) as JSON text, each string redacted."""
    if isinstance(value, _Pairs):
        return "{" + ",".join(f"{_dump(key, secrets)}:{_dump(item, secrets)}"
                              for key, item in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(item, secrets) for item in value) + "]"
    if isinstance(value, str):
        value = redact(value, secrets)
    return json.dumps(value)  # ASCII escapes keep lone surrogates as they were sent


_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescaped(text: str) -> str:
    """`text` with its JSON escapes decoded (what a JSON reader would make of them)."""
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        return chr(int(code[1:], 16)) if code[0] == "u" else _SIMPLE.get(code, code)
    return _ESCAPE.sub(one, text)


def _redact_string(text: str, secrets: Sequence[str]) -> str:
    """`text` redacted; JSON text spelling a secret with escapes is rewritten too.

    Text that spells a secret with escapes but is not JSON is kept: nothing here
    decodes it. JSON too deeply nested to rewrite is replaced whole by `REDACTED`.
    """
    text = redact(text, secrets)
    if "\\" not in text or not any(s and s in _unescaped(text) for s in secrets):
        return text
    try:
        return _dump(json.loads(text, object_pairs_hook=_Pairs), secrets)
    except ValueError:
        return text
    except RecursionError:
        return REDACTED


def redact_value(value: Any, secrets: Sequence[str]) -> Any:
    """A decoded JSON value with each secret removed from every string in it.

    Args:
        value: What `json.loads` returned (dicts, lists, strings, numbers, ...); its
            dicts and lists are changed in place, without recursion (any depth).
        secrets: The texts to remove (the API key); empty ones are ignored.

    Returns:
        `value`, every string in it, dict keys included, passed through `redact` (and
        JSON text inside a string decoded and redacted, see the module doc). Two keys
        of one dict that become equal keep the later value, like `json.loads`.
    """
    def clean(item: Any) -> Any:
        if isinstance(item, str):
            return _redact_string(item, secrets)
        if isinstance(item, dict | list):
            pending.append(item)
        return item

    pending: list[Any] = []
    value = clean(value)
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            node[:] = [clean(item) for item in node]
        else:
            items = list(node.items())
            node.clear()
            node.update((clean(key), clean(item)) for key, item in items)
    return value
