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

from nodes.compaction import estimate_tokens, fits
from nodes.context import StepContext
from nodes.pairing import not_executed_results
from nodes.reason import prepare_request


def budget_node(state: Mapping[str, Any], runtime: Runtime[StepContext]) -> dict[str, Any]:
    """Counts the next attempt in the ledger (committed before it returns).

    A counted attempt that was never claimed (the process died between counting and
    sending) is reused instead of counting another, so such a crash wastes nothing.

    Before counting it stops the thread, without counting, when the thread's token cap
    is reached (`stop_reason` `token_cap`) or its conversation cannot fit the context
    limit even compacted (`context_limit`), and it answers tool calls left without a
    result by a crash with a recorded "not executed" result instead of sending a
    history the API would reject.

    Returns:
        A `progress` update: `status` `ready` with the attempt number to send, or
        `status` `exhausted` with `stop_reason` `budget` when the maximum is spent.
        Running out of budget is a normal route to END, not an exception. A
        `cancelled` thread gets no update and routes to END without counting.

    Raises:
        UnsafeHistoryError: The stored history breaks the pairing rules (nothing counted).
    """
    progress, thread = state["progress"], state["thread"]
    if progress["status"] == "cancelled":
        return {}  # a cancelled thread never counts or sends again
    max_tokens = thread.get("max_tokens")
    if max_tokens is not None and progress["usage"]["total_tokens"] >= max_tokens:
        return {"progress": {"status": "exhausted", "stop_reason": "token_cap", "outcome": None}}
    repairs = not_executed_results(state["messages"])
    pending = {**state, "messages": [*state["messages"], *repairs]}
    compacted, messages, tools = prepare_request(pending)
    overhead = estimate_tokens(messages[:1]) + estimate_tokens(tools)
    if not fits(compacted, int(thread.get("context_tokens") or 16_000), overhead):
        return {"progress": {"status": "exhausted", "stop_reason": "context_limit", "outcome": None}}
    ctx = runtime.context
    entry = ctx.ledger.count(ctx.thread_id)
    update: dict[str, Any] = {"messages": repairs} if repairs else {}
    if entry.spent:
        update["progress"] = {"status": "exhausted", "stop_reason": "budget",
                              "attempts": entry.attempts, "outcome": None}
    else:
        update["progress"] = {"status": "ready", "attempts": entry.attempts, "outcome": None}
    return update
