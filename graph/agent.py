"""The agent graph: a new thread's first state, the routers, and `build_graph`.

A `StateGraph` of three nodes (`budget`, `reason`, `tools`), built by the factory
`build_graph` and compiled per use with `interrupt_after=["reason"]`; nothing is
compiled at import time. The routers are pure functions on the conditional edges,
testable with plain dicts. The state's types, reducers and constants live in
`nodes.state`, where the nodes can read them without importing `graph`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from langgraph.graph import START, StateGraph

from graph.settings import NewThread
from nodes.budget import budget_node
from nodes.context import StepContext
from nodes.reason import reason_node
from nodes.state import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_KEEP_CHECKPOINTS,
    FINAL_STATUSES,
    SCHEMA_VERSION,
    Progress,
    ThreadInfo,
    ThreadState,
    Usage,
)
from nodes.tool_specs import tool_specs
from nodes.tools import tools_node

__all__ = [
    "END_NODE",
    "build_graph",
    "first_state",
    "graph_signature",
    "initial_state",
    "route_after_budget",
    "route_after_reason",
]


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
            partial_answer=None,
            stop_reason=None,
            last_error=None,
            usage=Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0),
        ),
    )


def first_state(thread: NewThread, created_at: str) -> ThreadState:
    """The input that creates `thread` (`graph.settings.ThreadSpec.new_thread`'s values).

    Args:
        thread: The new thread's checked and resolved settings.
        created_at: The creation time, ISO 8601 text (UTC).
    """
    return initial_state(thread_id=thread.thread_id, task=thread.task, model=thread.model,
                         max_attempts=thread.max_attempts, created_at=created_at,
                         workspace=thread.workspace, max_tokens=thread.max_tokens,
                         context_tokens=thread.context_tokens, allow_writes=thread.allow_writes,
                         keep_checkpoints=thread.keep_checkpoints)


END_NODE: Literal["__end__"] = "__end__"
"""LangGraph's `END` (typed `str` there), as the literal node name routers return."""


def route_after_budget(state: ThreadState) -> Literal["reason", "__end__"]:
    """Goes to reason when an attempt is available; to END when spent or cancelled.

    The budget node always leaves `ready`, `exhausted` or `cancelled`, so a final status
    here means spent or cancelled.
    """
    return END_NODE if state["progress"]["status"] in FINAL_STATUSES else "reason"


def route_after_reason(state: ThreadState) -> Literal["tools", "budget", "__end__"]:
    """Goes to tools for tool calls, to END when done, exhausted or cancelled, else to budget.

    Back to budget covers a failed request and a re-run that found its attempt already
    claimed (`not_sent`): the next request then needs a newly counted attempt.
    """
    progress = state["progress"]
    if progress["status"] in FINAL_STATUSES:
        return END_NODE
    if progress.get("outcome") == "tool_calls":
        return "tools"
    return "budget"


def build_graph(checkpointer: Any, *, context_schema: type[Any] = StepContext,
                input_schema: type[Any] | None = None,
                first: tuple[str, Callable[..., Any]] | None = None,
                wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None) -> Any:
    """Compiles the three-node agent graph with `checkpointer`.

    START → budget → reason → (tools → budget | budget | END); budget → END when the
    budget is spent. Compiled with `interrupt_after=["reason"]`, so one invocation
    makes at most one model request. No node has a `RetryPolicy` (INVARIANTS I3).
    Invoke it with `durability="sync"` (see `graph.step.advance`): LangGraph's default
    `"async"` may start the next node before the previous checkpoint is written.

    Args:
        checkpointer: A LangGraph checkpointer (SQLite, PostgreSQL or in-memory), or None
            for a server that brings its own (`graph.studio`).
        context_schema: The runtime context's type (`StepContext`; `graph.studio`'s
            describable one for LangGraph Studio).
        input_schema: The input's type when it differs from the state (`graph.studio`).
        first: A node `(name, function)` run between START and budget (`graph.studio`
            creates the thread there).
        wrap: Applied to each of budget, reason and tools before it is added.

    Returns:
        The compiled graph (a LangGraph `CompiledStateGraph`).
    """
    wrapped = wrap or (lambda node: node)
    builder = StateGraph(ThreadState, context_schema=context_schema, input_schema=input_schema)
    builder.add_node("budget", wrapped(budget_node))
    builder.add_node("reason", wrapped(reason_node))
    builder.add_node("tools", wrapped(tools_node))
    if first is None:
        builder.add_edge(START, "budget")
    else:
        builder.add_node(*first)
        builder.add_edge(START, first[0])
        builder.add_edge(first[0], "budget")
    builder.add_conditional_edges("budget", route_after_budget)
    builder.add_conditional_edges("reason", route_after_reason)
    builder.add_edge("tools", "budget")
    return builder.compile(checkpointer=checkpointer, interrupt_after=["reason"])
