"""Every write of a Redis thread carries the writer's lease token and is refused once it is stale.

The checkpoint and pending-write scripts (`graph.store.redis.lua.PUT`, `PUT_WRITES`) replace
upstream's pipelines, so the documents they store must stay the ones `RedisSaver` 0.5.2
writes (its `get_tuple`, `list` and search index read them): compared here field by field
with upstream's own `put` and `put_writes`, which fails when upstream's shape changes under
us. Then a store whose lease another process took over tries every write it can make: each
is refused with `BusyError` (exit 5) and the database is left byte for byte as it was
(INVARIANTS I8; issue 28, "a writer that lost its lease still writes").
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from graph.errors import BusyError
from graph.store import open_store
from graph.store.rows import APPROVAL_COLUMNS, Tombstone

MESSAGES = [{"role": "user", "content": "How long does shipping take?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "search", "arguments": "{\"q\": \"shipping\"}"}}]}]


def _checkpoint(n: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid.UUID(int=n + (0x1F0 << 112)))  # time-ordered, never a ULID
    checkpoint["channel_values"] = {"messages": MESSAGES[:n], "progress": {"attempts": n}}
    checkpoint["channel_versions"] = {"messages": f"{n:032}.0.5", "progress": f"{n:032}.0.25"}
    return checkpoint


def _metadata(step: int) -> Any:
    return {"source": "loop", "step": step, "parents": {}}


def _stored(client: Any, key: Any) -> Any:
    raw = client.execute_command("JSON.GET", key)  # redis-py may decode it itself
    return json.loads(raw) if isinstance(raw, (bytes, str)) else raw


def test_our_put_and_put_writes_store_exactly_the_documents_upstream_stores(
        redis_url: str) -> None:
    """Differs by design only in `checkpoint_ts`: upstream takes the wall clock for a
    checkpoint id that is not a ULID (ours are UUIDs)."""
    from langgraph.checkpoint.redis import RedisSaver

    from graph.store.redis.conn import connect
    from graph.store.redis.saver import CheckedRedisSaver
    from graph.store.redis.serde import StrictRedisSerializer

    client = connect(redis_url)
    ours = CheckedRedisSaver(redis_client=client)
    ours.setup()
    upstream = RedisSaver(redis_client=client)
    upstream.setup()
    upstream.serde = StrictRedisSerializer()  # the same serializer: the shape is compared
    thread_id = f"shape-{uuid.uuid4().hex[:8]}"
    parent = _checkpoint(1)
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "",
                                    "checkpoint_id": parent["id"]}}
    child = _checkpoint(2)
    writes = [("messages", MESSAGES[1:]), ("__error__", "boom"), ("progress", {"attempts": 2})]

    def write_with(saver: Any) -> dict[str, Any]:
        saved = saver.put(config, child, _metadata(2), {})
        saver.put_writes(saved, writes, "task-1", "~__pregel_pull, reason")
        key = saver._make_redis_checkpoint_key_cached(thread_id, "", child["id"])
        registry = f"write_keys_zset:{thread_id}:__empty__:{child['id']}"
        members = client.zrange(registry, 0, -1, withscores=True)
        found = {"returned": saved, "document": _stored(client, key),
                 "latest": client.get(f"checkpoint_latest:{thread_id}:__empty__"),
                 "registry": members,
                 "writes": {m: _stored(client, m) for m, _ in members}}
        client.delete(key, registry, f"checkpoint_latest:{thread_id}:__empty__", *found["writes"])
        return found

    theirs, mine = write_with(upstream), write_with(ours)
    assert isinstance(theirs["document"].pop("checkpoint_ts"), float)
    assert isinstance(mine["document"].pop("checkpoint_ts"), float)
    assert mine == theirs
    assert mine["document"]["has_writes"] is True and len(mine["writes"]) == 3
    client.close()


@pytest.fixture
def stolen(redis_url: str) -> Iterator[tuple[Any, str, Any]]:
    """A store holding a thread with checkpoints, writes, log rows and a decision, whose
    lease another process has just taken over (its lock key holds another token)."""
    from graph.store.redis.conn import connect
    from graph.store.redis.keys import lock_key

    client = connect(redis_url)
    thread_id = f"stale-{uuid.uuid4().hex[:8]}"
    with open_store(redis_url, create=True) as store, store.locks.hold(thread_id):
        store.ledger.create(thread_id, 4)
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        for n in range(1, 4):
            config = store.checkpointer.put(config, _checkpoint(n), _metadata(n), {})
            store.checkpointer.put_writes(config, [("messages", MESSAGES[:1])], f"task-{n}")
        store.log.record(thread_id, 1, "tool", {"tool_call_id": "call_1", "name": "search",
                                                "ok": True})
        store.approvals.add(_decision(thread_id, "call_1"))
        client.set(lock_key(thread_id), "another-holder's-token", px=60_000)
        yield store, thread_id, client
    client.close()


def _decision(thread_id: str, call_id: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(APPROVAL_COLUMNS)
    row.update(thread_id=thread_id, attempt=1, tool_call_id=call_id, tool="write_file",
               arguments='{"path":"a"}', args_sha256="0" * 64, decision="approve",
               decided_at="2026-01-01T00:00:01+00:00", target="a", result="")
    return row


def _snapshot(client: Any) -> dict[bytes, Any]:
    """Every key with its value and whether it expires (the lock and durability probe aside)."""
    from graph.store.redis import keys

    found: dict[bytes, Any] = {}
    for key in client.scan_iter(count=1000):
        if key.startswith((keys.LOCK.encode(), keys.FSYNC.encode())):
            continue
        kind = client.type(key)
        value = client.execute_command("JSON.GET", key) if kind == b"ReJSON-RL" else \
            client.dump(key)
        found[key] = (kind, value, client.pttl(key) > 0)
    return found


WRITES: dict[str, Callable[[Any, str], Any]] = {
    "log row": lambda s, t: s.log.record(t, 2, "tool", {"tool_call_id": "c", "name": "search",
                                                         "ok": True}),
    "copied log": lambda s, t: s.log.import_rows(t, [{
        "attempt": 1, "kind": "tool", "payload": {"tool_call_id": "c", "name": "n", "ok": True},
        "created_at": "2026-01-01T00:00:00+00:00"}]),
    "log deletion": lambda s, t: s.log.delete_thread(t),
    "ledger create": lambda s, t: s.ledger.create(t, 4),
    "ledger count": lambda s, t: s.ledger.count(t),
    "ledger touch": lambda s, t: s.ledger.touch(t),
    "ledger deletion": lambda s, t: s.ledger.delete(t),
    "checkpoint": lambda s, t: s.checkpointer.put(
        {"configurable": {"thread_id": t, "checkpoint_ns": ""}}, _checkpoint(9), _metadata(9), {}),
    "pending writes": lambda s, t: s.checkpointer.put_writes(
        {"configurable": {"thread_id": t, "checkpoint_ns": "",
                          "checkpoint_id": _checkpoint(3)["id"]}}, [("messages", [])], "late"),
    "window trim": lambda s, t: s.trim(t, 1),
    "thread deletion": lambda s, t: s.checkpointer.delete_thread(t),
    "decision": lambda s, t: s.approvals.add(_decision(t, "call_2")),
    "planned hashes": lambda s, t: s.approvals.plan(t, 1, "call_1", None, "1" * 64),
    "applied mark": lambda s, t: s.approvals.mark_applied(t, 1, "call_1"),
    "failed mark": lambda s, t: s.approvals.mark_failed(t, 1, "call_1", "gone", "failed"),
    "decisions deletion": lambda s, t: s.approvals.delete_thread(t),
    "tombstone": lambda s, t: s.tombstones.add(Tombstone(t, "done", "2026-01-01T00:00:00+00:00")),
    "tombstone removal": lambda s, t: s.tombstones.remove(t),
    "bury": lambda s, t: s.bury(Tombstone(t, "done", "2026-01-01T00:00:00+00:00")),
    "ttl": lambda s, t: s.backend.expire_finished(t, "done"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_writer_whose_lease_was_taken_over_changes_nothing(
        stolen: tuple[Any, str, Any], write: str) -> None:
    store, thread_id, client = stolen
    before = _snapshot(client)
    with pytest.raises(BusyError) as refused:
        WRITES[write](store, thread_id)
    assert refused.value.exit_code == 5
    assert _snapshot(client) == before


def test_a_write_holding_no_lease_passes_only_while_nobody_holds_the_thread(
        redis_url: str) -> None:
    """Token '' (a saver on its own, `graph.copy`): the script itself checks the lock key."""
    from graph.store.redis.conn import connect
    from graph.store.redis.keys import lock_key
    from graph.store.redis.saver import redis_saver

    client = connect(redis_url)
    saver = redis_saver(client)  # no fencing hook: every write carries token ''
    thread_id = f"free-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    client.set(lock_key(thread_id), "a-holder's-token", px=60_000)
    with pytest.raises(BusyError):
        saver.put(config, _checkpoint(1), _metadata(1), {})
    assert not list(client.scan_iter(match=f"checkpoint*:{thread_id}:*".encode()))
    client.delete(lock_key(thread_id))
    saver.put(config, _checkpoint(1), _metadata(1), {})
    assert client.exists(saver._make_redis_checkpoint_key_cached(thread_id, "", _checkpoint(1)["id"]))
    client.close()
