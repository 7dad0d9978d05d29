"""Checks on a stored thread before a step touches it: tombstone, ledger, storage damage.

Each refuses (exit 4) before anything is counted or written, so a refusal changes
nothing (INVARIANTS I13); `graph.checkpoints.load.check_stored_thread` reuses the ledger check
for `graph.verify` and `graph.copy`.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from graph.errors import ErrorCode, RefusedError, RunError, UsageError

if TYPE_CHECKING:
    from graph.store.rows import Tombstone

__all__ = ["check_ledger", "check_tombstone", "check_unstarted", "pruned_refusal",
           "storage_damage_refused"]


def check_ledger(entry: Any, values: dict[str, Any], thread_id: str, location: str,
                 logged: int) -> None:
    """Cross-checks a thread's ledger row against its checkpoint and attempt log.

    Args:
        entry: The thread's ledger row (`attempts`, `claimed`, `max_attempts`), or None.
        values: The thread's checked state values.
        thread_id: The thread.
        location: The database, for the message.
        logged: The highest attempt of the thread's attempt log (`SqlAttemptLog.last_attempt`).

    Raises:
        RefusedError: `damaged` when the row is missing, has another maximum, or counts
            fewer attempts, or fewer sent attempts, than the thread already shows.
    """
    def damaged(detail: str) -> RefusedError:
        return RefusedError(detail, error_code=ErrorCode.DAMAGED, location=location,
                            thread_id=thread_id)

    if entry is None:
        raise damaged("no attempt-ledger row; refusing to resume without its counted attempts")
    if entry.max_attempts != values["thread"]["max_attempts"]:
        raise damaged(f"the ledger's maximum ({entry.max_attempts}) differs from the "
                      f"checkpoint's ({values['thread']['max_attempts']})")
    if entry.attempts < values["progress"]["attempts"]:
        raise damaged(f"the ledger counts {entry.attempts} attempt(s), fewer than the "
                      f"checkpoint's {values['progress']['attempts']}")
    # Requests already made that the ledger must have claimed: the mirrored count (less
    # one counted-but-unsent attempt), every assistant message, every logged attempt.
    replies = sum(1 for m in values["messages"] if m["role"] == "assistant")
    needed = max(values["progress"]["attempts"] - 1, replies, logged)
    if entry.claimed < needed:
        raise damaged(f"the ledger has {entry.claimed} sent attempt(s), but the thread already "
                      f"shows {needed}; refusing to send uncounted requests")


def check_unstarted(entry: Any, location: str, thread_id: str) -> None:
    """Refuses to create a thread whose ledger already counts attempts (no checkpoint).

    Raises:
        RefusedError: `damaged`: starting over would give it a fresh budget.
    """
    if entry is not None and entry.attempts > 0:
        raise RefusedError(f"{entry.attempts} counted attempt(s) in the ledger but no "
                           "checkpoint; refusing to start it over",
                           error_code=ErrorCode.DAMAGED, location=location, thread_id=thread_id)


@contextmanager
def storage_damage_refused(location: str) -> Iterator[None]:
    """Gives every refusal of a step its database; reports SQLite corruption as `damaged`.

    A `RunError` gets `location` (`RunError.at`), so the message names the database
    once; a `sqlite3.DatabaseError` that is not operational (malformed pages) becomes a
    refusal (exit 4).

    Raises:
        RefusedError: `damaged`, for a `sqlite3.DatabaseError` that is not operational.
    """
    try:
        yield
    except RunError as exc:  # every refusal of the step names the database once
        exc.at(location=location)
        raise
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise
        raise RefusedError(f"the database is damaged ({exc})", error_code=ErrorCode.DAMAGED,
                           location=location) from None


def pruned_refusal(tombstone: Tombstone) -> RefusedError:
    """The refusal of a pruned thread (exit 4, `pruned`), naming the date.

    A tombstone's date is when the thread was pruned. A Redis expiry mark's is when the
    thread's keys expire, which may be still to come when its ledger hash or some keys are
    gone already (`graph.store.redis.ttl`): the message then says "expires", not "pruned
    on" a date that has not come.
    """
    when = tombstone.pruned_at
    try:
        future = datetime.fromisoformat(when) > datetime.now(UTC)
    except (TypeError, ValueError):  # a date of another form: shown as stored
        future = False
    said = (f"its keys expire on {when} and some may be gone already" if future
            else f"pruned on {when}")
    return RefusedError(f"{said} (status {tombstone.final_status}); "
                        "--restart-pruned starts it anew with a fresh budget",
                        error_code=ErrorCode.PRUNED, thread_id=tombstone.thread_id)


def check_tombstone(store: Any, thread_id: str, *, task: str | None, restart: bool) -> None:
    """Refuses a pruned thread (exit 4, `pruned`) unless it is restarted on purpose.

    With `restart` (`--restart-pruned`) and a task, the tombstone and any leftovers of
    an interrupted prune are removed, so the thread starts anew with a fresh budget.

    Raises:
        RefusedError: `pruned`, naming the date.
        UsageError: `--restart-pruned` without `--task`.
    """
    tombstone = store.tombstones.get(thread_id)
    if tombstone is None:
        return
    if not restart:
        raise pruned_refusal(tombstone)
    if task is None:
        raise UsageError("--restart-pruned needs --task: the pruned thread's task is gone")
    store.checkpointer.delete_thread(thread_id)  # leftovers of an interrupted prune
    store.ledger.delete(thread_id)
    store.tombstones.remove(thread_id)
    print(f"note: starting pruned thread {thread_id!r} anew with a fresh budget",
          file=sys.stderr)
