"""The quick answer on PostgreSQL: a thread with nothing to do, read with psycopg alone.

`graph.store.poll` hands a `postgresql://` URL here. The checks are the full path's
(`graph.store.open_store`, `graph.store.postgres.open.open_postgres`, `graph.step.advance`),
in its order, and anything unusual returns None so that the full path decides and
reports it: a URL psycopg cannot parse, a server that cannot be reached or refuses the
login, a database whose schema (our tables and triggers, LangGraph's migrations) is not
all in place, a damaged row, no summary or a stale one.

- `busy` (exit 5): another session holds the thread's writer lock, read from
  `pg_locks` (`graph.store.postgres.locks.held_elsewhere`) without taking it, so a poll never
  makes a writer busy;
- `pruned` (exit 4): the thread has a tombstone;
- `done` (0), `exhausted` (3), `cancelled` (4): the thread's summary, while its
  fingerprint matches the rows (`graph.store.sql.summaries`).

One connection, on the URL as given (its `options`, such as a `search_path`, kept as
the full path keeps them); after the schema check the lock is tested, then everything
else is read in one `REPEATABLE READ READ ONLY` transaction (one snapshot, taken after
the test: a writer that held the lock before had committed everything by then), rolled
back at the end. No LangGraph import.
"""

from __future__ import annotations

from graph.errors import BusyError, RunError
from graph.outcome import Outcome
from graph.store.checks import pruned_refusal
from graph.store.postgres.locks import held_elsewhere, thread_key
from graph.store.sql.conn import PostgresSql
from graph.store.sql.schema import postgres_objects_query
from graph.store.sql.summaries import SqlSummaries
from graph.store.sql.tombstones import SqlTombstones
from graph.store.urls import CONNECT_TIMEOUT_S, check_postgres_url, redact

__all__ = ["postgres_answer"]


def postgres_answer(url: str, thread_id: str) -> Outcome | None:
    """The outcome of a finished, pruned or busy thread at `url`; None for the full path.

    Args:
        url: A `postgresql://` URL (`graph.store.is_postgres`).
        thread_id: The thread, already checked (`graph.settings.check_thread_id`).

    Returns:
        The outcome the full path would give, or None (see the module doc).

    Raises:
        Exception: Anything psycopg or a check raises; `graph.store.poll` takes the full path.
    """
    check_postgres_url(url)
    import psycopg  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used
    from psycopg.conninfo import make_conninfo  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used

    conninfo = make_conninfo(url, connect_timeout=CONNECT_TIMEOUT_S,
                             application_name="mandapi-resume")  # the URL's `options` kept
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        db = PostgresSql(conn)
        if not db.value(*postgres_objects_query()):
            return None  # the full path sets the schema up, or refuses a dropped trigger
        location = redact(url)
        if held_elsewhere(conn, thread_key(thread_id)):
            return Outcome.from_error(thread_id, BusyError.for_thread(thread_id).at(
                location=location))
        db.run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            tombstone = SqlTombstones(db).get(thread_id)
            if tombstone is not None:
                return Outcome.from_error(thread_id, pruned_refusal(tombstone).at(
                    location=location))
            return SqlSummaries(db).answer(thread_id)
        except RunError:
            return None  # a damaged row: the full path refuses it
        finally:
            db.run("ROLLBACK")
