"""Retention: which finished threads to delete, and deleting them whole.

A thread is pruned only when it can never continue (`done`, `exhausted`, `cancelled`,
with no pending step) and its last update (the ledger's `updated_at`: its last
counted or claimed attempt, or its cancellation) is older than the age for its
status. Threads that can continue are never deleted, whatever their age
(INVARIANTS I10).

Deleting one thread is two commits: first, in one transaction, a tombstone is written
and the thread's ledger row and attempt-log rows are deleted; then LangGraph's own
`delete_thread` removes its checkpoints. From the first commit on, the thread is
refused as `pruned`, so a crash between the two leaves it gone, never half-usable; the
next prune sweeps the leftover checkpoints of tombstoned threads.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from graph.errors import BusyError, RefusedError, UsageError
from graph.factory import build_graph
from graph.loading import load_thread
from graph.sql import transaction

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


def select(store: Any, *, completed: timedelta, failed: timedelta,
           now: datetime | None = None) -> tuple[list[Candidate], list[str]]:
    """Chooses the threads to delete; reads only.

    Returns:
        The candidates (by thread id) and one note per thread skipped because it could
        not be read (such a thread is never deleted).
    """
    now = now or datetime.now(UTC)
    graph = build_graph(store.checkpointer)
    chosen, notes = [], []
    for thread_id, updated_at in sorted(store.ledger.updated_at().items()):
        try:
            loaded = load_thread(graph, thread_id, store.location)
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


def _bury(store: Any, candidate: Candidate, pruned_at: str) -> None:
    """Tombstone in, ledger row and attempt log out, in one transaction."""
    conn = store.conn
    statements = [
        ("INSERT INTO thread_tombstones VALUES (?, ?, ?) ON CONFLICT (thread_id) DO NOTHING",
         (candidate.thread_id, candidate.status, pruned_at)),
        ("DELETE FROM attempt_ledger WHERE thread_id = ?", (candidate.thread_id,)),
        ("DELETE FROM attempt_log WHERE thread_id = ?", (candidate.thread_id,)),
        ("DELETE FROM write_approvals WHERE thread_id = ?", (candidate.thread_id,)),
    ]
    placeholder = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    with transaction(conn):
        for sql, params in statements:
            conn.execute(sql.replace("?", placeholder), params)


def _sweep(store: Any) -> int:
    """Deletes leftover checkpoints of tombstoned threads (an interrupted prune)."""
    rows = store.conn.execute(
        "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id IN "
        "(SELECT thread_id FROM thread_tombstones)").fetchall()
    for (thread_id,) in rows:
        store.checkpointer.delete_thread(thread_id)
    return len(rows)


def prune(store: Any, candidates: list[Candidate]) -> dict[str, Any]:
    """Deletes `candidates` (see module doc) and reclaims space on SQLite when worth it.

    A thread another process is working on is skipped. Returns `pruned` (thread ids),
    `skipped` (notes), `swept` (leftovers of interrupted prunes) and `freed_bytes`.
    """
    before = _size(store)
    pruned, skipped = [], []
    pruned_at = datetime.now(UTC).isoformat(timespec="seconds")
    for candidate in candidates:
        try:
            with store.locks.hold(candidate.thread_id):
                _bury(store, candidate, pruned_at)
                store.checkpointer.delete_thread(candidate.thread_id)
        except BusyError:
            skipped.append(f"kept {candidate.thread_id!r}: busy in another process")
            continue
        pruned.append(candidate.thread_id)
    swept = _sweep(store)
    _reclaim(store)
    return {"pruned": pruned, "skipped": skipped, "swept": swept,
            "freed_bytes": max(0, before - _size(store))}


def _size(store: Any) -> int:
    """Bytes in use: on SQLite (page_count - freelist_count) * page_size; else 0."""
    if not isinstance(store.conn, sqlite3.Connection):
        row = store.conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0])
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    free = store.conn.execute("PRAGMA freelist_count").fetchone()[0]
    size = store.conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def _reclaim(store: Any) -> None:
    """VACUUMs a SQLite file when over a quarter of it (and 1 MiB) is free pages."""
    if not isinstance(store.conn, sqlite3.Connection):
        return  # PostgreSQL's autovacuum reclaims space
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    free = store.conn.execute("PRAGMA freelist_count").fetchone()[0]
    size = store.conn.execute("PRAGMA page_size").fetchone()[0]
    if free * size >= 1 << 20 and free * 4 >= pages:
        try:
            store.conn.execute("VACUUM")
        except sqlite3.OperationalError:
            pass  # another process is using the file; the free pages are reused anyway
