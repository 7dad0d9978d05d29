"""Pure routing functions for the graph's conditional edges; testable with plain dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END


def route_after_budget(state: Mapping[str, Any]) -> Literal["reason", "__end__"]:
    """Goes to reason when an attempt is available; to END when spent or cancelled."""
    return END if state["progress"]["status"] in ("exhausted", "cancelled") else "reason"


def route_after_reason(state: Mapping[str, Any]) -> Literal["tools", "budget", "__end__"]:
    """Goes to tools for tool calls, to END when done, exhausted or cancelled, else to budget.

    Back to budget covers a failed request and a re-run that found its attempt already
    claimed (`not_sent`): the next request then needs a newly counted attempt.
    """
    progress = state["progress"]
    if progress["status"] in ("done", "exhausted", "cancelled"):
        return END
    if progress.get("outcome") == "tool_calls":
        return "tools"
    return "budget"
