"""Invoking the graph for one thread: each invocation makes at most one model request.

`invoke_steps` runs budget → reason (stopping after reason, `interrupt_after`), with
`durability="sync"` so each node's checkpoint is on disk before the next node starts.
Before every resume the thread is routed so that it goes on at a node that cannot send
an uncounted request; a step that stored its output but failed before choosing the
next node is routed afterwards and reported as `step_failed` (exit 6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from graph.checkpoints.load import pending_review
from graph.errors import BusyError, ErrorCode, RefusedError
from graph.outcome import Figures, Outcome
from graph.step.checked_graph import refusal
from graph.step.repair import repair_routing, unrouted_output
from graph.store.migrations import state_write_back
from graph.store.rows import add_logged_usage
from nodes.context import AttemptLedger, AttemptLog, LedgerEntry, StepContext
from nodes.errors import InvocationRefusedError
from nodes.pairing import UnsafeHistoryError
from nodes.review import needs_review
from nodes.state import FINAL_STATUSES

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = ["invoke_steps", "store_migrated"]

_WRITER_OF_NEXT = {("tools",): "reason", ("reason",): "budget", ("budget",): "tools"}
"""For a checkpoint's next node, a node whose edges lead there (for `update_state`)."""


def store_migrated(graph: Any, config: dict[str, Any], loaded: Any) -> bool:
    """Writes a thread's state back in the current version before the step invokes the model.

    The rule of `graph.store.migrations` (rule 2): the channels its steps changed
    (`state_write_back`) become the thread's next checkpoint, written as the node before
    its next one (so the next node is unchanged). At `__start__` nothing is written: the
    stored input is pending writes, migrated again on the next load.

    Returns:
        True when a checkpoint was written (a snapshot read before is stale).
    """
    update = state_write_back(loaded.values, loaded.stored_version)
    writer = _WRITER_OF_NEXT.get(tuple(loaded.snapshot.next))
    if not update or writer is None:
        return False
    graph.update_state(config, update, as_node=writer)
    return True


def _ledger_entry(store: Store, thread_id: str) -> LedgerEntry:
    """The thread's ledger row, which the step checked before invoking.

    Raises:
        RefusedError: `damaged` when the row went missing since (deleted outside this program).
    """
    entry = store.ledger.read(thread_id)
    if entry is None:
        raise RefusedError("the attempt-ledger row went missing during the step",
                           error_code=ErrorCode.DAMAGED, location=store.location, thread_id=thread_id)
    return entry


class ClaimCounter:
    """The store's ledger as the nodes see it (`AttemptLedger`), counting successful claims.

    A step tells whether its invocation sent a request from the claims made through
    it, instead of reading the ledger row again: the thread's writer lock is held, so
    nothing else claims meanwhile. For the same reason the entry the last `count`
    returned is the ledger's row as it stands, which the step's figures reuse
    (`StepFigures`).

    Attributes:
        made: Claims that succeeded since the last `reset`.
        entry: The entry the last `count` returned (None before one).
    """

    def __init__(self, ledger: AttemptLedger) -> None:
        self._ledger = ledger
        self.made = 0
        self.entry: LedgerEntry | None = None

    def count(self, thread_id: str) -> LedgerEntry:
        """As the ledger's `count`; its entry is kept in `entry`."""
        self.entry = self._ledger.count(thread_id)
        return self.entry

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """As the ledger's `claim`; a success is counted in `made`."""
        claimed = self._ledger.claim(thread_id, attempt, charge)
        self.made += claimed
        return claimed

    def reset(self) -> None:
        """Starts counting anew (before each invocation)."""
        self.made = 0


class StepFigures:
    """The attempt log as the nodes see it (`AttemptLog`), adding up what the step records.

    The step's figures (`graph.store.base.Store.figures`) come from what it read before
    invoking (the ledger row, `AttemptLog.tally`'s usage) plus what it did since: the
    entry of its last `count` (`ClaimCounter.entry`) and the usage of each `reason` row
    recorded through here, summed as the log sums it. The writer lock is held, so
    nothing else writes the thread's rows meanwhile, and nothing is read again. Where
    the step read no usage (a new thread), or a `record` raised (whether its row was
    stored is not known), the usage is read once when the figures are asked for.

    Args:
        log: The store's attempt log.
        usage: The log's sums as the step read them, or None when it read none.
    """

    def __init__(self, log: AttemptLog, usage: dict[str, int] | None) -> None:
        self._log = log
        self.usage = None if usage is None else dict(usage)

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """As the log's `record`; a `reason` row's usage is added to `usage`."""
        try:
            self._log.record(thread_id, attempt, kind, payload)
        except BaseException:
            self.usage = None  # stored or not: read when the figures are asked for
            raise
        if self.usage is not None:
            add_logged_usage(self.usage, kind, payload)

    def used_tokens(self, thread_id: str) -> int:
        """As the log's `used_tokens`: read from the store (the token cap decides on it)."""
        return self._log.used_tokens(thread_id)


def _route_before_resume(graph: Any, config: dict[str, Any], store: Store, thread_id: str,
                        snapshot: Any = None) -> None:
    """Makes sure a resumed thread goes on at a node that cannot send uncounted requests.

    Args:
        graph: The compiled graph.
        config: The thread's config.
        store: The open store.
        thread_id: The thread.
        snapshot: The thread's latest state, when the caller read it and nothing was
            written since (the load before the first invocation, the read after the
            previous one); None reads it here.
    """
    if snapshot is None:
        snapshot = graph.get_state(config)
    if repair_routing(graph, config, store.location, snapshot):
        snapshot = graph.get_state(config)
    if snapshot.next == ("reason",) and not _ledger_entry(store, thread_id).unclaimed:
        # LangGraph would re-run reason (it raised or was killed) without passing
        # through budget. Its attempt is already claimed, so route the thread
        # back to budget to count a new one before anything is sent.
        graph.update_state(config, {"progress": {"outcome": "not_sent"}}, as_node="reason")


def step_failed(graph: Any, config: dict[str, Any], store: Store, thread_id: str,
                exc: Exception, figures: Callable[[], Figures]) -> Outcome:
    """Routes a step whose node stored its output but failed after it, and reports that.

    The output (a paid reply included) is kept and routed as its node's router says,
    so the next run continues from it.

    Returns:
        The thread's outcome with `error_code` `step_failed` (exit 6, or 3 if exhausted),
        its attempts and tokens from `figures` (`Store.figures`).
    """
    repair_routing(graph, config, store.location)
    snapshot = graph.get_state(config)
    return Outcome.step_failed(thread_id, snapshot.values, snapshot.next, exc, figures())


def _invoke_once(graph: Any, config: dict[str, Any], store: Store, ctx: StepContext,
                 graph_input: Any, figures: Callable[[], Figures]) -> Outcome | None:
    """One graph invocation; None when it ran, else the `step_failed` outcome.

    Raises:
        RefusedError: `damaged` when the conversation cannot be sent (its pairing).
    """
    store.take_failed_write(ctx.thread_id)  # one left by an earlier invocation is not ours
    try:
        try:
            graph.invoke(graph_input, config, context=ctx, durability="sync")
            store.raise_failed_write(ctx.thread_id)
        finally:
            store.commit()  # writes saved without a checkpoint after them (a raise, a pause)
    except UnsafeHistoryError as exc:
        raise RefusedError(f"the conversation cannot be sent: {exc}",
                           error_code=ErrorCode.DAMAGED, location=store.location,
                           thread_id=ctx.thread_id) from None
    except InvocationRefusedError as exc:  # never for a step's own context; kept as a RunError
        raise refusal(exc, store.location) from None
    except BusyError:
        raise  # the lease was lost: this writer may write nothing more, routing included
    except Exception as exc:
        if unrouted_output(graph.get_state(config)) is None:
            raise
        return step_failed(graph, config, store, ctx.thread_id, exc, figures)
    return None


def _snapshot_after(graph: Any, config: dict[str, Any], store: Store, ctx: StepContext) -> Any:
    """The thread after an invocation, routed; a write call waiting for review is paused now.

    One read of the thread, again only when something was written.
    """
    snapshot = graph.get_state(config)
    if repair_routing(graph, config, store.location, snapshot):
        snapshot = graph.get_state(config)
    if tuple(snapshot.next) == ("tools",) and needs_review(snapshot.values):
        # Say it now: run tools up to its review pause (no request; budget never runs).
        try:
            graph.invoke(None, config, context=ctx, durability="sync",
                         interrupt_before=["budget"])
        finally:
            store.commit()  # the pause's writes have no checkpoint after them
        snapshot = graph.get_state(config)
    return snapshot


def invoke_steps(graph: Any, config: dict[str, Any], store: Store, ctx: StepContext,
                 graph_input: Any, *, once: bool, max_attempts: int, entry: LedgerEntry,
                 usage: dict[str, int] | None = None, keep_checkpoints: int | None = None,
                 snapshot: Any = None) -> tuple[Outcome, Any]:
    """Invokes the graph once (`once`) or until the thread stops; returns its outcome.

    After each invocation the thread is trimmed to its latest `keep_checkpoints`
    checkpoints, its new ones already durable: on SQLite each checkpoint's own
    transaction trims (`Store.keep_window`), elsewhere `Store.trim` runs after it.

    Args:
        graph: The compiled graph with the thread's checkpointer.
        config: The thread's config.
        store: The open store (ledger, location).
        ctx: The runtime context (thread, ledger, model, log, request cap); the nodes
            get its ledger through a `ClaimCounter`, which tells whether an invocation
            sent its request.
        graph_input: The new thread's initial state, or None to resume.
        once: Stop after one invocation.
        max_attempts: The thread's maximum, which bounds the invocations.
        entry: The thread's ledger entry as the step read (or created) it before invoking.
        usage: The attempt log's sums as the step read them (`AttemptLog.tally`), or None
            when it read none (a new thread): the outcome's figures are these plus what
            the step did (`StepFigures`), read again only where they are not known.
        keep_checkpoints: The thread's checkpoint window (None: keep all).
        snapshot: The thread's latest state as the caller loaded it, when nothing
            was written since (saves reading it again); None reads it.

    Returns:
        The outcome: exit 0 (ran or done), 3 (exhausted), 6 (the request failed or
        `step_failed`) or 7 (a write call waits for review); `held_back` when the
        counted attempt could not be claimed (a full request cap). And the thread's
        state as read after the last invocation (`graph.get_state`, not yet checked as
        a load checks it), or None when the invocation failed before it was read.
    """
    thread_id = ctx.thread_id
    claims = ClaimCounter(ctx.ledger)
    log = StepFigures(ctx.log, usage)
    ctx = replace(ctx, ledger=claims, log=log)

    def figures() -> Figures:
        if log.usage is None:  # read once; later records add to it
            log.usage = store.log.usage(thread_id)
        return store.figures(thread_id, entry=claims.entry or entry, usage=log.usage)

    store.keep_window(thread_id, keep_checkpoints)
    for _ in range(2 * max_attempts + 2):
        if graph_input is None:
            _route_before_resume(graph, config, store, thread_id, snapshot)
        claims.reset()
        failed = _invoke_once(graph, config, store, ctx, graph_input, figures)
        if failed is not None:
            store.trim_after_step(thread_id, keep_checkpoints)
            return failed, None
        graph_input = None
        snapshot = _snapshot_after(graph, config, store, ctx)
        store.trim_after_step(thread_id, keep_checkpoints)
        pending = pending_review(snapshot)
        if pending is not None:
            return Outcome.waiting(thread_id, snapshot.values, pending, {}, figures()), snapshot
        outcome = Outcome.after_invocation(thread_id, snapshot.values, snapshot.next,
                                           claims.made > 0, figures())
        if (outcome.held_back or outcome.error_code is not None or once
                or outcome.status in FINAL_STATUSES):
            return outcome, snapshot
    return outcome, snapshot
