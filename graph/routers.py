"""Pure routing functions for the graph's conditional edges; testable with plain dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END


def route_after_budget(state: Mapping[str, Any]) -> Literal["reason", "__end__"]:
    """Goes to reason when an attempt is available; to END when the budget is spent."""
    return END if state["progress"]["status"] == "exhausted" else "reason"


def route_after_reason(state: Mapping[str, Any]) -> Literal["tools", "budget", "__end__"]:
    """Goes to tools for tool calls, to END when done or exhausted, else back to budget.

    Back to budget covers a failed request and a re-run that found its attempt already
    claimed (`not_sent`): the next request then needs a newly counted attempt.
    """
    progress = state["progress"]
    if progress["status"] in ("done", "exhausted"):
        return END
    if progress.get("outcome") == "tool_calls":
        return "tools"
    return "budget"
