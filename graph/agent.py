"""Builds the agent graph; nothing is compiled at import time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.graph import START, StateGraph

from graph.agent_routers import route_after_budget, route_after_reason
from nodes.budget import budget_node
from nodes.context import StepContext
from nodes.reason import reason_node
from nodes.state import ThreadState
from nodes.tools import tools_node


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
