"""The MandAPI chat-completions client (OpenAI-compatible), over an injected httpx client.

One `complete` call is one HTTP request: no retries here (the injected client is built
with `retries=0`, see `graph.step.models`), and every failure becomes a
`ModelRequestError` whose message names the endpoint and status (with the server's own
message, sanitized: `nodes.server_errors`), never the headers or the API key
(INVARIANTS I3, I9).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from nodes.context import ModelReply
from nodes.errors import ModelRequestError, RequestErrorCode
from nodes.mandapi_defaults import DEFAULT_BASE_URL
from nodes.redaction import redact_value
from nodes.replies import MAX_REPLY_BYTES, parse_reply
from nodes.server_errors import MAX_ERROR_BODY_BYTES, http_error

__all__ = ["MandApiModel", "parse_reply"]


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

    @property
    def secrets(self) -> tuple[str, ...]:
        """The API key: text no result of this thread may store (`nodes.redaction`)."""
        return (self._api_key,)

    def __repr__(self) -> str:
        return f"MandApiModel(model_id={self.model_id!r}, url={self.url!r})"

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Sends one request and returns the parsed reply.

        Raises:
            ModelRequestError: `timeout`, `connection`, `http_status` (any non-2xx,
                with the server's message; `stop_reason` set when no rerun can fix it:
                `nodes.server_errors`) or `bad_response` (a body that is not JSON,
                larger than `MAX_REPLY_BYTES`, or fails `parse_reply`). Never retried here.

        The API key never comes back in the reply: every string of the answer is passed
        through `nodes.redaction.redact_value` before it is checked (INVARIANTS I9).
        """
        body = {"model": self.model_id, "messages": messages, "tools": tools}
        try:
            with self._client.stream(
                "POST", self.url, json=body, headers={"Authorization": f"Bearer {self._api_key}"}
            ) as response:
                if not response.is_success:
                    raise http_error(self.url, response.status_code, _error_body(response),
                                     (self._api_key,))
                data = self._read_capped(response)
        except httpx.TimeoutException as exc:
            raise ModelRequestError(
                RequestErrorCode.TIMEOUT, f"request to {self.url} timed out ({type(exc).__name__})"
            ) from None
        except httpx.HTTPError as exc:
            raise ModelRequestError(
                RequestErrorCode.CONNECTION, f"request to {self.url} failed ({type(exc).__name__})"
            ) from None
        try:
            # The key is removed from every string before anything is kept (I9).
            payload = redact_value(json.loads(data), (self._api_key,))
        except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep, huge numbers
            raise ModelRequestError(
                RequestErrorCode.BAD_RESPONSE, f"{self.url} answered with a body that is not JSON"
            ) from None
        return parse_reply(payload)

    def _read_capped(self, response: httpx.Response) -> bytes:
        """The body, read in pieces and refused past `MAX_REPLY_BYTES` (never held whole).

        Raises:
            ModelRequestError: `bad_response` when the body is larger than the cap.
        """
        too_big = ModelRequestError(
            RequestErrorCode.BAD_RESPONSE, f"{self.url} answered with more than {MAX_REPLY_BYTES} bytes")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
            raise too_big
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)


def _error_body(response: httpx.Response) -> bytes:
    """The first `MAX_ERROR_BODY_BYTES` of an error answer; empty when it cannot be read."""
    chunks, size = [], 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= MAX_ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:  # the status says enough; the body is a courtesy
        pass
    return b"".join(chunks)[:MAX_ERROR_BODY_BYTES]
