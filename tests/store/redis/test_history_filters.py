"""History on Redis honours `before=` and has no 10,000 limit (`graph.store.redis.exact`).

langgraph-checkpoint-redis 0.5.2 ignores `list(before=...)` (it parses checkpoint ids as
ULIDs; LangGraph's are UUIDs), caps `list` at 10,000 results, breaks on the thread id
`_` and matches ids case-insensitively. Our saver lists a thread by its exact keys. The
`upstream_still_*` tests assert upstream's plain `RedisSaver` still behaves so: when one
fails, upstream changed under us; check whether `ExactRedisSaver`'s override can go.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.redis import RedisSaver
from redisvl.exceptions import RedisSearchError

from graph.run import main as run_main
from graph.store import open_store
from graph.store.redis import keys as redis_keys
from graph.store.redis.exact import ExactRedisSaver, langgraph_keys, thread_checkpoints

pytestmark = pytest.mark.redis

TASK = "How long does shipping take at the demo shop?"
MANY = 10_001


@pytest.fixture
def db(redis_url: str) -> Iterator[str]:
    """The session server, emptied."""
    from tests.redis_adapter import RedisBackend

    backend = RedisBackend(redis_url)
    try:
        yield redis_url
    finally:
        backend.close()


@pytest.fixture
def client(db: str) -> Iterator[Any]:
    from graph.store.redis.conn import connect

    client = connect(db)
    yield client
    client.close()


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _ready(cls: type[RedisSaver], client: Any) -> RedisSaver:
    """A saver of `cls` on `client`, set up (its indexes exist already)."""
    saver = cls(redis_client=client)
    saver.setup()
    return saver


def _ids(items: Any) -> list[str]:
    return [item.config["configurable"]["checkpoint_id"] for item in items]


def _two_steps(db: str, thread_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--db", db, f"--thread={thread_id}", "--task", TASK, "--once"]) == 0
    assert run_main(["--db", db, f"--thread={thread_id}", "--once"]) == 0
    capsys.readouterr()


def test_history_before_a_checkpoint_lists_only_older_ones(
        db: str, capsys: pytest.CaptureFixture[str]) -> None:
    _two_steps(db, "before", capsys)
    with open_store(db, create=False, read_only=True) as store:
        every = _ids(store.checkpointer.list(_config("before")))
        assert len(every) >= 3 and every == sorted(every, reverse=True)
        middle = {"configurable": {**_config("before")["configurable"],
                                   "checkpoint_id": every[1]}}
        assert _ids(store.checkpointer.list(_config("before"), before=middle)) == every[2:]
        assert _ids(store.checkpointer.list(_config("before"), before=middle, limit=1)) == [
            every[2]]


def test_upstream_still_ignores_before(db: str, client: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _two_steps(db, "upstream", capsys)
    plain = _ready(RedisSaver, client)
    every = _ids(plain.list(_config("upstream")))
    middle = {"configurable": {**_config("upstream")["configurable"], "checkpoint_id": every[1]}}
    assert _ids(plain.list(_config("upstream"), before=middle)) == every


def test_ids_that_differ_in_case_or_are_an_underscore_list_only_their_own(
        db: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    for thread_id in ("Case", "case", "_"):
        _two_steps(db, thread_id, capsys)
    with open_store(db, create=False, read_only=True) as store:
        for thread_id in ("Case", "case", "_"):
            listed = list(store.checkpointer.list(_config(thread_id)))
            assert listed and {i.config["configurable"]["thread_id"] for i in listed} == {thread_id}
    plain = _ready(RedisSaver, client)
    with pytest.raises(RedisSearchError, match="Syntax error"):  # upstream still breaks on `_`
        list(plain.list(_config("_")))
    exact = _ready(ExactRedisSaver, client)
    both = {*_ids(exact.list(_config("Case"))), *_ids(exact.list(_config("case")))}
    assert set(_ids(plain.list(_config("Case")))) == both  # upstream still mixes the two


def _clone_many(client: Any, thread_id: str, count: int) -> list[str]:
    """Writes `count` checkpoint documents of `thread_id` directly, cloned from one
    `RedisSaver.put` wrote; returns their ids, oldest first."""
    saver = _ready(RedisSaver, client)
    first = "1ef00000-0000-6000-8000-000000000000"
    checkpoint = {"v": 4, "id": first, "ts": "2026-01-01T00:00:00+00:00", "channel_values": {},
                  "channel_versions": {}, "versions_seen": {}, "updated_channels": None}
    saver.put(_config(thread_id), checkpoint,  # type: ignore[arg-type]
              {"source": "loop", "step": 0, "parents": {}}, {})
    key = saver._make_redis_checkpoint_key(thread_id, "", first)
    doc = client.json().get(key)
    ids = [f"1ef00000-0000-6000-8000-{i:012x}" for i in range(count)]
    with client.pipeline(transaction=False) as pipe:
        pipe.sadd(redis_keys.saved_key(thread_id), *(f"\0{i}" for i in ids))  # as our `put` notes
        for checkpoint_id in ids[1:]:
            doc["checkpoint_id"] = checkpoint_id
            doc["checkpoint"]["id"] = checkpoint_id
            pipe.json().set(saver._make_redis_checkpoint_key(thread_id, "", checkpoint_id), "$",
                            json.loads(json.dumps(doc)))
        pipe.execute()
    return ids


@pytest.mark.slow  # about 10 s on 2 busy cores: 10,001 documents listed twice
def test_a_thread_with_more_than_10000_checkpoints_lists_every_one(db: str, client: Any) -> None:
    ids = _clone_many(client, "many", MANY)
    saver = _ready(ExactRedisSaver, client)
    assert _ids(saver.list(_config("many"))) == ids[::-1]
    assert len(list(_ready(RedisSaver, client).list(_config("many")))) == 10_000  # upstream
    saver.prune(["many"], keep_last=2)
    assert sorted(thread_checkpoints(client, "many")) == [("", i) for i in ids[-2:]]


def test_deleting_a_thread_deletes_exactly_its_own_keys_orphaned_writes_too(
        db: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    for thread_id in ("a", "a:b", "A"):
        assert run_main(["--db", db, f"--thread={thread_id}", "--task", TASK, "--once"]) == 0
    capsys.readouterr()
    orphan = "checkpoint_write:a:__empty__:1ef00000-0000-6000-8000-00000000dead:task:0"
    client.json().set(orphan, "$", {"thread_id": "a", "task_id": "task", "idx": 0})
    saver = _ready(ExactRedisSaver, client)
    others = {t: _ids(saver.list(_config(t))) for t in ("a:b", "A")}
    assert langgraph_keys(client, "a") and client.exists(orphan)
    saver.delete_thread("a")
    assert langgraph_keys(client, "a") == [] and not client.exists(orphan)
    assert {t: _ids(saver.list(_config(t))) for t in ("a:b", "A")} == others
    assert all(others.values())
