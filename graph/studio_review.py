"""Reviewing write calls in LangGraph Studio: the interrupt a person resumes with decisions.

In Studio the thread pauses in the tools node with one `interrupt()` listing each write
call (id, tool, canonical arguments, hash), like the command line. The person resumes
it with `{"approve": [CALL_ID, ...], "reject": [CALL_ID, ...], "reason": "..."}`,
deciding every paused call at once. The decisions go through the same functions as
`graph.run --approve/--reject` (`graph.step.approvals`): recorded with the argument hash in
the context's database, approved writes applied there at most once in effect, before
the model sees their results. No model request is made by a resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from nodes.review import open_calls_of_last, pending_items, split_writes
from nodes.state import ThreadState, ThreadUpdate
from nodes.tools import answer_calls, tools_node

if TYPE_CHECKING:
    from graph.studio import StudioContext


def _decisions(answer: Any, ids: list[str]) -> tuple[list[str], list[str], str | None] | str:
    """`(approve, reject, reason)` deciding every call in `ids`, or what is wrong."""
    if not isinstance(answer, dict) or set(answer) - {"approve", "reject", "reason"}:
        return 'resume with {"approve": [CALL_ID, ...], "reject": [CALL_ID, ...], "reason": "..."}'
    approve, reject = list(answer.get("approve") or []), list(answer.get("reject") or [])
    reason = answer.get("reason")
    if not all(isinstance(i, str) for i in approve + reject) or not isinstance(reason, str | None):
        return "approve and reject list call ids; reason is text"
    if sorted(approve + reject) != sorted(ids):
        return f"decide every paused call exactly once: {', '.join(ids)}"
    return approve, reject, reason


def studio_tools_node(state: ThreadState, runtime: Runtime[StudioContext]) -> ThreadUpdate:
    """The tools node of the Studio graph: write calls are decided by a resume value.

    Without write calls to review it is `nodes.tools.tools_node`.

    A resume value that does not decide exactly the paused calls is not an error: the
    node pauses again with the same calls and an `error` saying what was wrong.

    Raises:
        RefusedError: `tampered`, `conflict` (as `graph.step.approvals`).
    """
    from graph.step.approvals import apply_approved, decide

    ctx = runtime.context
    calls = open_calls_of_last(state["messages"])
    writes, reviewed = split_writes(state["thread"].get("allow_writes"), calls)
    if not writes:
        return tools_node(state, runtime)  # type: ignore[arg-type]  # a NodeContext
    pending = pending_items(writes)
    ids = [p["tool_call_id"] for p in pending]
    request = {"kind": "approval", "pending": pending,
               "resume_with": {"approve": ids, "reject": [], "reason": None}}
    decided = _decisions(interrupt(request), ids)
    while isinstance(decided, str):  # asked again, saying why: nothing was decided
        decided = _decisions(interrupt({**request, "error": decided}), ids)
    approve, reject, reason = decided
    values: dict[str, Any] = dict(state)
    with ctx.store() as store:
        done = store.approvals.turn(ctx.thread_id, int(state["progress"]["attempts"]))
        decisions = done if set(ids) <= set(done) else decide(  # a rerun after a crash
            store, ctx.thread_id, pending, values, [i for i in approve if i not in done],
            [i for i in reject if i not in done], reason)
        decisions = apply_approved(store, ctx.thread_id, values, decisions)
    reviewed.update({cid: str(decisions[cid]["result"]) for cid in ids})
    return answer_calls(state, ctx, reviewed)  # type: ignore[arg-type]  # a NodeContext
