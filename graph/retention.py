"""Retention: which finished threads to delete, and deleting them whole.

A thread is pruned only when it can never continue (`done`, `exhausted`, `cancelled`,
with no pending step) and its last update (the ledger's `updated_at`: its last
counted or claimed attempt, or its cancellation) is older than the age for its
status. Threads that can continue are never deleted, whatever their age
(INVARIANTS I10).

Deleting one thread is two commits (`graph.database.Store.bury`): first, in one
transaction, a tombstone is written and the thread's ledger row, attempt-log rows and
decisions are deleted; then LangGraph's own `delete_thread` removes its checkpoints.
From the first commit on, the thread is refused as `pruned`, so a crash between the two
leaves it gone, never half-usable; the next prune sweeps the leftover checkpoints of
tombstoned threads.

Every thread left is then trimmed to its checkpoint window (`keep_checkpoints`,
`graph.checkpoint_window`), so a thread from before windows existed, or one that has
not stepped since, gives its older checkpoints back without waiting for its next step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from graph.database import Store
from graph.errors import BusyError, RefusedError, UsageError
from graph.loading import load_thread
from graph.tombstones import Tombstone

_AGE = re.compile(r"([0-9]+)([smhd])")  # ASCII digits only, like the documented form
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_age(text: str) -> timedelta:
    """Parses `90s`, `30m`, `24h` or `7d`.

    Raises:
        UsageError: Anything else (exit 2).
    """
    match = _AGE.fullmatch(text)
    if not match:
        raise UsageError(f"age {text!r} must look like 90s, 30m, 24h or 7d")
    try:
        age = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    except (OverflowError, ValueError):  # ValueError: past 4,300 digits (CVE-2020-10735)
        raise UsageError(f"age {text[:40]!r} is too large") from None
    if age > timedelta(days=36_500):
        raise UsageError(f"age {text!r} is more than a hundred years")
    return age


@dataclass(frozen=True)
class Candidate:
    """A thread selected for deletion: id, final status, last update (UTC, ISO 8601)."""

    thread_id: str
    status: str
    updated_at: str


def select(store: Store, *, completed: timedelta, failed: timedelta,
           now: datetime | None = None) -> tuple[list[Candidate], list[str]]:
    """Chooses the threads to delete; reads only.

    Returns:
        The candidates (by thread id) and one note per thread skipped because it could
        not be read (such a thread is never deleted).
    """
    now = now or datetime.now(UTC)
    chosen, notes = [], []
    for thread_id, updated_at in sorted(store.ledger.updated_at().items()):
        try:
            loaded = load_thread(store.graph, thread_id, store.location)
        except RefusedError as exc:
            notes.append(f"kept {thread_id!r}: unreadable ({exc.error_code}): {exc.message}")
            continue
        if loaded is None or loaded.snapshot.next or loaded.snapshot.tasks:
            continue
        status = loaded.values["progress"]["status"]
        age = now - datetime.fromisoformat(updated_at)
        limit = {"done": completed, "exhausted": failed, "cancelled": failed}.get(status)
        if limit is not None and age >= limit:
            chosen.append(Candidate(thread_id, status, updated_at))
    return chosen, notes


def trim_windows(store: Store, skip: set[str]) -> tuple[int, list[str]]:
    """Trims every thread but `skip` to its checkpoint window, each holding its lock.

    Returns:
        How many checkpoints were deleted, and one note per thread busy in another
        process. An unreadable thread is left as it is (`select` notes it already).
    """
    deleted, notes = 0, []
    for thread_id in sorted(set(store.ledger.updated_at()) - skip):
        try:
            with store.locks.hold(thread_id):
                loaded = load_thread(store.graph, thread_id, store.location)
                if loaded is not None:
                    deleted += store.trim(thread_id, loaded.values["thread"]["keep_checkpoints"])
        except BusyError:
            notes.append(f"not trimmed {thread_id!r}: busy in another process")
        except RefusedError:
            continue
    return deleted, notes


def prune(store: Store, candidates: list[Candidate]) -> dict[str, Any]:
    """Deletes `candidates`, trims the rest (see module doc), reclaims space on SQLite.

    A thread another process is working on is skipped. Returns `pruned` (thread ids),
    `skipped` (notes), `swept` (leftovers of interrupted prunes), `trimmed` (older
    checkpoints deleted beyond the windows) and `freed_bytes`.
    """
    before = store.sql.used_bytes()
    pruned, skipped = [], []
    pruned_at = datetime.now(UTC).isoformat(timespec="seconds")
    for candidate in candidates:
        try:
            with store.locks.hold(candidate.thread_id):
                store.bury(Tombstone(candidate.thread_id, candidate.status, pruned_at))
        except BusyError:
            skipped.append(f"kept {candidate.thread_id!r}: busy in another process")
            continue
        pruned.append(candidate.thread_id)
    swept = store.sweep_buried()
    trimmed, notes = trim_windows(store, set(pruned))
    store.sql.reclaim_space()
    return {"pruned": pruned, "skipped": skipped + notes, "swept": swept, "trimmed": trimmed,
            "freed_bytes": max(0, before - store.sql.used_bytes())}
