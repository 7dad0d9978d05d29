"""The **budget** node: makes one counted attempt available, or stops the thread.

The count lives in the attempt ledger, not in graph state: LangGraph re-runs a node
that raised or was killed without passing through this node again, so a count kept
only in state would undercount (see `nodes.reason`). State mirrors the ledger for
display; the ledger decides (INVARIANTS I1, I2).
"""

from __future__ import annotations

from typing import Any

from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.runtime import Runtime

from nodes.context import NodeContext, StepContext
from nodes.errors import InvocationErrorCode, InvocationRefusedError
from nodes.pairing import not_executed_results
from nodes.state import FINAL_STATUSES, Progress, ThreadState, ThreadUpdate


def budget_node(state: ThreadState, runtime: Runtime[StepContext]) -> ThreadUpdate:
    """Counts the next attempt in the ledger (committed with this node's checkpoint).

    A counted attempt that was never claimed (the process died between counting and
    sending) is reused instead of counting another, so such a crash wastes nothing.

    Before counting it stops the thread, without counting, when the thread's token cap
    is reached (`stop_reason` `token_cap`) or its conversation cannot fit the context
    limit even compacted (`context_limit`), and it answers tool calls left without a
    result by a crash with a recorded "not executed" result instead of sending a
    history the API would reject. The request it prepares for that check (compaction
    included) is left in the runtime context for the reason node (`nodes.request`).

    Returns:
        A `progress` update: `status` `ready` with the attempt number to send, or
        `status` `exhausted` with `stop_reason` `budget` when the maximum is spent.
        Running out of budget is a normal route to END, not an exception. A finished
        thread (`done`, `exhausted`, `cancelled`) gets no update and routes to END
        without counting: a person's reopen (`graph.step.local_steps`) makes it `ready`.

    The token cap is checked against the larger of the state's total and the total the
    attempt log recorded for the thread (`AttemptLog.used_tokens`): a fork from an older
    checkpoint lowers the first, never the second.

    Raises:
        InvocationRefusedError: No runtime context, or the invoked thread (the run's
            `configurable.thread_id`) is not the context's thread: nothing counted.
        UnsafeHistoryError: The stored history breaks the pairing rules (nothing counted).
    """
    ctx = check_invocation(runtime.context)
    progress, thread = state["progress"], state["thread"]
    if progress["status"] in FINAL_STATUSES:  # never counts or sends again (a Studio run with
        return {}  # input enters here on a finished thread; only a reopen makes it ready)
    max_tokens = thread.get("max_tokens")
    if max_tokens is not None and max(progress["usage"]["total_tokens"],
                                      ctx.log.used_tokens(ctx.thread_id)) >= max_tokens:
        return {"progress": {"status": "exhausted", "stop_reason": "token_cap", "outcome": None}}
    repairs = not_executed_results(state["messages"])
    if not ctx.prepared.prepare(thread, [*state["messages"], *repairs]).fits():
        return {"progress": {"status": "exhausted", "stop_reason": "context_limit", "outcome": None}}
    entry = ctx.ledger.count(ctx.thread_id)
    if entry.spent:
        counted = Progress(status="exhausted", stop_reason="budget", attempts=entry.attempts, outcome=None)
    else:
        counted = Progress(status="ready", attempts=entry.attempts, outcome=None)
    return {"messages": repairs, "progress": counted} if repairs else {"progress": counted}


def check_invocation(ctx: NodeContext | None) -> NodeContext:
    """The runtime context, checked against the thread the running invocation advances.

    The ledger and log a context carries are its thread's (`ctx.thread_id`); invoking
    another thread with it would charge one thread's attempts to the other.

    Raises:
        InvocationRefusedError: `usage` without a context, or with a context whose
            `Database.invocation` block has ended; `identity_mismatch` when the run's
            `configurable.thread_id` is not `ctx.thread_id`, or its checkpointer is not
            the database the context was made by (`nodes.context.Lease`). Called outside a
            LangGraph run (unit tests), only the context is checked.
    """
    if ctx is None:
        raise InvocationRefusedError(
            InvocationErrorCode.USAGE, "invoke the graph with context=: the runtime context "
            "of Database.invocation(thread_id) (its ledger counts each attempt)")
    configurable = _configurable()
    _check_lease(ctx, configurable.get(CONFIG_KEY_CHECKPOINTER))
    invoked = configurable.get("thread_id")
    if invoked is not None and invoked != ctx.thread_id:
        raise InvocationRefusedError(
            InvocationErrorCode.IDENTITY_MISMATCH,
            f"the context is thread {ctx.thread_id!r}'s, not this thread's; use "
            "Database.invocation() of the thread you invoke", thread_id=str(invoked))
    return ctx


def _check_lease(ctx: NodeContext, saver: Any) -> None:
    """Refuses a `Database.invocation` context used after its block or on another database.

    Raises:
        InvocationRefusedError: `usage` when the block that made the context ended (its
            lock was released); `identity_mismatch` when the running graph's checkpointer
            is not the database whose ledger the context carries. A context without a
            lease (one the program builds itself) is not checked here.
    """
    lease = getattr(ctx, "lease", None)
    if lease is None:
        return
    if not lease.alive:
        raise InvocationRefusedError(
            InvocationErrorCode.USAGE, "the context's `with Database.invocation()` block has "
            "ended and released the thread's lock: invoke the graph inside the block")
    if saver is not None and saver is not lease.saver:
        raise InvocationRefusedError(
            InvocationErrorCode.IDENTITY_MISMATCH, "the context is another database's (its "
            "ledger would count this thread's attempts there); use this database's invocation()")


def _configurable() -> Any:
    """The running invocation's `configurable`, or {} outside a LangGraph run."""
    try:
        config = get_config()
    except RuntimeError:  # not inside a LangGraph run
        return {}
    return config.get("configurable") or {}
