"""Routing a thread whose last step stored its output but not where to go next.

LangGraph runs a node's conditional-edge router inside the node's task, after the
node's state writes. If the router (or anything else in that task after the node)
raises, LangGraph saves the node's writes *and* the error as pending writes of the
previous checkpoint. The next `invoke` then applies those writes without re-running
the node, but no routing write exists, so the new checkpoint has no next node: the
thread looks "not finished but has no next step" forever, although its state (a paid
reply included) is healthy. Writing anything with `update_state` from the previous
checkpoint would instead drop the stored output, and the paid reply with it.

`repair_routing` closes that kind of fault: it replays a stored but unrouted output
as written by its node (the graph's own router picks the next node), and routes a
thread whose state proves what comes next. States that prove nothing stay refused.
"""

from __future__ import annotations

from typing import Any

from graph.errors import ErrorCode, RefusedError
from nodes.state import FINAL_STATUSES

__all__ = ["repair_routing", "unrouted_output"]


def unrouted_output(snapshot: Any) -> tuple[str, dict[str, Any]] | None:
    """The node and stored output of a task that finished but failed to route, if any.

    Returns:
        `(node, writes)` for a task whose state writes were saved together with an
        error (the node ran to completion; what ran after it raised), else None.
    """
    for task in snapshot.tasks or ():
        result = task.result
        if (task.error is not None and isinstance(result, dict) and result
                and "$writes" not in result):
            return task.name, result
    return None


def _proven_next(values: dict[str, Any]) -> str | None:
    """The node a ready thread must run next, when its stored state proves it.

    An assistant message with tool calls last: its tools run next. A task or tool
    result last: the next request needs a counted attempt, so budget (which reuses a
    counted attempt that was never sent). An assistant answer last while the thread
    is not done proves nothing.
    """
    if values["progress"]["status"] != "ready" or not values["messages"]:
        return None
    last = values["messages"][-1]
    if last["role"] == "assistant":
        return "tools" if last.get("tool_calls") else None
    return "budget"


def repair_routing(graph: Any, config: dict[str, Any], location: str,
                   snapshot: Any = None) -> bool:
    """Gives a thread that is not finished, but has no next step, its next step.

    Args:
        graph: The compiled graph with the thread's checkpointer.
        config: The thread's config (`configurable.thread_id`).
        location: The database, for the refusal message.
        snapshot: The thread's latest `get_state(config)`, when the caller just read it
            (nothing written since); None reads it here.

    Returns:
        True when a checkpoint was written (the thread now has a next step); False
        when nothing needed repair (a next step exists, or the thread is finished).

    Raises:
        RefusedError: `damaged` when the thread has no next step and its state does
            not prove which node comes next (nothing is written).
    """
    if snapshot is None:
        snapshot = graph.get_state(config)
    stored = unrouted_output(snapshot)
    if stored is not None:
        node, writes = stored
        graph.update_state(config, writes, as_node=node)  # its router runs on the result
        return True
    if snapshot.next or snapshot.tasks or snapshot.values["progress"]["status"] in FINAL_STATUSES:
        return False
    proven = _proven_next(snapshot.values)
    if proven is None:
        raise RefusedError("not finished but has no next step", error_code=ErrorCode.DAMAGED,
                           location=location, thread_id=config["configurable"]["thread_id"])
    if proven == "tools":
        graph.update_state(config, {"progress": {"outcome": "tool_calls"}}, as_node="reason")
    else:
        graph.update_state(config, {"progress": {}}, as_node="tools")  # tools → budget
    return True
