"""Advances one thread: the shared function behind `graph.run`, `graph.batch` and the queue.

Order of checks, so that a refusal changes nothing: the writer lock (busy, exit 5),
then the stored checkpoint and ledger (refused, exit 4), then identity (exit 4) and
whether paid requests are allowed (exit 2); only then is the graph invoked
(`graph.step.invocation`), always with `durability="sync"` so each node's checkpoint is on
disk before the next node starts, and with `None` input for an existing thread so it
is never restarted (INVARIANTS I7).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langsmith import tracing_context

from graph.agent import first_state
from graph.checkpoints.load import LoadedThread, graph_of, load_thread, pending_review
from graph.errors import ErrorCode, RefusedError, UsageError
from graph.outcome import Outcome
from graph.settings import Settings, ThreadSpec, check_task, resolve_folder, scrub_key
from graph.step.finished import remember_finished
from graph.step.invocation import invoke_steps, store_migrated
from graph.step.local_steps import cancel, reopen, review
from graph.step.models import make_model
from graph.store.checks import (
    check_ledger,
    check_tombstone,
    check_unstarted,
    storage_damage_refused,
)
from nodes.context import ChatModel, LedgerEntry, StepContext
from nodes.state import FINAL_STATUSES

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = ["StepRequest", "advance"]


@dataclass(frozen=True)
class StepRequest:
    """What the caller asks for: the thread's settings and what to do with it.

    Attributes:
        spec: The thread's id and fixed settings as given (`graph.settings.ThreadSpec`).
        once: Stop after one graph invocation (at most one model request).
        cancel: Mark the thread `cancelled` instead of advancing it.
        reopen: Put a thread stopped by a model error back to `ready` instead of advancing
            it (`graph.step.local_steps.reopen`); only a person asks for it.
        restart_pruned: Start a pruned thread anew, with a fresh budget, on purpose.
        approve: Call ids to approve (`--approve`).
        reject: Call ids to reject (`--reject`), with `reason`.
        reason: Why the rejected calls were rejected (`--reason`).
    """

    spec: ThreadSpec
    once: bool = True
    cancel: bool = False
    reopen: bool = False
    restart_pruned: bool = False
    approve: tuple[str, ...] = ()
    reject: tuple[str, ...] = ()
    reason: str | None = None

    @property
    def thread_id(self) -> str:
        """The thread to advance."""
        return self.spec.thread_id


@dataclass(frozen=True)
class _Start:
    """What the first invocation needs: the model, the input (None to resume), the maximum."""

    model: ChatModel
    graph_input: Any
    max_attempts: int
    keep_checkpoints: int | None
    entry: LedgerEntry
    """The thread's ledger entry as read (or created) before invoking."""
    usage: dict[str, int] | None = None
    """The attempt log's sums as the step read them (`AttemptLog.tally`); None when it read none."""
    snapshot: Any = None
    """The thread's latest state as loaded, when nothing was written since (else None)."""


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def advance(
    store: Store,
    request: StepRequest,
    settings: Settings,
    *,
    model_factory: Callable[[str, Settings], ChatModel] = make_model,
    now: Callable[[], str] = _utc_now,
    charge: str | None = None,
) -> Outcome:
    """Creates or resumes a thread and advances it by one or more graph invocations.

    Each invocation makes at most one model request: LangGraph runs budget → reason
    and stops after reason (`interrupt_after`). Without `request.once` it invokes
    again until the thread is done, exhausted or a request fails.

    Args:
        store: An open store (`graph.store.open_store`).
        request: Thread, settings and mode.
        settings: Resolved settings.
        model_factory: Builds the model for the thread's model id (tests inject).
        now: Returns the current UTC time as ISO 8601 text.
        charge: A shared request cap (`request_caps`) charged with every request.

    Returns:
        The outcome; `exit_code` is 0 (ran or done), 3 (exhausted), 6 (the request
        failed; the attempt stays counted) or 7 (awaiting approval).

    Raises:
        graph.errors.BusyError: Another process holds the thread (exit 5).
        graph.errors.RefusedError: Stored data refused or identity mismatch (exit 4).
        graph.errors.UsageError: A paid model without `--live` (exit 2).
    """
    thread_id = request.thread_id
    config = {"configurable": {"thread_id": thread_id}}

    # Trace only with --trace: LangSmith's environment switches alone would upload tasks and
    # conversations. The refusal context first, so a busy lock is refused naming the database too.
    with (tracing_context(enabled=settings.trace), storage_damage_refused(store.location),
          store.locks.hold(thread_id)):
        check_tombstone(store, thread_id, task=request.spec.task, restart=request.restart_pruned)
        graph = graph_of(store)
        loaded = load_thread(graph, thread_id, store.location)
        entry = store.ledger.read(thread_id)
        if request.cancel:
            if loaded is not None:  # flags given with --cancel must name this thread
                request.spec.check_against(loaded.values["thread"], env_model=None)
            outcome = cancel(graph, config, store, loaded, thread_id, entry)
        elif request.reopen:
            if loaded is not None:  # flags given with --reopen must name this thread
                request.spec.check_against(loaded.values["thread"], env_model=None)
            outcome = reopen(graph, config, store, loaded, thread_id, entry)
        else:
            start = (_create(store, request, settings, entry, model_factory, now)
                     if loaded is None else _resume(graph, config, store, loaded, entry, request,
                                                    settings, model_factory))
            if not isinstance(start, Outcome):
                outcome, final = _invoke(graph, config, store, start, once=request.once,
                                         charge=charge)
                return remember_finished(store, outcome, snapshot=final)
            outcome = start
        if loaded is not None:  # a decision or cancellation wrote a checkpoint; a
            # finished thread from before its window is trimmed on its next invocation
            store.trim(thread_id, loaded.values["thread"]["keep_checkpoints"])
        return remember_finished(store, outcome) if request.cancel else outcome


def _invoke(graph: Any, config: dict[str, Any], store: Store, start: _Start, *, once: bool,
            charge: str | None) -> tuple[Outcome, Any]:
    """Runs the invocations (`graph.step.invocation.invoke_steps`), then closes the model.

    Returns:
        The outcome, and the thread's state as the last invocation left it (or None).
    """
    try:
        ctx = StepContext(config["configurable"]["thread_id"], store.ledger, start.model,
                          store.log, charge)
        return invoke_steps(graph, config, store, ctx, start.graph_input, once=once,
                            max_attempts=start.max_attempts, entry=start.entry,
                            usage=start.usage, keep_checkpoints=start.keep_checkpoints,
                            snapshot=start.snapshot)
    finally:
        close = getattr(start.model, "close", None)
        if close is not None:
            close()


def _create(store: Store, request: StepRequest, settings: Settings, entry: Any,
            model_factory: Callable[[str, Settings], ChatModel],
            now: Callable[[], str]) -> _Start:
    """Creates the thread's ledger row and initial state (the graph is not invoked yet).

    Raises:
        RefusedError: `damaged` (the ledger counts attempts without a checkpoint),
            `no_such_thread` (no task given).
        UsageError: Decisions for a thread that does not exist; a paid model without
            `--live`; a missing folder (`no_such_workspace`).
    """
    thread_id = request.thread_id
    check_unstarted(entry, store.location, thread_id)
    if request.spec.task is None:
        raise RefusedError("no such thread; pass --task to create it",
                           error_code=ErrorCode.NO_SUCH_THREAD, location=store.location,
                           thread_id=thread_id)
    if request.approve or request.reject:
        raise UsageError("does not exist, so it waits for no approval", thread_id=thread_id)
    graph_input = first_state(request.spec.new_thread(settings), created_at=now())
    max_attempts = graph_input["thread"]["max_attempts"]
    model = model_factory(graph_input["thread"]["model"], settings)
    created = store.ledger.create(thread_id, max_attempts)
    return _Start(model, graph_input, max_attempts, graph_input["thread"]["keep_checkpoints"],
                  created)


def _resume(graph: Any, config: dict[str, Any], store: Store, loaded: LoadedThread, entry: Any,
            request: StepRequest, settings: Settings,
            model_factory: Callable[[str, Settings], ChatModel]) -> _Start | Outcome:
    """Checks a stored thread before it is resumed; decides paused writes; reports finished.

    Returns:
        The outcome when nothing is to be invoked (decisions recorded, a finished
        thread), else what the resuming invocation needs (input None).

    Raises:
        RefusedError: `identity_mismatch`, or `damaged` (ledger cross-check).
        UsageError: Decisions for a thread that waits for none; a paid model without
            `--live`; the thread's folder missing here (`no_such_workspace`); a `--reason`
            holding the API key (I9: nothing stored).
    """
    thread_id, values = request.thread_id, loaded.values
    request.spec.check_against(values["thread"], settings.env_model)
    tally = store.log.tally(thread_id)  # one read of the log: checks, then the figures
    check_ledger(entry, values, thread_id, store.location, tally.last_attempt)
    store.log.covers(thread_id, values, tally.rows, tally.usage)
    figures = store.figures(thread_id, entry=entry, usage=tally.usage)  # reads nothing
    store.approvals.rows(thread_id)  # read with exact type checks, like every table
    pending = pending_review(loaded.snapshot)
    if pending is not None:
        if request.reason is not None:
            check_task(request.reason, "--reason")  # stored and told to the model: valid UTF-8
        key = scrub_key(settings)  # a decision needs no --live: the variable is enough
        if key and request.reason and key in request.reason:
            raise UsageError("--reason contains the API key (MANDAPI_API_KEY): a reason is "
                             "stored and sent; remove the key from it", thread_id=thread_id)
        return review(graph, config, store, loaded, thread_id, pending,
                      approve=list(request.approve), reject=list(request.reject),
                      reason=request.reason, figures=figures)
    if request.approve or request.reject:
        raise UsageError("not waiting for approval", thread_id=thread_id)
    if values["progress"]["status"] in FINAL_STATUSES:
        outcome = Outcome.from_state(thread_id, values, loaded.snapshot.next, figures)
        return remember_finished(store, outcome, checked=True)
    resolve_folder(values["thread"]["workspace"])
    model = model_factory(values["thread"]["model"], settings)
    snapshot = loaded.snapshot
    if store_migrated(graph, config, loaded):
        snapshot = None  # written since it was loaded
    return _Start(model, None, values["thread"]["max_attempts"],
                  values["thread"]["keep_checkpoints"], entry, tally.usage, snapshot)
