"""The **budget** node: makes one counted attempt available, or stops the thread.

The count lives in the attempt ledger, not in graph state: LangGraph re-runs a node
that raised or was killed without passing through this node again, so a count kept
only in state would undercount (see `nodes.reason`). State mirrors the ledger for
display; the ledger decides (INVARIANTS I1, I2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from nodes.context import StepContext


def budget_node(state: Mapping[str, Any], runtime: Runtime[StepContext]) -> dict[str, Any]:
    """Counts the next attempt in the ledger (committed before it returns).

    A counted attempt that was never claimed (the process died between counting and
    sending) is reused instead of counting another, so such a crash wastes nothing.

    Returns:
        A `progress` update: `status` `ready` with the attempt number to send, or
        `status` `exhausted` with `stop_reason` `budget` when the maximum is spent.
        Running out of budget is a normal route to END, not an exception. A
        `cancelled` thread gets no update and routes to END without counting.
    """
    if state["progress"]["status"] == "cancelled":
        return {}  # a cancelled thread never counts or sends again
    ctx = runtime.context
    entry = ctx.ledger.count(ctx.thread_id)
    if entry.spent:
        return {
            "progress": {
                "status": "exhausted",
                "stop_reason": "budget",
                "attempts": entry.attempts,
                "outcome": None,
            }
        }
    return {"progress": {"status": "ready", "attempts": entry.attempts, "outcome": None}}
