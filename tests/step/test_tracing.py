"""LangSmith tracing: off by default whatever the environment says, on with `--trace`."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import PYTHON, run_cli, subprocess_env
from tests.fake_mandapi import FakeMandApi

TASK = "How long does shipping take at the demo shop? marker-7be1"
KEY = "sk-marker-trace-5a1c9e"


class LangSmithCapture:
    """A stand-in LangSmith endpoint on 127.0.0.1 that keeps every request body."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[bytes] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "zstd":
                    import zstandard

                    body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
                capture.bodies.append(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            do_PATCH = do_PUT = do_POST  # noqa: N815

            def do_GET(self) -> None:  # noqa: N802 - LangSmith asks for its server's info
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def langsmith() -> Iterator[LangSmithCapture]:
    capture = LangSmithCapture()
    try:
        yield capture
    finally:
        capture.close()


def test_trace_without_a_langsmith_key_is_a_usage_error(tmp_path: Path) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--trace", "--db", str(tmp_path / "d.sqlite")])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert "LANGSMITH_API_KEY" in out["error"]
    assert not (tmp_path / "d.sqlite").exists()


def test_trace_uploads_the_conversation_but_never_the_mandapi_key(
        tmp_path: Path, langsmith: LangSmithCapture) -> None:
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        env = subprocess_env(MANDAPI_API_KEY=KEY, MANDAPI_MODEL_ID="mandapi-large",
                             MANDAPI_BASE_URL=fake.base_url, LANGSMITH_API_KEY="lsv2-test",
                             LANGSMITH_ENDPOINT=langsmith.url, LANGSMITH_TRACING="false")
        result = subprocess.run([PYTHON, "-m", "graph.run", "--thread", "t1", "--task", TASK,
                                 "--live", "--once", "--trace", "--db", "d.sqlite"],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=180)
    assert result.returncode == 0, result.stderr
    uploaded = b"".join(langsmith.bodies)
    assert b"marker-7be1" in uploaded, "the task went to LangSmith, flushed before the exit"
    assert KEY.encode() not in uploaded
    assert KEY not in result.stdout + result.stderr


def _closed_port() -> str:
    """A 127.0.0.1 URL nothing listens on (the port was bound, then closed)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


_WITHOUT_BACKOFF = (
    "import runpy, sys, langsmith.client as client; "
    "retry = client._default_retry_config().new(backoff_factor=0); "
    "client._default_retry_config = lambda: retry; "
    "runpy.run_module('graph.run', run_name='__main__', alter_sys=True)")
"""`python -m graph.run` with LangSmith's retries unchanged but not spaced out.

LangSmith retries a failed connection three times (urllib3, 1 s then 2 s apart) for
each of its four requests before it gives up and logs the failure: 12 s of waiting.
The same retries with no backoff end in the same failure and log line at once."""


@pytest.mark.parametrize("endpoint", ["closed", "refuses the key"])
def test_a_failed_trace_upload_keeps_the_exit_code_and_says_so_without_the_key(
        tmp_path: Path, endpoint: str) -> None:
    refusing = LangSmithCapture(status=401) if endpoint == "refuses the key" else None
    url = refusing.url if refusing else _closed_port()
    langsmith_key = "lsv2-marker-secret-77c4"
    try:
        env = subprocess_env(LANGSMITH_API_KEY=langsmith_key, LANGSMITH_ENDPOINT=url,
                             LANGSMITH_TRACING="false")
        result = subprocess.run([PYTHON, "-c", _WITHOUT_BACKOFF, "--thread", "t1", "--task",
                                 TASK, "--once", "--trace", "--db", "d.sqlite"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    finally:
        if refusing:
            refusing.close()
    assert result.returncode == 0, result.stderr
    assert "thread t1: ready" in result.stdout, "the step ran and was stored"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("warning: the trace was not uploaded to LangSmith (")
    assert ("Connection error" if endpoint == "closed" else "Authentication failed") in warnings[0]
    assert "lsv2" not in result.stderr and "API Key" not in result.stderr


def test_the_upload_failure_reason_is_one_capped_sentence_without_the_key() -> None:
    from graph.step.tracing import upload_failure

    message = ("Failed to multipart ingest runs: Bad key lsv2-abc123 for POST x. Please confirm"
               "\nContent-Length: 9\nAPI Key: lsv2-*23")
    why = upload_failure(message, {"LANGSMITH_API_KEY": "lsv2-abc123"})
    assert why == "Bad key *** for POST x"
    assert len(upload_failure("Failed to batch ingest runs: " + "x" * 500, {})) == 200


def test_the_upload_failure_reason_hides_the_password_of_the_endpoint_url() -> None:
    from graph.step.tracing import upload_failure

    message = ("Failed to multipart ingest runs: Connection error caused failure to POST "
               "http://alice:s3cr%40t@127.0.0.1:9/runs/multipart in LangSmith API. Please")
    why = upload_failure(message, {"LANGSMITH_ENDPOINT": "http://alice:s3cr%40t@127.0.0.1:9"})
    assert "s3cr" not in why and "alice" not in why
    assert "POST http://***@127.0.0.1:9/runs/multipart" in why
