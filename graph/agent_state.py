"""A new thread's first state: its graph signature and the input that creates it.

The state's types, reducers and constants live in `nodes.state`, where nodes can
import them too; this module holds what only the graph layer knows (its node set).
"""

from __future__ import annotations

from nodes.state import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_KEEP_CHECKPOINTS,
    SCHEMA_VERSION,
    Progress,
    ThreadInfo,
    ThreadState,
    Usage,
)
from nodes.tool_specs import tool_specs


def graph_signature(with_workspace: bool = False, with_writes: bool = False) -> str:
    """The node and tool set of this program's graph, as stored in `thread.graph`.

    A thread whose stored signature differs was written by a graph this program cannot
    continue (unless a migration maps it), and is refused as `incompatible`.
    """
    tools = sorted(spec["function"]["name"] for spec in tool_specs(with_workspace, with_writes))
    return f"nodes=budget,reason,tools;tools={','.join(tools)}"


def initial_state(*, thread_id: str, task: str, model: str, max_attempts: int, created_at: str,
                  workspace: str | None = None, max_tokens: int | None = None,
                  context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                  allow_writes: str | None = None,
                  keep_checkpoints: int | None = DEFAULT_KEEP_CHECKPOINTS) -> ThreadState:
    """Returns the input that creates a thread: its identity and the task as a user message."""
    return ThreadState(
        thread=ThreadInfo(
            schema_version=SCHEMA_VERSION,
            thread_id=thread_id,
            task=task,
            model=model,
            max_attempts=max_attempts,
            created_at=created_at,
            graph=graph_signature(workspace is not None, allow_writes is not None),
            workspace=workspace,
            max_tokens=max_tokens,
            context_tokens=context_tokens,
            allow_writes=allow_writes,
            keep_checkpoints=keep_checkpoints,
        ),
        messages=[{"role": "user", "content": task}],
        progress=Progress(
            status="ready",
            attempts=0,
            outcome=None,
            answer=None,
            stop_reason=None,
            last_error=None,
            usage=Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0),
        ),
    )
