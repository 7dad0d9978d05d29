"""What only the Redis ledger (`graph.store.redis.ledger`) can get wrong, on a real server: a damaged
or retyped ledger key is refused and left unchanged, a server that cannot fsync a claim is
refused before anything is counted, and an unreachable server is a usage error.

Redis only: a SQL ledger row is typed and guarded by the table's CHECKs and triggers (its
damage is in `tests/checkpoints/test_damage.py`), and its durability is the database's own. The rules
every ledger keeps (count before claim, once each, never lowered, caps charged with the
claim) run on the in-memory, SQL and Redis ledgers alike in `tests/store/test_ledger.py`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.errors import ErrorCode, ExitCode, NotDurableError, RefusedError, UsageError
from nodes.context import LedgerEntry
from tests.redis_server import start_server


def _thread() -> str:
    return f"t-{uuid.uuid4().hex}"


@pytest.mark.parametrize(("field", "value"), [
    ("attempts", "03"), ("attempts", "1.0"), ("claimed", "-1"), ("attempts", " 1"),
    ("max_attempts", "0"), ("claimed", "5"), ("created_at", "yesterday"), ("extra", "1"),
])
def test_a_damaged_row_is_refused_and_left_unchanged(ledger: Any, client: Any, field: str,
                                                      value: str) -> None:
    from graph.store.redis.keys import ledger_key

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
    from graph.store.redis.keys import cap_key, ledger_key

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
    from graph.store.redis.conn import connect
    from graph.store.redis.ledger import RedisLedger

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
    from graph.store.redis.conn import connect
    from graph.store.redis.ledger import RedisLedger

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
    from graph.store.redis.conn import connect

    with pytest.raises(UsageError) as refused:
        connect("redis://127.0.0.1:1/0")
    assert refused.value.error_code == ErrorCode.DB_UNREACHABLE
