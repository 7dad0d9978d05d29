"""Every attempt ledger keeps the same rules: each test runs on each.

The in-memory ledger (`tests/memory_ledger.py`, what node and graph tests use), the SQL
ledger (on an in-memory SQLite database) and the Redis ledger (its Lua scripts, on the
session's private server, flushed per test). The tests of rows and caps copied from
elsewhere use operations only the stored ledgers have (`row`, `insert_row`, `insert_cap`),
so they run on SQL and Redis. What only Redis can get wrong (a damaged or retyped key, a
server that cannot fsync) is in `tests/store/redis/test_ledger.py`.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from graph.errors import ErrorCode, RefusedError
from graph.store.rows import LedgerRow
from graph.store.sql.ledger import SqlLedger
from nodes.context import LedgerEntry
from tests.memory_ledger import MemoryLedger

_REDIS = pytest.param("redis", marks=pytest.mark.redis)


def _stored(request: pytest.FixtureRequest, kind: str) -> Iterator[Any]:
    """The SQL ledger on an in-memory SQLite database, or the Redis ledger on the flushed
    session server."""
    if kind == "redis":
        from graph.store.redis.conn import connect
        from graph.store.redis.ledger import RedisLedger

        url = request.getfixturevalue("redis_url")
        client = connect(url)
        client.flushall()  # fixed thread ids, as on a new SQLite file
        try:
            yield RedisLedger(client, url)
        finally:
            client.close()
        return
    from graph.store.digest import new_marker
    from graph.store.sql.conn import SqliteSql
    from graph.store.sql.schema import ddl

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(ddl("sqlite", new_marker()))
    try:
        yield SqlLedger(SqliteSql(conn))
    finally:
        conn.close()


@pytest.fixture(params=["memory", "sql", _REDIS])
def ledger(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The in-memory, the SQL and the Redis ledger."""
    if request.param == "memory":
        yield MemoryLedger()
        return
    yield from _stored(request, request.param)


@pytest.fixture(params=["sql", _REDIS])
def stored_ledger(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The SQL and the Redis ledger (rows and caps as stored, copied in and out)."""
    yield from _stored(request, request.param)


def test_a_new_thread_has_no_attempts_and_its_maximum(ledger) -> None:
    assert ledger.read("t") is None
    assert ledger.create("t", 3) == LedgerEntry(0, 0, 3)
    assert ledger.create("t", 9) == LedgerEntry(0, 0, 3)  # an existing row is kept as it is


def test_counting_a_thread_never_created_is_refused(ledger) -> None:
    with pytest.raises(LookupError):
        ledger.count("nope")
    assert ledger.claim("nope", 1) is False


def test_count_reuses_an_attempt_that_was_counted_but_never_claimed(ledger) -> None:
    ledger.create("t", 4)
    assert ledger.count("t") == LedgerEntry(1, 0, 4)
    assert ledger.count("t") == LedgerEntry(1, 0, 4)
    assert ledger.count("t").unclaimed


def test_an_attempt_is_claimed_once_and_only_after_it_was_counted(ledger) -> None:
    ledger.create("t", 4)
    assert ledger.claim("t", 1) is False  # not counted yet
    ledger.count("t")
    assert ledger.claim("t", 2) is False  # not the next one
    assert ledger.claim("t", 1) is True
    assert ledger.claim("t", 1) is False  # a re-run or replay finds it claimed
    assert ledger.read("t") == LedgerEntry(1, 1, 4)


def test_count_stops_at_the_maximum_and_the_entry_says_spent(ledger) -> None:
    ledger.create("t", 2)
    for attempt in (1, 2):
        assert not ledger.count("t").spent
        assert ledger.claim("t", attempt)
    entry = ledger.count("t")
    assert entry == LedgerEntry(2, 2, 2) and entry.spent
    assert ledger.claim("t", 3) is False


def test_threads_count_separately(ledger) -> None:
    ledger.create("a", 1)
    ledger.create("b", 4)
    ledger.count("a")
    assert ledger.claim("a", 1)
    assert ledger.count("a").spent
    assert ledger.count("b") == LedgerEntry(1, 0, 4)


def test_a_charged_claim_raises_its_cap_and_a_full_cap_claims_nothing(ledger) -> None:
    assert ledger.ensure_cap("batch", 1) == (0, 1)
    assert ledger.ensure_cap("batch", 7) == (0, 1)  # a cap is never reset
    ledger.create("a", 4)
    ledger.create("b", 4)
    ledger.count("a")
    ledger.count("b")
    assert ledger.claim("a", 1, "batch") is True
    assert ledger.cap("batch") == (1, 1)
    assert ledger.claim("b", 1, "batch") is False
    assert ledger.read("b") == LedgerEntry(1, 0, 4)  # stays counted, for later
    assert ledger.cap("batch") == (1, 1)
    assert ledger.claim("b", 1, "missing cap") is False
    assert ledger.read("b") == LedgerEntry(1, 0, 4)
    assert ledger.claim("b", 1) is True  # without the cap it may go


@contextmanager
def _refused_as_existing(ledger: Any) -> Iterator[None]:
    """Expects the block to be refused for inserting a row or cap that exists, as each ledger
    refuses it: the SQL table by its primary key (the database's error; `graph.copy` checks
    first), the Redis script answering `exists` (exit 4)."""
    if isinstance(ledger, SqlLedger):
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            yield
        return
    with pytest.raises(RefusedError) as refused:
        yield
    assert refused.value.error_code == ErrorCode.EXISTS


def test_no_operation_lowers_a_count_or_changes_a_maximum(stored_ledger: Any) -> None:
    ledger = stored_ledger
    ledger.create("t", 3)
    for attempt in (1, 2):
        ledger.count("t")
        assert ledger.claim("t", attempt)
    before = ledger.row("t")
    assert ledger.create("t", 10) == LedgerEntry(2, 2, 3)  # kept as it is
    assert ledger.claim("t", 1) is False and ledger.claim("t", 2) is False
    with _refused_as_existing(ledger):
        ledger.insert_row(LedgerRow("t", 0, 0, 9, before.created_at, before.updated_at))
    after = ledger.row("t")
    assert (after.attempts, after.claimed, after.max_attempts) == (2, 2, 3)
    assert after.created_at == before.created_at


def test_caps_copied_from_elsewhere_keep_their_count(stored_ledger: Any) -> None:
    ledger = stored_ledger
    ledger.insert_cap("batch", 3, 7)
    assert ledger.cap("batch") == (3, 7)
    assert ledger.caps()["batch"] == (3, 7)
    with _refused_as_existing(ledger):
        ledger.insert_cap("batch", 0, 7)
    assert ledger.cap("batch") == (3, 7)


def test_a_row_copied_from_elsewhere_reads_back_whole(stored_ledger: Any) -> None:
    ledger = stored_ledger
    row = LedgerRow(f"t-{uuid.uuid4().hex}", 2, 1, 4, "2026-01-01T00:00:00+00:00",
                    "2026-01-02T00:00:00+00:00")
    ledger.insert_row(row)
    assert ledger.row(row.thread_id) == row
    assert row.thread_id in ledger.thread_ids()
    assert ledger.updated_at()[row.thread_id] == row.updated_at
    ledger.delete(row.thread_id)
    assert ledger.row(row.thread_id) is None
