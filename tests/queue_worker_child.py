"""Runs procrastinate's own worker command with every log record dumped whole, as JSON lines.

  python -m tests.queue_worker_child LOG_FILE [procrastinate worker arguments ...]

A handler on the root logger (level INFO) writes each record's every attribute (message,
`extra` fields, exception text) to LOG_FILE, the way a structured log formatter would,
before procrastinate's command line configures logging (its `basicConfig` then adds
nothing). Then `procrastinate --app=graph.queue.app --log-level=info worker ...` runs
in this process, exactly as a user starts it.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


class DumpEverything(logging.Handler):
    """Writes `record.__dict__` plus the formatted message and exception, one JSON line each."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def emit(self, record: logging.LogRecord) -> None:
        data: dict[str, Any] = dict(record.__dict__)
        data["message"] = record.getMessage()
        if record.exc_info:
            data["exc_text"] = logging.Formatter().formatException(record.exc_info)
        self._file.write(json.dumps(data, default=repr) + "\n")
        self._file.flush()


def main() -> None:
    path, args = sys.argv[1], sys.argv[2:]
    root = logging.getLogger()
    root.addHandler(DumpEverything(path))
    root.setLevel(logging.INFO)
    from procrastinate.cli import main as procrastinate_main

    sys.argv = ["procrastinate", "--app=graph.queue.app", "--log-level=info", *args]
    procrastinate_main()


if __name__ == "__main__":
    main()
