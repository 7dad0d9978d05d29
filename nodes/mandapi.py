"""The MandAPI chat-completions client (OpenAI-compatible), over an injected httpx client.

One `complete` call is one HTTP request: no retries here (the injected client is built
with `retries=0`, see `graph.step.models`), bounded as a whole by one deadline
(`_Deadline`: connect to last byte, not per read), and every failure becomes a
`ModelRequestError` whose message names the endpoint and status (with the server's own
message, sanitized: `nodes.server_errors`), never the headers or the API key
(INVARIANTS I3, I9).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx

from nodes.context import ModelReply
from nodes.errors import ModelRequestError, RequestErrorCode
from nodes.mandapi_defaults import DEFAULT_BASE_URL
from nodes.redaction import redact_value
from nodes.replies import MAX_REPLY_BYTES, decode_body, parse_reply, usage_anywhere
from nodes.server_errors import MAX_ERROR_BODY_BYTES, http_error

__all__ = ["MandApiModel", "parse_reply"]


def total_timeout(client: httpx.Client) -> float | None:
    """The client's timeout taken as a total limit: the largest of its four (seconds).

    `graph.step.models` builds the client with `httpx.Timeout(S)`: S for connect, read,
    write and pool alike, so this is S. None when the client sets no timeout at all.
    """
    values = [v for v in (client.timeout.connect, client.timeout.read, client.timeout.write,
                          client.timeout.pool) if v is not None]
    return max(values) if values else None


class _Deadline:
    """One request's total time limit, enforced on its socket from another thread.

    httpx's timeouts apply to each network operation (encode/httpx#1450), so a server
    that sends a byte now and then never trips them. Here a timer fires once the limit
    is over and shuts the request's socket down, which ends a read blocked in any phase
    (headers or body) at once; the reading thread then finds `expired` set. The socket
    is learnt from httpcore's documented `trace` extension when the connection is made
    (`connection.connect_tcp`, `connection.start_tls`). A connection the pool reused
    has no such event: its request is then bounded by the check after each chunk
    (`check`) and the per-read timeout, at most one read timeout late.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.expired = False
        self._finished = False
        self._end = None if seconds is None else time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = None if seconds is None else threading.Timer(seconds, self._expire)
        if self._timer is not None:
            self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """The `trace` callback (httpcore's request extension): keeps the socket of each new connection."""
        if event not in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            if self.expired:  # the connection was made after the limit: end it now
                _shut(sock)

    def finish(self) -> bool:
        """Marks the body read whole, in time; from then on the timer leaves the socket alone.

        Returns:
            False when the limit was over first (the request timed out).
        """
        with self._lock:
            if self.expired or (self._end is not None and time.monotonic() >= self._end):
                self.expired = True
                return False
            self._finished = True
            return True

    def _expire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def check(self) -> None:
        """Marks the limit as over when its time has passed (between chunks)."""
        if self._end is not None and time.monotonic() >= self._end:
            with self._lock:
                self.expired = True


def _shut(sock: socket.socket) -> None:
    """Shuts `sock` down both ways; a blocked read in another thread returns at once.

    `socket.socket.shutdown` is called even for a TLS socket, so the TLS object is left
    to the reading thread (which then fails with a read error).
    """
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


class MandApiModel:
    """Sends chat-completions requests to MandAPI.

    Args:
        client: The httpx client to send with (its timeout and transport apply; tests
            pass one built on `httpx.MockTransport`).
        api_key: Sent as `Authorization: Bearer ...`; kept only in memory.
        model_id: The `model` field of each request.
        base_url: Requests go to `{base_url}/chat/completions`.
        timeout_s: The total limit of one request, connect to last byte (seconds); None
            takes the client's timeout as the total (`total_timeout`).
    """

    def __init__(
        self, client: httpx.Client, *, api_key: str, model_id: str, base_url: str = DEFAULT_BASE_URL,
        timeout_s: float | None = None,
    ) -> None:
        self._client = client
        self.timeout_s = timeout_s if timeout_s is not None else total_timeout(client)
        self._api_key = api_key
        self.model_id = model_id
        self.url = base_url.rstrip("/") + "/chat/completions"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The API key: text no result of this thread may store (`nodes.redaction`)."""
        return (self._api_key,)

    def __repr__(self) -> str:
        return f"MandApiModel(model_id={self.model_id!r}, url={self.url!r})"

    def close(self) -> None:
        """Closes the client and the connections it keeps open; nothing is sent afterwards.

        The step that built the model calls it when it ends (`graph.step.advance`,
        `Database.invocation`). A server that keeps connections alive (LiteLLM's proxy,
        any uvicorn or nginx front) would otherwise hold a socket until the garbage
        collector found the client, with a `ResourceWarning`.
        """
        self._client.close()

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Sends one request and returns the parsed reply.

        Raises:
            ModelRequestError: `timeout` (the whole request, connect to last byte, took
                longer than `timeout_s`, or one network operation timed out),
                `connection`, `http_status` (any non-2xx,
                with the server's message; `stop_reason` set when no rerun can fix it:
                `nodes.server_errors`) or `bad_response` (a body that is not JSON,
                larger than `MAX_REPLY_BYTES`, or fails `parse_reply`). Never retried here.

        The API key never comes back in the reply: every string of the answer is passed
        through `nodes.redaction.redact_value` before it is checked (INVARIANTS I9).
        """
        body = {"model": self.model_id, "messages": messages, "tools": tools}
        deadline = _Deadline(self.timeout_s)
        try:
            with deadline, self._client.stream(
                "POST", self.url, json=body, headers={"Authorization": f"Bearer {self._api_key}"},
                extensions={"trace": deadline.trace},
            ) as response:
                if not response.is_success:
                    raise http_error(self.url, response.status_code, _error_body(response),
                                     (self._api_key,))
                data = self._read_capped(response, deadline)
        except httpx.TimeoutException as exc:
            raise self._timed_out(type(exc).__name__) from None
        except httpx.HTTPError as exc:
            if deadline.expired:  # the socket was shut at the limit: a timeout, not a failure
                raise self._timed_out("total limit") from None
            raise ModelRequestError(
                RequestErrorCode.CONNECTION, f"request to {self.url} failed ({type(exc).__name__})"
            ) from None
        except ModelRequestError:
            if deadline.expired:
                raise self._timed_out("total limit") from None
            raise
        try:
            # The key is removed from every string before anything is kept (I9).
            payload = redact_value(decode_body(data, (self._api_key,)), (self._api_key,))
        except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep, huge numbers
            raise ModelRequestError(
                RequestErrorCode.BAD_RESPONSE, f"{self.url} answered with a body that cannot "
                "be read as JSON (not JSON, not UTF-8, or nested too deeply)",
                usage=usage_anywhere(data)) from None
        return parse_reply(payload)

    def _timed_out(self, why: str) -> ModelRequestError:
        limit = "" if self.timeout_s is None else f"; the whole request may take {self.timeout_s:g} s"
        return ModelRequestError(RequestErrorCode.TIMEOUT,
                                 f"request to {self.url} timed out ({why}{limit})")

    def _read_capped(self, response: httpx.Response, deadline: _Deadline) -> bytes:
        """The body, read in pieces and refused past `MAX_REPLY_BYTES` (never held whole).

        A `Content-Length` over the cap is not trusted or refused up front: the first
        bytes are read like any other's, so the usage in them counts (`usage_anywhere`).

        Raises:
            ModelRequestError: `bad_response` when the body is larger than the cap
                (carrying the usage found in its first `MAX_REPLY_BYTES`);
                `timeout` when the request's total limit passes before its last byte.
        """
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            deadline.check()
            if deadline.expired:
                raise self._timed_out("total limit")
            size += len(chunk)
            chunks.append(chunk)
            if size > MAX_REPLY_BYTES:  # refused; the usage in what was read still counts
                raise ModelRequestError(
                    RequestErrorCode.BAD_RESPONSE,
                    f"{self.url} answered with more than {MAX_REPLY_BYTES} bytes",
                    usage=usage_anywhere(b"".join(chunks)[:MAX_REPLY_BYTES + 1]))
        if not deadline.finish():  # the last byte came after the limit
            raise self._timed_out("total limit")
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
