"""The Redis tables (`graph.store.redis.tables`, `graph.store.redis.approvals`) on a private server: the SQL
tables' rules for decisions on write calls (one per call, updates only in the state the SQL
`UPDATE ... WHERE` allows, decision order), tombstones kept once, and damaged values refused.

Redis only: the SQL tables hold these rules as constraints and `UPDATE ... WHERE` clauses of
the database itself, checked through every backend in `tests/step/test_approvals.py` and
`tests/threads/test_retention.py`; here the Redis tables' own code and scripts are held to them, with
damage only a Redis key can take (a value that is not JSON, a decision under another call's
field) and a server whose append-only file is turned off behind the program's back.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from graph.errors import RefusedError
from graph.store.redis import keys as redis_keys
from graph.store.rows import Tombstone
from graph.store.sql.approvals import COLUMNS


@pytest.fixture
def approvals(client: Any, redis_url: str) -> Any:
    from graph.store.redis.approvals import RedisApprovals

    return RedisApprovals(client, redis_url)


def _decision(thread_id: str, attempt: int, call: str, decided_at: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(thread_id=thread_id, attempt=attempt, tool_call_id=call, tool="write_file",
               arguments='{"path":"a"}', args_sha256="0" * 64, decision="approve",
               decided_at=decided_at, target="a", result="")
    return row


def test_decisions_are_kept_per_turn_in_decision_order_and_once_per_call(approvals: Any) -> None:
    thread_id = f"ra-{uuid.uuid4().hex}"
    approvals.add(_decision(thread_id, 2, "call_0", "2026-01-01T00:00:02+00:00"))
    approvals.add(_decision(thread_id, 1, "call_0", "2026-01-01T00:00:01+00:00"))
    assert list(approvals.rows(thread_id)) == [(1, "call_0"), (2, "call_0")]
    assert set(approvals.turn(thread_id, 2)) == {"call_0"}
    with pytest.raises(RefusedError) as again:
        approvals.add(_decision(thread_id, 1, "call_0", "2026-01-01T00:00:03+00:00"))
    assert again.value.error_code == "exists"
    assert approvals.rows(thread_id)[(1, "call_0")]["decided_at"] == "2026-01-01T00:00:01+00:00"


def test_updates_apply_only_in_the_state_the_sql_table_allows(approvals: Any) -> None:
    thread_id = f"ra-{uuid.uuid4().hex}"
    approvals.add(_decision(thread_id, 1, "c", "2026-01-01T00:00:01+00:00"))
    approvals.plan(thread_id, 1, "c", "a" * 64, "b" * 64)
    approvals.plan(thread_id, 1, "c", "x" * 64, "y" * 64)  # planned once only
    approvals.mark_applied(thread_id, 1, "c")
    approvals.mark_failed(thread_id, 1, "c", "changed", "not applied")  # applied already
    row = approvals.rows(thread_id)[(1, "c")]
    assert (row["before_sha256"], row["after_sha256"]) == ("a" * 64, "b" * 64)
    assert row["applied_at"] is not None and row["error"] is None
    approvals.mark_applied(thread_id, 9, "missing")  # no row: nothing written
    assert list(approvals.rows(thread_id)) == [(1, "c")]


@pytest.mark.parametrize("value", [b"{}", b"not json", b"\xff"])
def test_a_damaged_decision_is_refused(approvals: Any, client: Any, value: bytes) -> None:
    thread_id = f"ra-{uuid.uuid4().hex}"
    client.hset(redis_keys.approvals_key(thread_id), b"1:c", value)
    with pytest.raises(RefusedError) as refused:
        approvals.rows(thread_id)
    assert refused.value.error_code == "damaged"


def test_a_decision_under_another_calls_key_is_refused(approvals: Any, client: Any) -> None:
    thread_id = f"ra-{uuid.uuid4().hex}"
    approvals.add(_decision(thread_id, 1, "c", "2026-01-01T00:00:01+00:00"))
    key = redis_keys.approvals_key(thread_id)
    client.hset(key, b"2:c", client.hget(key, b"1:c"))
    with pytest.raises(RefusedError):
        approvals.rows(thread_id)


def test_a_tombstone_is_kept_once_and_checked(client: Any, redis_url: str) -> None:
    from graph.store.redis.tables import RedisTombstones

    tombstones, thread_id = RedisTombstones(client, redis_url), f"rt-{uuid.uuid4().hex}"
    first = Tombstone(thread_id, "done", "2026-01-01T00:00:00+00:00")
    tombstones.add(first)
    tombstones.add(Tombstone(thread_id, "cancelled", "2026-02-01T00:00:00+00:00"))
    assert tombstones.get(thread_id) == first and thread_id in tombstones.thread_ids()
    client.hset(redis_keys.tombstone_key(thread_id), "final_status", "ready")
    with pytest.raises(RefusedError):
        tombstones.get(thread_id)
    tombstones.remove(thread_id)
    assert tombstones.get(thread_id) is None


def test_used_tokens_refuses_a_usage_that_is_not_a_whole_number(client: Any, redis_url: str) -> None:
    from graph.store.redis.tables import RedisAttemptLog

    log, thread_id = RedisAttemptLog(client, redis_url), f"rl-{uuid.uuid4().hex}"
    payload = {"outcome": "answer", "tool_calls": [], "usage": {"total_tokens": 10}}
    log.record(thread_id, 1, "reason", payload)
    log.record(thread_id, 2, "reason", {**payload, "usage": {"total_tokens": 5}})
    assert log.used_tokens(thread_id) == 15 and log.last_attempt(thread_id) == 2
    log.record(thread_id, 3, "reason", {**payload, "usage": {"total_tokens": 1.5}})
    with pytest.raises(RefusedError):
        log.used_tokens(thread_id)


def test_a_log_row_holds_the_place_it_was_pushed_at_when_the_log_grew_after_its_read(
        client: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`APPEND` pushes only at the `seq` the rows were encoded for (the row digest covers
    it): a log that grew between the length read and the push answers `moved`, and the
    rows are encoded again for its length, never stored out of place."""
    from graph.store.redis.tables import RedisAttemptLog

    log, thread_id = RedisAttemptLog(client, redis_url), f"rl-{uuid.uuid4().hex}"
    payload = {"outcome": "answer", "tool_calls": [], "usage": {"total_tokens": 10}}
    log.record(thread_id, 1, "reason", payload)
    log.record(thread_id, 2, "reason", payload)
    real = log._call
    monkeypatch.setattr(log, "_call", lambda table, method, *args: 0 if method == "llen"
                        else real(table, method, *args))  # a length read before two pushes
    log.record(thread_id, 3, "reason", payload)
    assert [row["attempt"] for row in log.rows(thread_id)] == [1, 2, 3]
    stored = client.lrange(redis_keys.log_key(thread_id), 0, -1)
    assert [json.loads(raw)["seq"] for raw in stored] == [0, 1, 2]


def test_a_log_row_or_decision_that_cannot_be_fsynced_is_an_error(tmp_path: Any) -> None:
    from graph.errors import NotDurableError
    from graph.store.redis.approvals import RedisApprovals
    from graph.store.redis.conn import connect
    from graph.store.redis.tables import RedisAttemptLog
    from tests.redis_server import start_server

    server = start_server(tmp_path / "aof-off-later")
    client = connect(server.url)
    try:
        client.config_set("appendonly", "no")  # turned off behind the program's back
        payload = {"outcome": "answer", "tool_calls": [], "usage": {"total_tokens": 3}}
        with pytest.raises(NotDurableError):
            RedisAttemptLog(client, server.url).record("t", 1, "reason", payload)
        with pytest.raises(NotDurableError):
            RedisApprovals(client, server.url).add(_decision("t", 1, "c", "2026-01-01T00:00:01Z"))
    finally:
        client.close()
        server.stop()
