"""Keeping the summary of a finished thread, so that `graph.store.poll` can answer for it next time.

A summary is stored only from a thread's latest checkpoint as the full path reads and
checks it (`graph.checkpoints.load.load_thread`, the ledger cross-check, the decisions), while
the invocation still holds the thread's writer lock: right after the step that
finished the thread, and on any later full-path answer whose summary is missing or
stale (a database from before summaries gains them this way). The same on SQLite and
PostgreSQL (`graph.store.sql.summaries`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.checkpoints.load import check_snapshot, graph_of, is_finished, load_thread, pending_review
from graph.errors import RunError
from graph.outcome import Outcome
from graph.store.checks import check_ledger
from graph.store.failures import driver_errors
from nodes.state import FINAL_STATUSES

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = ["remember_finished"]



def remember_finished(store: Store, outcome: Outcome, *, checked: bool = False,
                      snapshot: Any = None) -> Outcome:
    """Stores the summary of a finished thread (`graph.store.sql.summaries`); returns `outcome` as is.

    A finished thread with nothing pending also gets its time-to-live on Redis
    (`graph.store.redis.ttl`; nothing elsewhere), even when no summary is stored.

    Nothing is stored for a thread that is not done, exhausted or cancelled, on a store
    without summaries, or when the thread fails a check or the write fails: the next
    invocation then takes the full path, which checks and reports it.

    Args:
        store: The open store; the caller holds the thread's writer lock.
        outcome: The invocation's outcome.
        checked: `outcome` is `Outcome.from_state` of the latest checkpoint after every
            check of the full path (`graph.step.advance`); otherwise the thread is
            checked here.
        snapshot: The thread's latest state as the step already read it after its last
            invocation (`graph.step.invocation.invoke_steps`): checked here as a load
            checks it (`graph.checkpoints.load.check_snapshot`), not read again. None
            reads it (`load_thread`).
    """
    thread_id = outcome.thread_id
    if thread_id is not None and outcome.status and is_finished(outcome.status, outcome.next_nodes):
        store.expire_finished(thread_id, outcome.status)  # Redis: `graph.store.redis.ttl`
    if store.summaries is None or thread_id is None or outcome.status not in FINAL_STATUSES:
        return outcome
    expected: tuple[type[Exception], ...] = (RunError, *driver_errors())
    try:
        summary = outcome if checked else _checked_summary(store, thread_id, snapshot)
        if summary is not None:
            store.summaries.keep(thread_id, summary)
    except expected:
        pass  # no summary: the next invocation takes the full path
    return outcome


def _checked_summary(store: Store, thread_id: str, snapshot: Any = None) -> Outcome | None:
    """The finished thread's outcome as the full path answers it, checked now.

    From `snapshot` (the state the step read last) when given, else read here.
    """
    graph = graph_of(store)
    loaded = (load_thread(graph, thread_id, store.location) if snapshot is None
              else check_snapshot(graph, snapshot, thread_id, store.location))
    if loaded is None or loaded.values["progress"]["status"] not in FINAL_STATUSES:
        return None
    tally = store.log.tally(thread_id)  # one read of the log: checks, then the figures
    entry = store.ledger.read(thread_id)
    check_ledger(entry, loaded.values, thread_id, store.location, tally.last_attempt)
    store.log.covers(thread_id, loaded.values, tally.rows, tally.usage)
    store.approvals.rows(thread_id)
    if pending_review(loaded.snapshot) is not None:
        return None
    return Outcome.from_state(thread_id, loaded.values, loaded.snapshot.next,
                              store.figures(thread_id, entry=entry, usage=tally.usage))
