"""PostgreSQL session-level advisory locks: keys, waiting for one, and per-thread writer locks.

A session-level lock lives as long as its connection's session, so it dies with its
process (and, with TCP keepalives on the connection, within about a minute with a
machine that lost power or network). Importing this module needs no psycopg.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from graph.errors import BusyError

if TYPE_CHECKING:
    import psycopg

__all__ = ["AdvisoryThreadLocks", "POLL_S", "advisory_key", "advisory_lock", "held_elsewhere",
           "thread_key"]

POLL_S = 0.05
"""Pause between two tries while waiting for a lock (seconds)."""


def advisory_key(name: str) -> int:
    """A signed 64-bit advisory-lock key for `name`."""
    return int.from_bytes(hashlib.sha256(f"mandapi-resume:{name}".encode()).digest()[:8],
                          "big", signed=True)


def thread_key(thread_id: str) -> int:
    """The key of a thread's writer lock (`AdvisoryThreadLocks`)."""
    return advisory_key(f"thread:{thread_id}")


def held_elsewhere(conn: psycopg.Connection[Any], key: int) -> bool:
    """Whether another session holds advisory lock `key` in this database; never takes it.

    Read from `pg_locks`, which shows a `bigint` key as its high and low 32 bits
    (`classid`, `objid`, `objsubid` 1). Testing without taking means a poller never
    makes a writer that starts at the same moment busy.
    """
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND classid = %s::oid AND objid = %s::oid AND objsubid = 1 "
        "AND pid <> pg_backend_pid())", ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
    return bool(row and row[0])


def _try_lock(conn: psycopg.Connection[Any], key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    return bool(row and row[0])


def _unlock(conn: psycopg.Connection[Any], key: int) -> None:
    if not conn.closed:  # a lost session released its locks already
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


@contextmanager
def advisory_lock(conn: psycopg.Connection[Any], key: int, *, what: str,
                  timeout_s: float | None = None) -> Iterator[None]:
    """Holds advisory lock `key` on `conn` for the block, waiting until it is free.

    The lock is taken with `pg_try_advisory_lock` in a polling loop, not the blocking
    `pg_advisory_lock`: a session blocked inside a statement keeps a snapshot open, and
    `CREATE INDEX CONCURRENTLY` in the holder's work (LangGraph's migrations) waits for
    every older snapshot to finish, so blocking waiters and the holder would wait on
    each other.

    Args:
        conn: An autocommit connection; the lock belongs to its session.
        key: The lock key (`advisory_key`, or a constant of the caller).
        what: What the lock guards, for the timeout's message.
        timeout_s: Give up after this many seconds; None waits as long as it takes.

    Raises:
        TimeoutError: Another session held the lock for `timeout_s` seconds.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not _try_lock(conn, key):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"PostgreSQL {what} lock held too long by another process")
        time.sleep(POLL_S)
    try:
        yield
    finally:
        _unlock(conn, key)


class AdvisoryThreadLocks:
    """Per-thread writer locks (`pg_try_advisory_lock`), failing at once when taken.

    Args:
        conn: The control connection; a lock lives as long as this session.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._held: set[str] = set()

    @contextmanager
    def hold(self, thread_id: str) -> Iterator[None]:
        """Holds the thread's lock for the block; fails at once if another session has it.

        Raises:
            BusyError: Another session holds the lock (exit 5).
        """
        key = thread_key(thread_id)
        if not _try_lock(self._conn, key):
            raise BusyError.for_thread(thread_id)
        self._held.add(thread_id)
        try:
            yield
        finally:
            self._held.discard(thread_id)
            _unlock(self._conn, key)

    def fence(self, thread_id: str) -> str:
        """The fencing hook (`graph.store.base.WriterLocks.fence`): '' unless refused.

        What the advisory lock guarantees: it belongs to the control connection's session
        and no other session can take it while that session lives. It has no lease: a
        writer that is paused (SIGSTOP, a long pause) keeps its session, so it keeps the
        lock and nobody takes the thread over meanwhile; there is no stale writer to fence
        out, unlike Redis. The lock is lost while the process lives only with its session
        (the server restarted, `pg_terminate_backend`, a connection dropped past its
        keepalives); psycopg then marks the control connection closed or broken at its
        next use, and a thread held here is refused from then on. That check is local and
        free; it is not atomic with the write (another connection makes it), so a session
        lost between the check and the write is not caught here.

        A thread not held here: `pg_locks` is read (`held_elsewhere`).

        Raises:
            BusyError: Another session holds the thread's lock, this one not; or this
                store held it but its control session is gone.
        """
        if thread_id in self._held:
            if self._conn.closed or self._conn.broken:
                raise BusyError("this process lost its writer lock (its PostgreSQL session "
                                "ended); nothing was written", thread_id=thread_id)
            return ""
        if held_elsewhere(self._conn, thread_key(thread_id)):
            raise BusyError.for_thread(thread_id)
        return ""

    def close(self) -> None:
        """Nothing to do: the locks end with the control connection's session."""
