"""LangSmith tracing: off unless an invocation asks for it with `--trace`.

LangSmith's own switches (`LANGSMITH_TRACING`, `LANGCHAIN_TRACING_V2`) are ignored:
a variable left in a shell must never upload a task or a conversation. `--trace` turns
tracing on for one invocation (`graph.step.advance` runs under LangSmith's
`tracing_context(enabled=...)`), and then the task, every message and tool result of
the steps it runs go to LangSmith (`LANGSMITH_ENDPOINT`, `LANGSMITH_PROJECT`). The
MandAPI key is never part of a trace: it lives only in the model client, which is not
traced.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from graph.errors import UsageError

TRACE_KEYS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")
"""Environment variables LangSmith reads its key from; `--trace` needs one of them."""


def check_trace(env: Mapping[str, str]) -> None:
    """Refuses `--trace` when LangSmith has no key to upload with.

    Raises:
        UsageError: None of `TRACE_KEYS` is set (exit 2, before anything is counted).
    """
    if not any(env.get(name) for name in TRACE_KEYS):
        raise UsageError("--trace uploads the run to LangSmith and needs LANGSMITH_API_KEY in "
                         "the environment")


def flush_traces() -> None:
    """Waits until LangSmith has uploaded what was traced (before the process exits).

    Does nothing, and imports nothing, when nothing was traced.
    """
    if "langchain_core.tracers.langchain" in sys.modules:
        from langchain_core.tracers.langchain import wait_for_all_tracers

        wait_for_all_tracers()
