"""The in-memory ledger keeps the SQL ledger's rules: each test runs on both."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from nodes.context import LedgerEntry
from tests.memory_ledger import MemoryLedger


@pytest.fixture(params=["memory", "sql"])
def ledger(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The in-memory ledger, and the SQL ledger on an in-memory SQLite database."""
    if request.param == "memory":
        yield MemoryLedger()
        return
    from graph.digest import new_marker
    from graph.ledger import SqlLedger
    from graph.schema import ddl
    from graph.sql import SqliteSql

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(ddl("sqlite", new_marker()))
    try:
        yield SqlLedger(SqliteSql(conn))
    finally:
        conn.close()


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
