"""A fake MandAPI server on 127.0.0.1 for tests: records every request, then answers.

Each request is appended to a JSON-lines log and fsync'd *before* the answer is sent,
so a test that kills the client can still count exactly what reached the server.
Answers follow the offline demo's script (a tool call first, an answer once a tool
result is present), or always a tool call with `never_finish`. With `reuse_ids` it
numbers tool calls `call_0` afresh in every reply, as several real servers do, and
`tool_rounds` sets how many tool rounds come before the answer. Run it as a process:

  python -m tests.fake_mandapi --log requests.jsonl --port-file port.txt [--hold 2] [--status 500]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def task_of(body: dict[str, Any]) -> str:
    """The task text of a request: its first user message."""
    return next((m["content"] for m in body.get("messages", []) if m["role"] == "user"), "")


class FakeMandApi:
    """Serves chat completions on 127.0.0.1 in a background thread.

    Args:
        log: JSON-lines file; one line per request received, fsync'd before answering.
        hold_s: Seconds to hold each request before answering (to kill clients mid-request).
        status: HTTP status to answer with (200 for a normal answer).
        never_finish: Always answer with a tool call.
        reuse_ids: Every reply's tool call has the id `call_0`.
        tool_rounds: Tool rounds (tool results seen) before the answer.
    """

    def __init__(self, log: Path, *, hold_s: float = 0.0, status: int = 200,
                 never_finish: bool = False, reuse_ids: bool = False,
                 tool_rounds: int = 1) -> None:
        self.log = log
        self.reuse_ids = reuse_ids
        self.tool_rounds = tool_rounds
        self.hold_s = hold_s
        self.status = status
        self.never_finish = never_finish
        self._lock = threading.Lock()
        self._tasks: list[str] = []
        """The task of each request logged so far, in arrival order (what `count_for` reads)."""
        self._hold_marker: str | None = None
        self._released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                server._record(self.path, dict(self.headers), body)
                if server.hold_s:
                    time.sleep(server.hold_s)
                server._maybe_hold(json.loads(body))
                status, payload = server._answer(json.loads(body))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client killed mid-request is expected here

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _record(self, path: str, headers: dict[str, str], body: bytes) -> None:
        line = json.dumps({"path": path, "headers": headers, "body": json.loads(body),
                           "at": time.time()})
        with self._lock, open(self.log, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            self._tasks.append(task_of(json.loads(body)))

    def hold(self, marker: str) -> None:
        """Holds the next request whose task contains `marker` until `release()` (60 s at most)."""
        self._released.clear()
        self._hold_marker = marker

    def release(self) -> None:
        """Lets a held request be answered."""
        self._hold_marker = None
        self._released.set()

    def _maybe_hold(self, body: dict[str, Any]) -> None:
        marker = self._hold_marker
        if marker is not None and marker in task_of(body):
            self._hold_marker = None
            self._released.wait(60)

    def count_for(self, marker: str) -> int:
        """How many requests whose task contains `marker` are logged (fsync'd) so far.

        The same number as `len(requests_for(marker))`, counted in memory instead of parsing
        the whole log: cheap enough to poll while a child runs.
        """
        with self._lock:
            return sum(marker in task for task in self._tasks)

    def requests_for(self, marker: str) -> list[dict[str, Any]]:
        """The requests whose task contains `marker`."""
        return [r for r in self.requests() if marker in task_of(r["body"])]

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.status != 200:
            return self.status, {"error": {"message": "fake failure"}}
        messages = body["messages"]
        tools_seen = [m for m in messages if m["role"] == "tool"]
        if self.never_finish or len(tools_seen) < self.tool_rounds:
            with self._lock:
                self._calls = getattr(self, "_calls", 0) + 1
                turn = self._calls
            task = next(m["content"] for m in messages if m["role"] == "user")
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_0" if self.reuse_ids else f"call_{turn}", "type": "function",
                "function": {"name": "search_references", "arguments": json.dumps({"query": task})},
            }]}
        else:
            hits = json.loads(tools_seen[-1]["content"]).get("hits") or [{"id": "none", "text": "?"}]
            message = {"role": "assistant", "content": f"{hits[0]['text']} [{hits[0]['id']}]"}
        return 200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}}

    def requests(self) -> list[dict[str, Any]]:
        """Every request received so far, in arrival order."""
        with self._lock:  # never read a line another handler is still writing
            if not self.log.exists():
                return []
            text = self.log.read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def __enter__(self) -> FakeMandApi:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--never-finish", action="store_true")
    parser.add_argument("--reuse-ids", action="store_true")
    parser.add_argument("--lifetime", type=float, default=600.0, help="stop by itself after this")
    args = parser.parse_args()
    fake = FakeMandApi(args.log, hold_s=args.hold, status=args.status,
                       never_finish=args.never_finish, reuse_ids=args.reuse_ids)
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(str(fake.port))
    tmp.rename(args.port_file)
    with fake:
        time.sleep(args.lifetime)


if __name__ == "__main__":
    main()
