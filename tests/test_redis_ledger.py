"""The Redis ledger (`graph.redis_ledger`) on a real private server: the SQL ledger's rules,
request caps charged with the claim, damaged keys refused, and a server that cannot fsync a
claim refused before anything is counted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.errors import NotDurableError, RefusedError, UsageError
from graph.exitcodes import ErrorCode, ExitCode
from graph.ledger import LedgerRow
from nodes.context import LedgerEntry
from tests.redis_server import start_server


@pytest.fixture
def client(redis_client: Any) -> Any:
    return redis_client


@pytest.fixture
def ledger(client: Any, redis_url: str) -> Any:
    from graph.redis_ledger import RedisLedger

    return RedisLedger(client, redis_url)


def _thread() -> str:
    return f"t-{uuid.uuid4().hex}"


def _spend(ledger: Any, thread_id: str) -> LedgerEntry:
    entry = ledger.count(thread_id)
    assert ledger.claim(thread_id, entry.attempts)
    return ledger.read(thread_id)


def test_counts_then_claims_each_attempt_once_in_order(ledger: Any) -> None:
    thread_id = _thread()
    assert ledger.create(thread_id, 2) == LedgerEntry(0, 0, 2)
    assert ledger.claim(thread_id, 1) is False  # not counted yet
    assert ledger.count(thread_id) == LedgerEntry(1, 0, 2)
    assert ledger.count(thread_id) == LedgerEntry(1, 0, 2)  # the unclaimed attempt is reused
    assert ledger.claim(thread_id, 2) is False  # not the next one
    assert ledger.claim(thread_id, 1) is True
    assert ledger.claim(thread_id, 1) is False  # once only
    assert _spend(ledger, thread_id) == LedgerEntry(2, 2, 2)
    assert ledger.count(thread_id).spent


def test_count_without_a_row_is_a_lookup_error(ledger: Any) -> None:
    with pytest.raises(LookupError):
        ledger.count(_thread())
    assert ledger.claim(_thread(), 1) is False


def test_no_operation_lowers_a_count_or_changes_a_maximum(ledger: Any) -> None:
    thread_id = _thread()
    ledger.create(thread_id, 3)
    _spend(ledger, thread_id)
    _spend(ledger, thread_id)
    before = ledger.row(thread_id)
    assert ledger.create(thread_id, 10) == LedgerEntry(2, 2, 3)  # kept as it is
    assert ledger.claim(thread_id, 1) is False and ledger.claim(thread_id, 2) is False
    with pytest.raises(RefusedError) as refused:
        ledger.insert_row(LedgerRow(thread_id, 0, 0, 9, before.created_at, before.updated_at))
    assert refused.value.error_code == ErrorCode.EXISTS
    after = ledger.row(thread_id)
    assert (after.attempts, after.claimed, after.max_attempts) == (2, 2, 3)
    assert after.created_at == before.created_at


def test_a_spent_thread_counts_no_more(ledger: Any) -> None:
    thread_id = _thread()
    ledger.create(thread_id, 1)
    _spend(ledger, thread_id)
    assert ledger.count(thread_id) == LedgerEntry(1, 1, 1)


def test_a_claim_charges_its_request_cap_in_the_same_operation(ledger: Any) -> None:
    cap_id, first, second = f"batch-{uuid.uuid4().hex}", _thread(), _thread()
    assert ledger.ensure_cap(cap_id, 1) == (0, 1)
    assert ledger.ensure_cap(cap_id, 5) == (0, 1)  # never reset or changed
    for thread_id in (first, second):
        ledger.create(thread_id, 4)
        ledger.count(thread_id)
    assert ledger.claim(first, 1, cap_id) is True
    assert ledger.cap(cap_id) == (1, 1)
    assert ledger.claim(second, 1, cap_id) is False  # the cap is full: nothing changes
    assert ledger.read(second) == LedgerEntry(1, 0, 4)
    assert ledger.cap(cap_id) == (1, 1)
    assert ledger.claim(second, 1, f"missing-{uuid.uuid4().hex}") is False
    assert ledger.read(second) == LedgerEntry(1, 0, 4)
    assert ledger.claim(second, 1) is True  # without the cap it may go


def test_caps_copied_from_elsewhere_keep_their_count(ledger: Any) -> None:
    cap_id = f"batch-{uuid.uuid4().hex}"
    ledger.insert_cap(cap_id, 3, 7)
    assert ledger.cap(cap_id) == (3, 7)
    assert ledger.caps()[cap_id] == (3, 7)
    with pytest.raises(RefusedError):
        ledger.insert_cap(cap_id, 0, 7)
    assert ledger.cap(cap_id) == (3, 7)


def test_a_row_copied_from_elsewhere_reads_back_whole(ledger: Any) -> None:
    row = LedgerRow(_thread(), 2, 1, 4, "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00")
    ledger.insert_row(row)
    assert ledger.row(row.thread_id) == row
    assert row.thread_id in ledger.thread_ids()
    assert ledger.updated_at()[row.thread_id] == row.updated_at
    ledger.delete(row.thread_id)
    assert ledger.row(row.thread_id) is None


@pytest.mark.parametrize(("field", "value"), [
    ("attempts", "03"), ("attempts", "1.0"), ("claimed", "-1"), ("attempts", " 1"),
    ("max_attempts", "0"), ("claimed", "5"), ("created_at", "yesterday"), ("extra", "1"),
])
def test_a_damaged_row_is_refused_and_left_unchanged(ledger: Any, client: Any, field: str,
                                                      value: str) -> None:
    from graph.redis_keys import ledger_key

    thread_id = _thread()
    ledger.create(thread_id, 4)
    ledger.count(thread_id)
    client.hset(ledger_key(thread_id), field, value)
    stored = client.hgetall(ledger_key(thread_id))
    for operation in (ledger.read, ledger.count, lambda t: ledger.claim(t, 1), ledger.touch):
        with pytest.raises(RefusedError) as refused:
            operation(thread_id)
        assert refused.value.error_code == ErrorCode.DAMAGED
    assert client.hgetall(ledger_key(thread_id)) == stored


def test_a_ledger_key_of_another_type_is_refused_not_a_crash(ledger: Any, client: Any) -> None:
    from graph.redis_keys import cap_key, ledger_key

    thread_id, cap_id = _thread(), f"cap-{uuid.uuid4().hex}"
    client.set(ledger_key(thread_id), b"3")
    client.rpush(cap_key(cap_id), b"1")
    for operation in (ledger.read, ledger.count, lambda t: ledger.create(t, 4)):
        with pytest.raises(RefusedError):
            operation(thread_id)
    with pytest.raises(RefusedError):
        ledger.cap(cap_id)
    ledger.create(other := _thread(), 4)
    ledger.count(other)
    with pytest.raises(RefusedError):
        ledger.claim(other, 1, cap_id)
    assert ledger.read(other) == LedgerEntry(1, 0, 4)


@pytest.fixture
def server_without(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A private server started with the persistence setting named by the test's parameter."""
    appendonly, appendfsync, policy = request.param
    server = start_server(tmp_path / "server", appendonly=appendonly, appendfsync=appendfsync,
                          modules=False)
    if policy:
        import redis

        redis.Redis.from_url(server.url).config_set("maxmemory-policy", policy)
    yield server
    server.stop()


@pytest.mark.parametrize("server_without", [(False, "always", ""), (True, "no", ""),
                                            (True, "always", "allkeys-lru")],
                         indirect=True, ids=["appendonly-no", "appendfsync-no", "allkeys-eviction"])
def test_a_server_that_cannot_fsync_a_claim_is_refused_before_anything_is_counted(
        server_without: Any) -> None:
    from graph.redis_conn import connect
    from graph.redis_ledger import RedisLedger

    client = connect(server_without.url)
    ledger = RedisLedger(client, server_without.url)
    for operation in (lambda: ledger.create("t1", 4), lambda: ledger.count("t1"),
                      lambda: ledger.claim("t1", 1), lambda: ledger.ensure_cap("b", 3)):
        with pytest.raises(UsageError) as refused:
            operation()
        assert refused.value.error_code == ErrorCode.DB_NOT_DURABLE
        assert refused.value.exit_code == ExitCode.USAGE
        assert any(name in str(refused.value) for name in ("appendonly", "appendfsync", "maxmemory"))
    assert client.dbsize() == 0
    client.close()


def test_a_claim_whose_fsync_cannot_be_confirmed_is_spent_and_not_sent(tmp_path: Path) -> None:
    from graph.redis_conn import connect
    from graph.redis_ledger import RedisLedger

    server = start_server(tmp_path / "server", modules=False)
    try:
        client = connect(server.url)
        ledger = RedisLedger(client, server.url)
        ledger.create("t1", 4)
        ledger.count("t1")
        client.config_set("appendonly", "no")  # after the check: WAITAOF now refuses
        with pytest.raises(NotDurableError) as refused:
            ledger.claim("t1", 1)
        assert refused.value.exit_code == ExitCode.REQUEST_FAILED
        assert ledger.read("t1") == LedgerEntry(1, 1, 4)  # spent, never handed out again
        client.close()
    finally:
        server.stop()


def test_an_unreachable_server_is_a_usage_error() -> None:
    from graph.redis_conn import connect

    with pytest.raises(UsageError) as refused:
        connect("redis://127.0.0.1:1/0")
    assert refused.value.error_code == ErrorCode.DB_UNREACHABLE
