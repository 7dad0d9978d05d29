"""Pure routing functions for the graph's conditional edges; testable with plain dicts."""

from __future__ import annotations

from typing import Literal

from nodes.state import FINAL_STATUSES, ThreadState

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
