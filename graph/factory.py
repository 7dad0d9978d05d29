"""Builds the agent graph; nothing is compiled at import time."""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, StateGraph

from graph.routers import route_after_budget, route_after_reason
from nodes.budget import budget_node
from nodes.context import StepContext
from nodes.reason import reason_node
from nodes.state import ThreadState
from nodes.tools import tools_node


def build_graph(checkpointer: Any) -> Any:
    """Compiles the three-node agent graph with `checkpointer`.

    START → budget → reason → (tools → budget | budget | END); budget → END when the
    budget is spent. Compiled with `interrupt_after=["reason"]`, so one invocation
    makes at most one model request. No node has a `RetryPolicy` (INVARIANTS I3).
    Invoke it with `durability="sync"` (see `graph.step`): LangGraph's default
    `"async"` may start the next node before the previous checkpoint is written.

    Args:
        checkpointer: A LangGraph checkpointer (SQLite, PostgreSQL or in-memory).

    Returns:
        The compiled graph (a LangGraph `CompiledStateGraph`), with `StepContext` as
        its runtime context schema.
    """
    builder = StateGraph(ThreadState, context_schema=StepContext)
    builder.add_node("budget", budget_node)
    builder.add_node("reason", reason_node)
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "budget")
    builder.add_conditional_edges("budget", route_after_budget)
    builder.add_conditional_edges("reason", route_after_reason)
    builder.add_edge("tools", "budget")
    return builder.compile(checkpointer=checkpointer, interrupt_after=["reason"])
