"""The recording file of `graph.replay`: a vcrpy cassette with the thread beside it.

A recording is a vcrpy cassette (format version 1: `interactions`, each a `request`
as sent and a `response` as received) in JSON, plus one entry in the cassette's
`metadata`, `mandapi_replay`, holding what an HTTP cassette cannot say:

- `thread`: the thread's identity (task, model, limits, folders), to create it anew;
- `decisions`: the people's decisions on paused write calls, by turn and call id;
- `exchanges`: one entry per interaction: its attempt number, its outcome and, for a
  request that got no answer (timeout, connection error, a process killed mid-request),
  `raise`: the httpx error to raise instead of the placeholder response vcrpy needs;
- `outcome`: how the recorded thread stood (status, attempts, answer, usage).

Bodies that are JSON are written as JSON values (`{"json": ...}`) instead of one
escaped string, so a changed prompt or tool shows as a readable diff in review; this
module's `serialize` / `deserialize` are a vcrpy serializer (`VCR.register_serializer`)
that converts them back, so vcrpy plays the file unchanged. Nothing here imports vcrpy.
Recordings never hold a header other than `Content-Type` (no `Authorization`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph.errors import UsageError
from graph.output_file import write_atomic
from graph.replay.check import MAX_BYTES, check_cassette, parse_json

__all__ = [
    "FORMAT",
    "META_KEY",
    "NO_ANSWER",
    "RAISES",
    "Recording",
    "deserialize",
    "encode_json",
    "interaction",
    "json_response",
    "load_recording",
    "serialize",
    "write_recording",
]

FORMAT = 1
"""Version of the `mandapi_replay` metadata; a newer one is refused."""
META_KEY = "mandapi_replay"
RAISES = ("timeout", "connection")
"""Errors an exchange may raise instead of answering."""
NO_ANSWER = {"status": {"code": 599, "message": "No Response"}, "headers": {}, "body": {"string": ""}}
"""The placeholder response of an exchange that raises (vcrpy needs one per request)."""
_JSON_HEADERS = {"Content-Type": ["application/json"]}


def encode_json(value: Any) -> str:
    """JSON text as httpx sends a `json=` body (compact, UTF-8 kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _as_value(body: Any) -> Any:
    """`{"json": value}` when `body` (text or bytes) is JSON, else the body unchanged."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if not isinstance(text, str):
        return body
    try:
        return {"json": json.loads(text)}
    except ValueError:
        return text


def serialize(cassette: dict[str, Any]) -> str:
    """As a vcrpy serializer: the cassette as JSON text, JSON bodies written as values."""
    out = dict(cassette)
    out["interactions"] = []
    for item in cassette.get("interactions", []):
        request, response = dict(item["request"]), dict(item["response"])
        request["body"] = _as_value(request.get("body"))
        body = response.get("body") or {}
        if "string" in body:
            value = _as_value(body["string"])
            response["body"] = value if isinstance(value, dict) else {"string": value}
        out["interactions"].append({"request": request, "response": response})
    return json.dumps(out, ensure_ascii=False, indent=1) + "\n"


def deserialize(text: str) -> Any:
    """As a vcrpy serializer: the cassette dict with JSON bodies turned back into text.

    Only well-shaped bodies are converted, so a damaged file comes back for
    `graph.replay.check.check_cassette` to name what is wrong.

    Raises:
        ValueError: Not JSON, or too long or too deep (`graph.replay.check.parse_json`).
    """
    data = parse_json(text)
    items = data.get("interactions") if isinstance(data, dict) else None
    for item in items if isinstance(items, list) else []:
        request = item.get("request") if isinstance(item, dict) else None
        response = item.get("response") if isinstance(item, dict) else None
        body = request.get("body") if isinstance(request, dict) else None
        if isinstance(body, dict) and "json" in body:
            request["body"] = encode_json(body["json"])  # type: ignore[index]
        response_body = response.get("body") if isinstance(response, dict) else None
        if isinstance(response_body, dict) and "json" in response_body:
            response["body"] = {"string": encode_json(response_body["json"])}  # type: ignore[index]
    return data


def interaction(uri: str, request_body: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """One cassette interaction: a POST of `request_body` to `uri` and its `response`."""
    return {"request": {"method": "POST", "uri": uri, "body": encode_json(request_body),
                        "headers": dict(_JSON_HEADERS)},
            "response": response}


def json_response(status: int, payload: Any, reason: str = "OK") -> dict[str, Any]:
    """A cassette response with a JSON body."""
    return {"status": {"code": status, "message": reason}, "headers": dict(_JSON_HEADERS),
            "body": {"string": encode_json(payload)}}


@dataclass(frozen=True)
class Recording:
    """A loaded recording (see the module doc).

    Attributes:
        path: Where it was read from.
        requests: Each interaction's request body (parsed JSON), in order.
        uris: Each interaction's URI.
        meta: The `mandapi_replay` metadata.
    """

    path: Path
    requests: list[dict[str, Any]]
    uris: list[str]
    meta: dict[str, Any]

    @property
    def thread(self) -> dict[str, Any]:
        """The recorded thread's identity (`task`, `model`, limits, folders)."""
        return self.meta["thread"]

    @property
    def exchanges(self) -> list[dict[str, Any]]:
        """One entry per interaction: `attempt`, `outcome`, and `raise` when it got no answer."""
        return self.meta["exchanges"]

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """Decisions on write calls: `attempt`, `tool_call_id`, `decision`, `reason`."""
        return self.meta.get("decisions", [])

    @property
    def outcome(self) -> dict[str, Any]:
        """How the recorded thread stood: `status`, `attempts`, `answer`, `usage`."""
        return self.meta["outcome"]


def _refused(path: Path, why: str) -> UsageError:
    return UsageError(f"{path}: not a mandapi-resume recording: {why}")


def load_recording(path: str | Path) -> Recording:
    """Reads and checks a recording written by `graph.replay export`.

    The whole file is checked here, once, before any graph runs
    (`graph.replay.check`): every field's presence and exact type, the size and
    nesting of the JSON, and that the exchanges pair with the interactions.

    Raises:
        UsageError: The file is missing, is not UTF-8 JSON, or is not a recording of
            this format (the message names each bad field by its path).
    """
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as file:
            text = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the recording {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise _refused(path, "not UTF-8 text") from None
    try:
        data = deserialize(text)
    except ValueError as exc:  # json.JSONDecodeError, too long or deep, NaN in a body
        raise _refused(path, f"not a JSON cassette ({exc})") from None
    problems = check_cassette(data)
    if problems:
        raise _refused(path, "; ".join(problems))
    items, meta = data["interactions"], data["metadata"][META_KEY]
    requests = [json.loads(item["request"]["body"]) for item in items]
    return Recording(path, requests, [item["request"]["uri"] for item in items], meta)


def write_recording(path: str | Path, cassette: dict[str, Any], flag: str = "-o") -> None:
    """Writes `cassette` to `path` atomically (temporary file, fsync, rename), mode 0600.

    A recording holds the conversation (private, like the checkpoint), so it is created
    readable by its owner only.

    Raises:
        UsageError: `path` is not a regular file (`graph.output_file.check_output_path`),
            or its folder does not exist or cannot be written.
    """
    write_atomic(path, serialize(cassette), flag, private=True)
