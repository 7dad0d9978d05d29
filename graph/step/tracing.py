"""LangSmith tracing: off unless an invocation asks for it with `--trace`.

LangSmith's own switches (`LANGSMITH_TRACING`, `LANGCHAIN_TRACING_V2`) are ignored:
a variable left in a shell must never upload a task or a conversation. `--trace` turns
tracing on for one invocation (`graph.step.advance` runs under LangSmith's
`tracing_context(enabled=...)`), and then the task, every message and tool result of
the steps it runs go to LangSmith (`LANGSMITH_ENDPOINT`, `LANGSMITH_PROJECT`). The
MandAPI key is never part of a trace: it lives only in the model client, which is not
traced.

An upload that fails (no network, a key LangSmith refuses) does not change the step's
exit code: the step ran and is stored. The command says so in one line on stderr,
`warning: the trace was not uploaded to LangSmith (WHY)`, instead of LangSmith's own
log lines (which are silent or, unconfigured, print a part of the key).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from typing import TextIO

from graph.settings import TRACE_KEYS

__all__ = ["flush_traces", "upload_failure", "watch_uploads"]

_LOGGER = "langsmith.client"
"""The logger LangSmith reports upload failures on (`Failed to ... ingest ...`)."""
_MAX_WHY = 200


class _UploadWatch(logging.Filter):
    """Keeps LangSmith's upload failures and drops its log lines while a command traces."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        if message.startswith("Failed to") and "ingest" in message:
            self.failures.append(message)
        return False


_watch: _UploadWatch | None = None


def watch_uploads() -> None:
    """Starts noting LangSmith's upload failures (a command with `--trace`, before it runs)."""
    global _watch
    if _watch is None:
        _watch = _UploadWatch()
        logging.getLogger(_LOGGER).addFilter(_watch)


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")
"""A URL's scheme and its `user:password@` part (blanked wherever a URL is shown)."""


def upload_failure(message: str, env: Mapping[str, str]) -> str:
    """Why an upload failed, from LangSmith's log message: one sentence, never a key.

    `Failed to multipart ingest runs: Connection error caused failure to POST URL in
    LangSmith API. Please confirm ...` becomes `Connection error caused failure to POST
    URL in LangSmith API`; what follows the first sentence (headers, the masked key) is
    dropped, any value of `TRACE_KEYS` is blanked, the user and password of any URL
    (`http://user:pw@host`, from `LANGSMITH_ENDPOINT`) become `***`, and the text is capped.
    """
    why = message.split(": ", 1)[-1].splitlines()[0].split(". ", 1)[0].strip() or message
    for name in TRACE_KEYS:
        if env.get(name):
            why = why.replace(env[name], "***")
    why = _USERINFO.sub(r"\1***@", why)
    return why if len(why) <= _MAX_WHY else why[:_MAX_WHY - 3] + "..."


def flush_traces(stream: TextIO | None = None) -> None:
    """Waits until LangSmith has uploaded what was traced (before the process exits).

    Does nothing, and imports nothing, when nothing was traced. When `watch_uploads`
    saw an upload fail, writes one `warning: the trace was not uploaded ...` line to
    `stream` (stderr by default); the exit code stays the step's.
    """
    if "langchain_core.tracers.langchain" in sys.modules:
        from langchain_core.tracers.langchain import wait_for_all_tracers  # noqa: PLC0415 - graph.run imports this module before its quick answer, which must not import LangChain

        wait_for_all_tracers()
    if _watch is not None and _watch.failures:
        why = upload_failure(_watch.failures[0], os.environ)
        _watch.failures.clear()
        print(f"warning: the trace was not uploaded to LangSmith ({why}); the step itself ran "
              "and is stored", file=stream or sys.stderr, flush=True)
