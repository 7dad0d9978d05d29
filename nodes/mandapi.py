"""The MandAPI chat-completions client (OpenAI-compatible), over an injected httpx client.

One `complete` call is one HTTP request: no retries here (the injected client is built
with `retries=0`, see `graph.models`), and every failure becomes a
`ModelRequestError` whose message names the endpoint and status, never the headers or
the API key (INVARIANTS I3, I9).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from nodes.context import ModelReply, Usage
from nodes.errors import ModelRequestError
from nodes.mandapi_defaults import DEFAULT_BASE_URL


def parse_reply(payload: Any) -> ModelReply:
    """Checks an OpenAI-style chat-completions answer and extracts the assistant message.

    Args:
        payload: The decoded JSON body.

    Returns:
        The reply with `message` reduced to the wire keys (`role`, `content`,
        `tool_calls` when present) and `usage` (zeros when absent).

    Raises:
        ModelRequestError: `bad_response` when the shape is wrong: no
            `choices[0].message`, content that is not text, or malformed tool calls.
    """

    def bad(why: str) -> ModelRequestError:
        return ModelRequestError("bad_response", f"unusable chat-completions answer: {why}")

    if not isinstance(payload, dict):
        raise bad("body is not a JSON object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no choices")
    raw = choices[0].get("message")
    if not isinstance(raw, dict):
        raise bad("choices[0] has no message")
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        raise bad("message content is not text")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = raw.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise bad("tool_calls is not a list")
        clean = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if (
                not isinstance(function, dict)
                or not isinstance(call.get("id"), str)
                or not call["id"]
                or not isinstance(function.get("name"), str)
                or not isinstance(function.get("arguments", ""), str)
            ):
                raise bad("malformed tool call")
            clean.append(
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": function["name"], "arguments": function.get("arguments", "")},
                }
            )
        message["tool_calls"] = clean
    raw_usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    usage = Usage(
        prompt_tokens=_int(raw_usage.get("prompt_tokens")),
        completion_tokens=_int(raw_usage.get("completion_tokens")),
        total_tokens=_int(raw_usage.get("total_tokens")),
    )
    return ModelReply(message=message, usage=usage)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class MandApiModel:
    """Sends chat-completions requests to MandAPI.

    Args:
        client: The httpx client to send with (its timeout and transport apply; tests
            pass one built on `httpx.MockTransport`).
        api_key: Sent as `Authorization: Bearer ...`; kept only in memory.
        model_id: The `model` field of each request.
        base_url: Requests go to `{base_url}/chat/completions`.
    """

    def __init__(
        self, client: httpx.Client, *, api_key: str, model_id: str, base_url: str = DEFAULT_BASE_URL
    ) -> None:
        self._client = client
        self._api_key = api_key
        self.model_id = model_id
        self.url = base_url.rstrip("/") + "/chat/completions"

    def __repr__(self) -> str:
        return f"MandApiModel(model_id={self.model_id!r}, url={self.url!r})"

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Sends one request and returns the parsed reply.

        Raises:
            ModelRequestError: `timeout`, `connection`, `http_status` (any non-2xx)
                or `bad_response` (unparsable body). Never retried here.
        """
        body = {"model": self.model_id, "messages": messages, "tools": tools}
        try:
            response = self._client.post(
                self.url, json=body, headers={"Authorization": f"Bearer {self._api_key}"}
            )
        except httpx.TimeoutException as exc:
            raise ModelRequestError(
                "timeout", f"request to {self.url} timed out ({type(exc).__name__})"
            ) from None
        except httpx.HTTPError as exc:
            raise ModelRequestError(
                "connection", f"request to {self.url} failed ({type(exc).__name__})"
            ) from None
        if not response.is_success:
            raise ModelRequestError(
                "http_status", f"{self.url} answered HTTP {response.status_code}"
            )
        try:
            payload = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ModelRequestError(
                "bad_response", f"{self.url} answered with a body that is not JSON"
            ) from None
        return parse_reply(payload)
