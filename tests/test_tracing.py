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

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "zstd":
                    import zstandard

                    body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
                capture.bodies.append(body)
                self.send_response(200)
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
