"""The quick answer: a thread with nothing to do, answered without importing LangGraph.

`graph.run` asks here first when it was given no flag that needs checking against the
thread (only `--thread`, `--once`, `--json`, `--db`, `--timeout`). It answers as the
full path would, in the same words and with the same exit code, for a SQLite file
(here) and a PostgreSQL URL (`graph.store.postgres.poll`):

- `busy` (exit 5) while another process holds the thread's writer lock;
- `pruned` (exit 4) when the thread has a tombstone;
- `done` (0), `exhausted` (3) or `cancelled` (4) from the thread's summary
  (`graph.store.sql.summaries`), while its fingerprint matches the rows the full path would read.

Anything else returns None and `graph.run` takes the full path, which checks
everything and reports it: no summary, a stale or damaged one, a refusal or error on
the way, a database that needs its schema set up, a file other users can read (the
full path warns about it). On SQLite the checks before the answer are the full path's
own (`graph.store.sqlite.access`, `graph.store.sqlite.file`,
`graph.store.sqlite.names`), in its order, and a miss hands them to the open that
follows (`graph.store.sqlite.handoff`), which does not make them again. The rows are
read with plain sqlite3, read-only, in one read transaction; the thread's lock is
tested, not taken, so polling never makes a writer busy.
"""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

from graph.errors import BusyError, RunError
from graph.outcome import Outcome
from graph.store.checks import pruned_refusal
from graph.store.sql.conn import SqliteSql
from graph.store.sql.summaries import SqlSummaries
from graph.store.sql.tombstones import SqlTombstones
from graph.store.sqlite import handoff
from graph.store.sqlite.access import check_sqlite_access, read_only_uri
from graph.store.sqlite.file import check_database, schema_needs_setup
from graph.store.sqlite.locks import ThreadLocks
from graph.store.sqlite.names import NameSlot, check_one_name
from graph.store.urls import is_postgres

__all__ = ["quick_answer"]


def quick_answer(db: str, thread_id: str) -> Outcome | None:
    """The outcome of a finished, pruned or busy thread; None when the full path must decide.

    Args:
        db: The resolved `--db` value (`graph.settings.Settings.db`).
        thread_id: The thread, already checked (`graph.settings.check_thread_id`).

    Returns:
        The outcome the full path would give, or None (see the module doc).
    """
    answer: Callable[[str, str], Outcome | None]
    if is_postgres(db):
        from graph.store.postgres.poll import postgres_answer  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used

        answer = postgres_answer
    elif "://" in db or "=" in db:
        return None  # a form the full path refuses with its reason
    else:
        answer = _answer
    try:
        return answer(db, thread_id)
    except Exception:  # noqa: BLE001 - anything unusual: the full path checks and reports it
        return None


def _answer(db: str, thread_id: str) -> Outcome | None:
    """`graph.store.open_store`'s checks on the file, in its order, then `_read`."""
    check_sqlite_access(db, read_only=False)
    path = Path(db).resolve()
    check_database(path)
    check_one_name(path)
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return None  # the full path prints a warning about it
    slot = NameSlot(path)
    try:
        needs_setup = schema_needs_setup(path)
        # on a miss, graph.run opens this file next: it takes these checks, not redo them
        handoff.hand_on(db, read_only=False, checked=handoff.Checked(needs_setup))
        if needs_setup:
            return None  # the full path sets the schema up (an older database)
        return _read(path, thread_id)
    finally:
        slot.close()


def _read(path: Path, thread_id: str) -> Outcome | None:
    """Busy, pruned or finished, read in one read-only transaction; else None.

    The connection is closed before the lock handle: closing any handle of the file
    drops this process's POSIX locks on it, SQLite's included (`graph.store.sqlite.locks`).
    """
    locks = ThreadLocks(path)
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None)
        try:
            if locks.held_elsewhere(thread_id):
                return Outcome.from_error(thread_id, BusyError.for_thread(thread_id).at(
                    location=str(path)))
            sql = SqliteSql(conn)
            conn.execute("BEGIN")
            try:
                tombstone = SqlTombstones(sql).get(thread_id)
                if tombstone is not None:
                    return Outcome.from_error(thread_id, pruned_refusal(tombstone).at(
                        location=str(path)))
                return SqlSummaries(sql).answer(thread_id)
            except RunError:
                return None  # a damaged row: the full path refuses it
            finally:
                conn.execute("ROLLBACK")
        finally:
            conn.close()
    finally:
        locks.close()
