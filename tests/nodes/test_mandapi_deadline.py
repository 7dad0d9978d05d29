"""`--timeout S` limits the whole request, connect to last byte (issue 29).

httpx's timeouts apply to each read, so a server that trickles bytes held a step (and
the thread's writer lock) for minutes under `--timeout 3`. A real server on 127.0.0.1
sends one byte every 0.2 s of a body that would take 40 s; the test proves the client
gave up at its limit by what the server saw: the connection closed before the body was
sent. No wall-clock time is asserted (the join timeouts are failsafes only).
"""

from __future__ import annotations

import select
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodes.errors import ModelRequestError
from nodes.mandapi import MandApiModel, total_timeout
from tests.conftest import run_cli

BODY_BYTES = 200
"""The body the server means to send: 200 bytes, one every `GAP_S`, 40 s in all."""
GAP_S = 0.2
FAILSAFE_S = 30.0


class TrickleServer:
    """One connection on 127.0.0.1: reads the request, then trickles its answer.

    `phase` chooses what is trickled: `body` (headers at once, then the body a byte at
    a time) or `headers` (the status line and headers themselves a byte at a time).

    Attributes:
        sent: Bytes of the answer sent before the server stopped.
        closed_early: True when the client closed the connection before the answer was
            complete (what the tests assert).
        done: Set when the server has stopped.
    """

    def __init__(self, phase: str = "body") -> None:
        self.phase = phase
        self.sent = 0
        self.closed_early = False
        self.done = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self._listener.settimeout(FAILSAFE_S)
            conn, _ = self._listener.accept()
            with conn:
                self._read_request(conn)
                head = (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        f"content-length: {BODY_BYTES}\r\n\r\n").encode()
                if self.phase == "body":
                    conn.sendall(head)
                    answer = b" " * BODY_BYTES
                else:
                    answer = head + b" " * BODY_BYTES
                for index in range(len(answer)):
                    # Wait one gap, or less if the client closes (readable with b"").
                    readable, _, _ = select.select([conn], [], [], GAP_S)
                    if readable and not _peek(conn):
                        self.closed_early = True
                        return
                    try:
                        conn.sendall(answer[index:index + 1])
                    except OSError:  # reset by the client
                        self.closed_early = True
                        return
                    self.sent += 1
        except OSError:
            pass
        finally:
            self._listener.close()
            self.done.set()

    @staticmethod
    def _read_request(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += conn.recv(65536)

    def stop(self) -> None:
        self._thread.join(FAILSAFE_S)
        assert self.done.is_set(), "the trickle server did not stop (failsafe)"


def _peek(conn: socket.socket) -> bytes:
    try:
        return conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""


def _model(port: int, timeout_s: float) -> MandApiModel:
    client = httpx.Client(timeout=httpx.Timeout(timeout_s),
                          transport=httpx.HTTPTransport(retries=0))
    return MandApiModel(client, api_key="sk-test-00000000", model_id="m",
                        base_url=f"http://127.0.0.1:{port}/v1")


@pytest.mark.parametrize("phase", ["body", "headers"])
def test_trickling_server_is_cut_off_at_the_total_limit(phase: str) -> None:
    server = TrickleServer(phase)
    with pytest.raises(ModelRequestError) as info:
        _model(server.port, 1.0).complete([{"role": "system", "content": "s"}], [])
    server.stop()
    assert info.value.error_code == "timeout"
    assert "the whole request may take 1 s" in info.value.message
    assert server.closed_early and server.sent < BODY_BYTES


def test_the_client_timeout_is_the_total_limit_by_default() -> None:
    assert total_timeout(httpx.Client(timeout=httpx.Timeout(3.0))) == 3.0
    assert total_timeout(httpx.Client(timeout=None)) is None
    client = httpx.Client(timeout=httpx.Timeout(2.0, read=7.5))
    assert MandApiModel(client, api_key="k", model_id="m").timeout_s == 7.5
    assert MandApiModel(client, api_key="k", model_id="m", timeout_s=1.5).timeout_s == 1.5


def test_step_against_a_trickling_server_is_a_counted_timeout(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    server = TrickleServer("body")
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
    monkeypatch.setenv("MANDAPI_BASE_URL", f"http://127.0.0.1:{server.port}/v1")
    out: dict[str, Any] = run_cli(["--thread", "t1", "--task", "What is shipping?", "--live",
                                   "--model", "mandapi-large", "--once", "--timeout", "1",
                                   "--db", str(tmp_path / "t.sqlite")])
    server.stop()
    assert (out["exit_code"], out["error_code"], out["status"], out["attempts"]) == (
        6, "timeout", "ready", 1)
    assert server.closed_early and server.sent < BODY_BYTES
