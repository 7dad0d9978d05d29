"""Steps that never make a model request: cancelling a thread, deciding paused write calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from graph.errors import ErrorCode, RefusedError, UsageError
from graph.outcome import Figures, Outcome
from graph.step.approvals import apply_approved, decide
from nodes.context import LedgerEntry, NoModel, StepContext
from nodes.errors import StopReason
from nodes.state import FINAL_STATUSES

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = ["REOPENABLE", "cancel", "needs_reopening", "reopen", "review"]

REOPENABLE = frozenset(str(reason) for reason in StopReason)
"""Stop reasons a person may undo with `--reopen`: model errors (`nodes.errors.StopReason`:
`model_not_found`, `invalid_request`, `content_filter`), which a configuration mistake can
cause too (a gateway answers a wrong key with HTTP 400). Never `budget`, `token_cap`,
`context_limit` or `cancelled`."""


def cancel(graph: Any, config: dict[str, Any], store: Store, loaded: Any,
           thread_id: str, entry: LedgerEntry | None) -> Outcome:
    """Marks a thread `cancelled`: no request is ever made for it again.

    A thread already finished is reported as it is, with a note that it was not
    cancelled (exit 0 for `done` and `cancelled`, 3 for `exhausted`, as `graph.run`
    reports them). Its figures are `entry` (the ledger row the step read; a cancellation
    counts nothing) and the attempt log's sums (`Store.figures`).

    Raises:
        RefusedError: `no_such_thread` when `loaded` is None.
    """
    if loaded is None:
        raise RefusedError("no such thread", error_code=ErrorCode.NO_SUCH_THREAD,
                           location=store.location, thread_id=thread_id)
    values = loaded.values
    figures = store.figures(thread_id, entry=entry)
    if values["progress"]["status"] in FINAL_STATUSES:
        status = values["progress"]["status"]
        outcome = Outcome.from_state(thread_id, values, loaded.snapshot.next, figures)
        outcome.note = f"not cancelled: the thread was already {status}; nothing changed"
        return outcome.succeeded() if status == "cancelled" else outcome
    # Written as if by reason, whose router sends a cancelled thread to END from any point.
    graph.update_state(config, {"progress": {"status": "cancelled", "stop_reason": "cancelled"}},
                       as_node="reason")
    store.ledger.touch(thread_id)
    snapshot = graph.get_state(config)
    return Outcome.from_state(thread_id, snapshot.values, snapshot.next, figures).succeeded()


def needs_reopening(progress: Mapping[str, Any], thread_id: str, asked: str = "--reopen") -> bool:
    """Whether a thread whose `progress` this is must be put back to `ready` when a person asks.

    Args:
        progress: The thread's `progress` state.
        thread_id: Named in the refusal.
        asked: How the person asked (`--reopen`, Studio's input), named in the refusal.

    Returns:
        True for a stop by a model error (`REOPENABLE`); False for a thread already `ready`.

    Raises:
        UsageError: The thread is done, cancelled, waiting for approval, or stopped by
            its limits: nothing to reopen.
    """
    if progress["status"] == "ready":
        return False
    if progress["status"] != "exhausted" or progress.get("stop_reason") not in REOPENABLE:
        stopped = progress["status"] + (f" ({progress['stop_reason']})" if progress.get("stop_reason")
                                        else "")
        raise UsageError(f"{asked} undoes a stop by a model error ({', '.join(sorted(REOPENABLE))}); "
                         f"this thread is {stopped}: nothing to reopen", thread_id=thread_id)
    return True


def reopen(graph: Any, config: dict[str, Any], store: Store, loaded: Any,
           thread_id: str, entry: LedgerEntry | None) -> Outcome:
    """Puts a thread stopped by a model error (`REOPENABLE`) back to `ready`; sends nothing.

    Its attempts stay counted and its limits unchanged: the next run counts a new
    attempt as usual (and ends at once, `exhausted`, when none is left). A thread
    already `ready` is reported as it is (exit 0). Only a person asks for this: no batch
    or worker passes it.

    Raises:
        RefusedError: `no_such_thread` when `loaded` is None.
        UsageError: The thread is done, cancelled, waiting for approval, or stopped by
            its limits; nothing is written.
    """
    if loaded is None:
        raise RefusedError("no such thread", error_code=ErrorCode.NO_SUCH_THREAD,
                           location=store.location, thread_id=thread_id)
    values = loaded.values
    if not needs_reopening(values["progress"], thread_id):
        return Outcome.from_state(thread_id, values, loaded.snapshot.next,
                                  store.figures(thread_id, entry=entry))
    # Written as if by reason: its router sends a ready thread after an error to budget.
    graph.update_state(config, {"progress": {"status": "ready", "stop_reason": None}},
                       as_node="reason")
    store.ledger.touch(thread_id)
    snapshot = graph.get_state(config)
    return Outcome.from_state(thread_id, snapshot.values, snapshot.next,
                              store.figures(thread_id, entry=entry))


def review(graph: Any, config: dict[str, Any], store: Store, loaded: Any, thread_id: str,
           pending: list[dict[str, Any]], *, approve: list[str], reject: list[str],
           reason: str | None, figures: Figures) -> Outcome:
    """Records decisions; once every paused write is decided, applies and resumes.

    Args:
        graph: The compiled graph.
        config: The thread's config.
        store: The open store (approvals, ledger, log).
        loaded: The loaded thread (`graph.checkpoints.load.LoadedThread`).
        thread_id: The thread.
        pending: The write calls paused for review (`graph.checkpoints.load.pending_review`).
        approve: Call ids to approve (`--approve`).
        reject: Call ids to reject (`--reject`).
        reason: Why the rejected calls were rejected (told to the model), or None.
        figures: The thread's figures as the step read them (`Store.figures`); deciding
            and applying count no attempt and log no `reason` row, so they stand.

    Returns:
        `awaiting_approval` (exit 7) while a call is undecided, else the thread after
        the decisions were applied, stopped before budget (no request).
    """
    decisions = decide(store, thread_id, pending, loaded.values, approve, reject, reason)
    if not all(p["tool_call_id"] in decisions for p in pending):
        return Outcome.waiting(thread_id, loaded.values, pending, decisions, figures)
    decisions = apply_approved(store, thread_id, loaded.values, decisions)
    payload = {"decisions": [{"tool_call_id": p["tool_call_id"], "sha256": p["sha256"],
                              "decision": decisions[p["tool_call_id"]]["decision"],
                              "result": decisions[p["tool_call_id"]]["result"]} for p in pending]}
    ctx = StepContext(thread_id, store.ledger, NoModel(), store.log)
    # Resume only the review interrupt found above, and stop before budget: an approval
    # invocation is local work and never makes a model request.
    store.take_failed_write(thread_id)  # one left by an earlier invocation is not ours
    try:
        graph.invoke(Command(resume=payload), config, context=ctx, durability="sync",
                     interrupt_before=["budget"])
        store.raise_failed_write(thread_id)
    finally:
        store.commit()  # writes saved without a checkpoint after them
    snapshot = graph.get_state(config)
    return Outcome.from_state(thread_id, snapshot.values, snapshot.next, figures)
