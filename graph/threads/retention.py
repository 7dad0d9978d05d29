"""Retention: which finished threads to delete, and deleting them whole.

A thread is pruned only when it can never continue (`done`, `exhausted`, `cancelled`,
with no pending step) and its last update (the ledger's `updated_at`: its last
counted or claimed attempt, or its cancellation) is older than the age for its
status. Threads that can continue are never deleted, whatever their age
(INVARIANTS I10).

Deleting one thread is two commits (`graph.store.base.Store.bury`): first, in one
transaction, a tombstone is written and the thread's ledger row, attempt-log rows and
decisions are deleted; then LangGraph's own `delete_thread` removes its checkpoints.
From the first commit on, the thread is refused as `pruned`, so a crash between the two
leaves it gone, never half-usable; the next prune sweeps the leftover checkpoints of
tombstoned threads.

Every thread left is then trimmed to its checkpoint window (`keep_checkpoints`,
`graph.store.sql.window`), so a thread from before windows existed, or one that has
not stepped since, gives its older checkpoints back without waiting for its next step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from graph.checkpoints.load import graph_of, load_thread
from graph.errors import BusyError, RefusedError
from graph.store.rows import Tombstone

if TYPE_CHECKING:  # the graph's modules load only when threads are read
    from graph.store.base import Store

__all__ = ["Candidate", "PruneReport", "prune", "retain", "select"]

@dataclass(frozen=True)
class Candidate:
    """A thread selected for deletion: id, final status, last update (UTC, ISO 8601)."""

    thread_id: str
    status: str
    updated_at: str


def select(store: Store, *, completed: timedelta, failed: timedelta,
           now: datetime | None = None) -> tuple[list[Candidate], list[str]]:
    """Chooses the threads to delete; reads only.

    A thread already tombstoned (an expired Redis thread, swept by `prune`) is not a
    candidate; one whose tombstone or expiry mark is damaged is noted as unreadable,
    as on `--dry-run`.

    Returns:
        The candidates (by thread id) and one note per thread skipped because it could
        not be read (such a thread is never deleted).
    """
    now = now or datetime.now(UTC)
    chosen, notes = [], []
    for thread_id, updated_at in sorted(store.ledger.updated_at().items()):
        try:  # a tombstone or expiry mark `graph.run` would refuse keeps the thread too
            buried = store.tombstones.get(thread_id) is not None
            loaded = load_thread(graph_of(store), thread_id, store.location)
        except RefusedError as exc:
            notes.append(f"kept {thread_id!r}: unreadable ({exc.error_code}): {exc.message}")
            continue
        if buried or loaded is None or not loaded.finished:
            continue
        status = loaded.values["progress"]["status"]
        age = now - datetime.fromisoformat(updated_at)
        limit = {"done": completed, "exhausted": failed, "cancelled": failed}.get(status)
        if limit is not None and age >= limit:
            chosen.append(Candidate(thread_id, status, updated_at))
    return chosen, notes


def _trim_windows(store: Store, skip: set[str]) -> tuple[int, list[str]]:
    """Trims every thread but `skip` to its checkpoint window, each holding its lock.

    Returns:
        How many checkpoints were deleted, and one note per thread busy in another
        process. An unreadable thread is left as it is (`select` notes it already).
    """
    deleted, notes = 0, []
    for thread_id in sorted(set(store.ledger.updated_at()) - skip):
        try:
            with store.locks.hold(thread_id):
                loaded = load_thread(graph_of(store), thread_id, store.location)
                if loaded is not None:
                    deleted += store.trim(thread_id, loaded.values["thread"]["keep_checkpoints"])
        except BusyError:
            notes.append(f"not trimmed {thread_id!r}: busy in another process")
        except RefusedError:
            continue
    return deleted, notes


@dataclass
class PruneReport:
    """What one retention pass selected and did (`retain`).

    Attributes:
        candidates: The threads selected for deletion (by thread id), with the status
            and last update each had when selected.
        dry_run: Only selected: nothing was deleted or trimmed.
        pruned: Thread ids deleted (empty on a dry run).
        skipped: One note per thread kept although it was considered: unreadable, or
            busy in another process.
        swept: Threads whose leftovers from an interrupted prune were deleted.
        trimmed: Older checkpoints deleted beyond the other threads' windows.
        freed_bytes: Space given back to the file system (SQLite) or reported freed.
    """

    candidates: list[Candidate]
    dry_run: bool
    pruned: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    swept: int = 0
    trimmed: int = 0
    freed_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """What `graph.prune --json` prints, less `exit_code`.

        Returns:
            On a dry run `would_prune` (the candidates as dicts) and `skipped`; else
            `pruned`, `skipped`, `swept`, `trimmed` and `freed_bytes`.
        """
        if self.dry_run:
            return {"would_prune": [asdict(c) for c in self.candidates], "skipped": self.skipped}
        return {"pruned": self.pruned, "skipped": self.skipped, "swept": self.swept,
                "trimmed": self.trimmed, "freed_bytes": self.freed_bytes}


def retain(store: Store, *, completed: timedelta, failed: timedelta,
           dry_run: bool = False) -> PruneReport:
    """Selects finished threads older than the ages (`select`), then deletes them (`prune`).

    Args:
        store: The open store (read-only is enough with `dry_run`).
        completed: Age after which a `done` thread is deleted.
        failed: Age after which an `exhausted` or `cancelled` thread is deleted.
        dry_run: Only select.

    Returns:
        The report; the notes of `select` come before those of `prune` in `skipped`.
    """
    candidates, notes = select(store, completed=completed, failed=failed)
    if dry_run:
        return PruneReport(candidates, dry_run=True, skipped=notes)
    done = prune(store, candidates)
    return PruneReport(candidates, dry_run=False, pruned=done["pruned"],
                       skipped=notes + done["skipped"], swept=done["swept"],
                       trimmed=done["trimmed"], freed_bytes=done["freed_bytes"])


def prune(store: Store, candidates: list[Candidate]) -> dict[str, Any]:
    """Deletes `candidates`, trims the rest (see module doc), reclaims space on SQLite.

    A thread another process is working on is skipped. Returns `pruned` (thread ids),
    `skipped` (notes), `swept` (leftovers of interrupted prunes), `trimmed` (older
    checkpoints deleted beyond the windows) and `freed_bytes`.
    """
    before = store.used_bytes()
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
    trimmed, notes = _trim_windows(store, set(pruned))
    store.reclaim_space()
    return {"pruned": pruned, "skipped": skipped + notes, "swept": swept, "trimmed": trimmed,
            "freed_bytes": max(0, before - store.used_bytes())}
