"""Copying threads between two open stores, whole and checked (the function behind `graph.copy`).

Every checkpoint (oldest first, with its pending writes), the ledger row (first, so an
interrupted copy leaves a thread that is refused, never one with a fresh budget), the
attempt log, write-approval decisions, tombstones and the request caps go through
LangGraph's own checkpointer API on both sides, so the copy is re-serialized with fresh
checksums and a copied thread resumes exactly where it stopped. A finished thread
copied to Redis gets its time-to-live there, counted from the copy.
"""

from __future__ import annotations

from typing import Any

from graph.checkpoints.load import check_stored_thread, graph_of
from graph.errors import ErrorCode, RefusedError
from graph.store.base import Store

__all__ = ["check_copy_source", "copy_threads", "thread_exists"]


def thread_exists(store: Store, thread_id: str) -> bool:
    """Whether `thread_id` has a checkpoint, a ledger row or a tombstone in `store`."""
    return (store.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}}) is not None
            or store.ledger.read(thread_id) is not None
            or store.tombstones.get(thread_id) is not None)


def _all_threads(store: Store) -> list[str]:
    """Every thread id with a checkpoint, a ledger row or a tombstone.

    A thread whose ledger row is gone is checked (and refused), never skipped.
    """
    return store.thread_ids()


def check_copy_source(src: Store, thread_ids: list[str] | None = None
                      ) -> dict[str, dict[str, Any] | None]:
    """Loads and checks every thread a copy would take from `src`, before any target exists.

    Args:
        src: The source store.
        thread_ids: The threads; None: every thread (tombstones included).

    Returns:
        Each thread id, sorted, with its loaded state values (None for a thread known
        only by its tombstone); a finished thread's values carry its final status.

    Raises:
        RefusedError: A thread is missing at the source (`no_such_thread`) or fails its
            checks there (`damaged`, `incompatible`, ...).
    """
    checked: dict[str, dict[str, Any] | None] = {}
    for thread_id in sorted(thread_ids) if thread_ids else _all_threads(src):
        tombstone = src.tombstones.get(thread_id)
        loaded = check_stored_thread(src, graph_of(src), thread_id)
        if loaded is None and tombstone is None:
            raise RefusedError(f"no such thread {thread_id!r} in {src.location}",
                               error_code=ErrorCode.NO_SUCH_THREAD)
        checked[thread_id] = None if loaded is None else {
            "values": loaded.values, "finished": loaded.finished}
    return checked


def copy_threads(src: Store, dst: Store, thread_ids: list[str] | None = None) -> list[str]:
    """Copies threads from store `src` to store `dst` (see module doc).

    Every source thread is checked first (`check_copy_source`), then the target: nothing is
    written until every thread passed both.

    Returns:
        The copied thread ids, sorted.

    Raises:
        RefusedError: A thread exists at the target (`exists`), is missing at the source
            (`no_such_thread`), or fails its checks at the source.
    """
    checked = check_copy_source(src, thread_ids)
    for thread_id, found in checked.items():
        if found is not None:
            _check_log_fits(src, dst, thread_id, found["values"])
        if thread_exists(dst, thread_id):
            raise RefusedError(f"thread {thread_id!r} already exists in {dst.location}; "
                               "nothing was copied", error_code=ErrorCode.EXISTS)
    _copy_caps(src, dst)
    for thread_id, found in checked.items():
        dst.import_thread(src.export_thread(thread_id))
        if found is not None and found["finished"]:  # its TTL on Redis, counted from the copy
            with dst.locks.hold(thread_id):      # (`graph.store.redis.ttl`)
                dst.expire_finished(thread_id, found["values"]["progress"]["status"])
    return list(checked)


def _check_log_fits(src: Store, dst: Store, thread_id: str, values: dict[str, Any]) -> None:
    """Refuses a thread whose log the target would refuse as damaged once copied.

    A Redis target cross-checks the log against the checkpoint's replies
    (`graph.store.redis.tables.RedisAttemptLog.covers`); an SQL thread whose replies predate
    the attempt log (made before it existed) has fewer rows than replies, so it would be
    refused at its next step there.

    Raises:
        RefusedError: `incompatible` (exit 4); nothing was copied.
    """
    try:
        dst.log.covers(thread_id, values, src.log.rows(thread_id))
    except RefusedError as exc:
        raise RefusedError(f"thread {thread_id!r} cannot be copied to {dst.location}: "
                           f"{exc.detail} (its replies predate the attempt log); nothing was "
                           "copied", error_code=ErrorCode.INCOMPATIBLE) from None


def _copy_caps(src: Store, dst: Store) -> None:
    """Copies request caps the target lacks; a cap present on both must agree."""
    for cap_id, (requests, maximum) in src.ledger.caps().items():  # typed: refuses damage
        existing = dst.ledger.cap(cap_id)
        if existing is None:
            dst.ledger.insert_cap(cap_id, requests, maximum)
        elif existing[1] != maximum or existing[0] < requests:
            raise RefusedError(f"request cap {cap_id!r} differs in {dst.location}; nothing "
                               "more was copied", error_code=ErrorCode.EXISTS)
