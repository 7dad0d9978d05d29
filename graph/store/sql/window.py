"""Each thread keeps only its latest checkpoints: the window trimmed as it steps.

A thread's `keep_checkpoints` (fixed at creation, `--keep-checkpoints`) says how many
of its latest checkpoints stay; None keeps them all. After a step, once its checkpoints
are durable (`durability="sync"`), `trim` deletes the older ones in one transaction:
their pending writes, on PostgreSQL the channel blobs no kept checkpoint references,
and their rows in `checkpoint_digests`. The oldest kept checkpoint loses its parent
pointer, as with LangGraph's own `PostgresSaver.prune`.

What a thread needs is always kept: the latest checkpoint (the one `get_tuple` loads)
with its pending writes, which hold a paused review's interrupt and any finished
task's output, is never deleted (a window is at least 1), and the step's routing before
a resume reads only that checkpoint and the ledger. The ledger, attempt log and
decisions are other tables and are never touched, so a kill mid-trim (the transaction
rolls back) leaves the thread as it was, budget included.

On SQLite the window is kept inside each checkpoint's own transaction instead
(`trim_in_transaction`, called by `graph.store.saver.sqlite_saver` for threads whose
window the step registered, `Store.keep_window`): the new checkpoint and the deletion
of the one that falls out of the window commit together, so trimming costs no commit
of its own, a kill anywhere leaves both or neither, and the thread never holds more
than its window. A kill there loses that checkpoint with its trim, as a kill just
before it would: a reply it held is spent, never sent again uncounted. Writes that
LangGraph saves for a checkpoint after the next one was put (a background thread; they
are never read again) are trimmed in their own transaction the same way. This path
leaves the oldest kept checkpoint's parent pointer as it is, naming a checkpoint that
is gone (LangGraph loads none for it; `graph.threads.history` reads the window without
it): SQLite rewrites a whole row, dozens of pages of state, to change one column, which
here would double the bytes every checkpoint writes.

With a window of 1 on PostgreSQL, LangGraph's own `prune(strategy="keep_latest")` does
the checkpoints, writes and blobs in its transaction, and the digests of the deleted
checkpoints follow in a second one (a kill in between leaves digests of deleted
checkpoints, which nothing reads and the next trim deletes, even one with nothing else
to delete). `SqliteSaver` has no
`prune`, so SQLite always uses the statements here.

Only the root namespace (`checkpoint_ns = ''`) is trimmed: the graph has no subgraphs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graph.store.sql.conn import PostgresSql, Sql
from graph.store.sql.schema import CHECKPOINTS, DIGESTS

__all__ = ["WRITES", "count", "execute", "trim", "trim_in_transaction"]

_CUTOFF = (f"SELECT checkpoint_id FROM {CHECKPOINTS} WHERE thread_id = ? AND checkpoint_ns = '' "
           "ORDER BY checkpoint_id DESC LIMIT 1 OFFSET ?")
"""The oldest checkpoint id to keep (the `keep`-th latest), or no row when fewer exist."""
_OLDER = (f"SELECT 1 FROM {CHECKPOINTS} WHERE thread_id = ? AND checkpoint_ns = '' "
          "AND checkpoint_id < ? LIMIT 1")
_DIGESTS = f"DELETE FROM {DIGESTS} WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id < ?"
_OLDEST = (f"SELECT min(checkpoint_id) FROM {CHECKPOINTS} WHERE thread_id = ? "
           "AND checkpoint_ns = ''")
_STALE_DIGESTS = (f"SELECT 1 FROM {DIGESTS} WHERE thread_id = ? AND checkpoint_ns = '' "
                  "AND checkpoint_id < ? LIMIT 1")
_CHECKPOINTS = (f"DELETE FROM {CHECKPOINTS} WHERE thread_id = ? AND checkpoint_ns = '' "
                "AND checkpoint_id < ?")
_COUNT = f"SELECT count(*) FROM {CHECKPOINTS} WHERE thread_id = ? AND checkpoint_ns = ''"
_PARENTS = (f"UPDATE {CHECKPOINTS} SET parent_checkpoint_id = NULL WHERE thread_id = ? "
            "AND checkpoint_ns = '' AND parent_checkpoint_id < ?")


def _writes(table: str) -> str:
    return f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id < ?"


_POSTGRES_BLOBS = """
DELETE FROM checkpoint_blobs b WHERE b.thread_id = ? AND b.checkpoint_ns = '' AND NOT EXISTS (
    SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = ''
    AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"""
"""Blobs of the thread that no kept checkpoint references (run after the deletes)."""

WRITES = {"sqlite": _writes("writes"), "postgres": _writes("checkpoint_writes")}
"""LangGraph's pending-writes table on each backend."""


def _cutoff(sql: Sql, thread_id: str, keep: int) -> str | None:
    """The oldest checkpoint to keep, when there is an older one to delete; else None."""
    cutoff = sql.value(_CUTOFF, (thread_id, keep - 1))
    if cutoff is None or sql.value(_OLDER, (thread_id, cutoff)) is None:
        return None
    return str(cutoff)


def execute(sql: Sql, statement: str, params: tuple[Any, ...]) -> int:
    """Runs one statement of a trim; returns the rows it changed (a seam for kill tests)."""
    return sql.run(statement, params).rowcount


def trim(sql: Sql, checkpointer: Any, thread_id: str, keep: int | None,
         fence: Callable[[str], str] | None = None) -> int:
    """Deletes the thread's checkpoints older than its latest `keep` (see module doc).

    Call it holding the thread's writer lock, after a step.

    Args:
        sql: The store's own connection (same database as the checkpointer).
        checkpointer: The store's LangGraph saver (its `prune`, where it has one).
        thread_id: The thread.
        keep: How many latest checkpoints stay (at least 1); None keeps all.
        fence: The store's fencing hook (`graph.store.base.WriterLocks.fence`), called
            before anything is deleted; None for a trim on its own (tests).

    Returns:
        How many checkpoints were deleted.

    Raises:
        BusyError: `fence` refused: another process holds the thread (exit 5); nothing
            was deleted.
    """
    if keep is None:
        return 0
    if fence is not None:
        fence(thread_id)
    if keep < 1:
        raise ValueError(f"a checkpoint window keeps at least 1, not {keep}")
    postgres = isinstance(sql, PostgresSql)
    if _cutoff(sql, thread_id, keep) is None:
        _sweep_digests(sql, thread_id)
        return 0
    if postgres and keep == 1 and hasattr(checkpointer, "prune"):
        return _prune_keep_latest(sql, checkpointer, thread_id)
    with sql.transaction():
        cutoff = _cutoff(sql, thread_id, keep)  # again, inside the transaction
        if cutoff is None:
            return 0
        execute(sql, WRITES["postgres" if postgres else "sqlite"], (thread_id, cutoff))
        deleted = execute(sql, _CHECKPOINTS, (thread_id, cutoff))
        execute(sql, _PARENTS, (thread_id, cutoff))
        execute(sql, _DIGESTS, (thread_id, cutoff))
        if postgres:
            execute(sql, _POSTGRES_BLOBS, (thread_id,))
    return deleted


def trim_in_transaction(sql: Sql, thread_id: str, keep: int) -> int:
    """Deletes the thread's checkpoints older than its latest `keep`, in the open transaction.

    For SQLite, where a checkpoint's `put` runs in a transaction on the same connection
    (see module doc): the caller holds that transaction open and commits it, and has
    passed the fencing hook already (`graph.store.saver.CheckedSaver.put`, `put_writes`). Pending
    writes and digests older than the window go too, even when no checkpoint does (a
    late write for a checkpoint already trimmed).

    Returns:
        How many checkpoints were deleted.
    """
    if keep < 1:
        raise ValueError(f"a checkpoint window keeps at least 1, not {keep}")
    cutoff = sql.value(_CUTOFF, (thread_id, keep - 1))
    if cutoff is None:
        return 0
    execute(sql, WRITES["sqlite"], (thread_id, cutoff))
    deleted = execute(sql, _CHECKPOINTS, (thread_id, cutoff))
    execute(sql, _DIGESTS, (thread_id, cutoff))
    return deleted


def _sweep_digests(sql: Sql, thread_id: str) -> None:
    """Deletes digests older than the oldest checkpoint: left by a kill after `prune`."""
    oldest = sql.value(_OLDEST, (thread_id,))
    if oldest is not None and sql.value(_STALE_DIGESTS, (thread_id, oldest)) is not None:
        execute(sql, _DIGESTS, (thread_id, oldest))


def _prune_keep_latest(sql: Sql, checkpointer: Any, thread_id: str) -> int:
    """A window of 1 on PostgreSQL: LangGraph's `prune`, then the deleted checkpoints' digests."""
    latest = sql.value(_CUTOFF, (thread_id, 0))
    before = sql.value(f"SELECT count(*) FROM {CHECKPOINTS} WHERE thread_id = ? "
                       "AND checkpoint_ns = ''", (thread_id,))
    checkpointer.prune([thread_id], strategy="keep_latest")
    with sql.transaction():
        execute(sql, _DIGESTS, (thread_id, latest))
    return int(before) - 1


def count(sql: Sql, thread_id: str) -> int:
    """How many checkpoints the thread has stored (its window), read without decoding any."""
    return int(sql.value(_COUNT, (thread_id,)) or 0)
