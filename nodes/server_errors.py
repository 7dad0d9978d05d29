"""A server's error answer, read into one safe line, and whether a rerun could fix it.

An HTTP error from the model service says more than its status: "The model `x` does
not exist", "maximum context length exceeded", "invalid API key". `http_error` keeps
that message for people (the key never, control characters never, the length capped)
and decides whether the thread can go on: an error no rerun can fix (the model does
not exist, the request is invalid) stops the thread (`StopReason`); the others (key,
permission, rate limit, server failure) leave it `ready` with a hint to fix it first.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from typing import Any

from nodes.errors import ModelRequestError, RequestErrorCode, StopReason
from nodes.redaction import redact

MAX_ERROR_BODY_BYTES = 16 * 1024
"""Most bytes of an error answer read for its message; the rest is never read."""
MAX_MESSAGE_CHARS = 300
"""Longest server message kept (characters); a longer one is cut with `…`."""
_KEY_WINDOW = 6
"""A word of the message sharing this many consecutive characters with the key is hidden."""

_HINTS = {
    StopReason.MODEL_NOT_FOUND: "no rerun can fix this: a thread's model is fixed when it is "
                                "created; start a new thread id with an existing --model",
    StopReason.INVALID_REQUEST: "no rerun can fix this: the thread would send the same request "
                                "again; start a new thread id (for example with a smaller "
                                "--context-tokens or another --model); if a gateway's "
                                "configuration caused it (a key, its database), fix that and "
                                "run once with --reopen",
    StopReason.CONTENT_FILTER: "no rerun can fix this: the thread would send the same "
                               "conversation again; start a new thread id with a reworded task",
}
"""What to do about an error that stops the thread, by its stop reason."""


def stop_hint(stop_reason: str | None) -> str | None:
    """What to do about a thread stopped with `stop_reason`, or None for other reasons."""
    try:
        return _HINTS[StopReason(stop_reason or "")]
    except ValueError:  # budget, token_cap, context_limit, None: they say it themselves
        return None


def _retry_hint(status: int) -> str:
    if status in (401, 403):
        return "check MANDAPI_API_KEY and that it may use this model, then run again"
    if status == 404:
        return "check MANDAPI_BASE_URL (the endpoint, /v1 included) and the model id, then run again"
    if status == 429:
        return "rate limited or out of quota: wait, then run again"
    if status >= 500:
        return "the server failed: run again later"
    return "run again once it is fixed"


def sanitize(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` as one printable line without any of `secrets`, at most `MAX_MESSAGE_CHARS`.

    Control and format characters (newlines, escapes, bidirectional overrides) become
    spaces and runs of spaces one space. Each secret is replaced by `***`, and so is any
    word sharing `_KEY_WINDOW` consecutive characters with one (an echoed, partly masked
    key). A message that spells a secret once its spaces, control and format characters
    (zero-width spaces) are removed (`MRKzq 7Xy9P\u200bw3Lk2...`) is replaced whole by
    `***`: only such a message changes, since normal text never joins up into the key.
    """
    text = "".join(" " if unicodedata.category(c).startswith(("C", "Z")) else c for c in text)
    text = redact(text, secrets, "***")
    joined = text.replace(" ", "")
    if any(secret and secret in joined for secret in secrets):
        return "***"
    words = text.split()
    for secret in secrets:
        windows = {secret[i:i + _KEY_WINDOW] for i in range(len(secret) - _KEY_WINDOW + 1)}
        words = ["***" if any(w in word for w in windows) else word for word in words]
    text = " ".join(words)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 1] + "…"


class _PageText(HTMLParser):
    """The visible text of an HTML error page (a proxy's or a web server's 404)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self._hidden += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("script", "style") and self._hidden > 0

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def _page_text(html: str) -> str:
    """The text of an HTML page, tags, scripts and styles left out."""
    parser = _PageText()
    parser.feed(html)
    parser.close()
    return " ".join(parser.parts)


def _fields(body: bytes) -> tuple[str, str]:
    """The message and the code (or type) an error body gives, as raw text ('' if none).

    Understands OpenAI's `{"error": {"message", "code", "type"}}`, `{"error": "text"}`,
    a top-level `message`/`code`/`type` (vLLM) and `{"detail": "text"}`; a body that is
    not JSON counts as its text (an HTML page as its visible text).
    """
    text = body.decode("utf-8", errors="replace")
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError):
        return (_page_text(text) if text.lstrip().startswith("<") else text), ""
    if isinstance(data, Mapping) and isinstance(data.get("error"), Mapping):
        data = data["error"]
    if not isinstance(data, Mapping):
        return "", ""
    message = next((v for k in ("message", "error", "detail") if isinstance(v := data.get(k), str)),
                   "")
    code = " ".join(str(data.get(k)) for k in ("code", "type") if isinstance(data.get(k), str | int))
    return message, code


def _stop_reason(status: int, message: str, code: str) -> StopReason | None:
    """Whether a rerun could fix the error; see the module doc."""
    lowered, code = message.lower(), code.lower()
    if status == 404 and ("model_not_found" in code or "model" in lowered and any(
            words in lowered for words in ("does not exist", "not exist", "not found"))):
        return StopReason.MODEL_NOT_FOUND
    if status in (400, 422) and not any(word in lowered + " " + code
                                        for word in ("api key", "api_key", "apikey")):
        return StopReason.INVALID_REQUEST
    return None


def error_body_of(message: str) -> tuple[int, dict[str, Any]] | None:
    """The status and JSON body that `http_error` reads back as the error `message` says.

    For a recording (`graph.replay.export`): the attempt log keeps an HTTP error's
    message (`{url} answered HTTP {status}[: {server's message}] ({hint})`), not the
    server's body. Answered with that whole line, a replay read the hint's own words
    ("... the model id ...") beside a plain "Not Found" as a model that does not exist,
    and stopped a thread the live run had left `ready`. The body holds the server's
    message alone, and `model_not_found` as its code when the line's hint says the live
    error stopped the thread for that reason (its message may not have said so).

    Returns:
        `(status, {"error": {"message": ..., ["code": "model_not_found"]}})`, or None
        when `message` is not such a line.
    """
    head, sep, rest = message.partition(" answered HTTP ")
    if not sep or len(rest) < 3 or not rest[:3].isdigit():
        return None
    status, after = int(rest[:3]), rest[3:]
    hints = [*_HINTS.values(), _retry_hint(status)]
    hint = next((h for h in hints if after.endswith(f" ({h})")), None)
    if hint is None:
        return None
    said = after[: -len(f" ({hint})")].removeprefix(": ")
    error: dict[str, Any] = {"message": said}
    if hint == _HINTS[StopReason.MODEL_NOT_FOUND]:
        error["code"] = "model_not_found"
    return status, {"error": error}


def http_error(url: str, status: int, body: bytes, secrets: Sequence[str]) -> ModelRequestError:
    """The `http_status` error of a non-2xx answer, with the server's message and a hint.

    Args:
        url: The endpoint (named in the message).
        status: The HTTP status.
        body: At most `MAX_ERROR_BODY_BYTES` of the answer's body.
        secrets: Text never to repeat (the API key).

    Returns:
        The error; its `stop_reason` is set when no rerun can fix it (see the module doc).
    """
    message, code = _fields(body[:MAX_ERROR_BODY_BYTES])
    stop_reason = _stop_reason(status, message, code)
    said = sanitize(message, secrets)
    hint = stop_hint(stop_reason) or _retry_hint(status)
    return ModelRequestError(
        RequestErrorCode.HTTP_STATUS,
        f"{url} answered HTTP {status}" + (f": {said}" if said else "") + f" ({hint})",
        stop_reason=stop_reason)
