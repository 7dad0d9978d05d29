"""`graph.store.redis.saver.CheckedRedisSaver` (LangGraph's Redis checkpointer with our checks) runs
our graph on the private server: the same values and history as LangGraph's in-memory saver,
resuming from a new saver, and deletion of a thread with its digests.

`RedisSaver` stores each checkpoint as one plain RedisJSON document (no checksum inside);
the digests kept beside it refuse an edited document, and the strict serializer refuses a
LangChain constructor envelope. Damage to each part is in `tests/store/redis/test_saver_damage.py`.

Redis only: the SQL savers store checksummed bytes (`graph.store.serde`), tested through every
backend in `tests/checkpoints/test_damage.py`; a RedisJSON document has no checksum inside, which is why
the digests beside it and these tests exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from graph.agent import build_graph, initial_state
from graph.errors import ErrorCode
from graph.store.serde import CheckpointIntegrityError
from nodes.context import LedgerEntry, StepContext
from nodes.demo_model import DEMO_MODEL_ID, OfflineDemoModel
from tests.memory_ledger import MemoryLedger

TASK = "How long does shipping take at the demo shop?"


@pytest.fixture
def saver(redis_url: str) -> Iterator[Any]:
    from graph.store.redis.conn import connect
    from graph.store.redis.saver import redis_saver

    client = connect(redis_url)  # as the Redis store connects: bytes, no retries
    try:
        yield redis_saver(client)
    finally:
        client.close()


class _Thread:
    """One thread of the graph compiled with `checkpointer`, stepped with the offline demo model."""

    def __init__(self, checkpointer: Any, thread_id: str | None = None) -> None:
        self.thread_id = thread_id or f"t-{uuid.uuid4().hex}"
        self.graph = build_graph(checkpointer)
        self.ledger = MemoryLedger()
        self.config: Any = {"configurable": {"thread_id": self.thread_id}}
        self.context = StepContext(self.thread_id, self.ledger, OfflineDemoModel())

    def step(self, first: bool) -> tuple[str, ...]:
        graph_input = None
        if first:
            self.ledger.create(self.thread_id, 4)
            graph_input = dict(initial_state(thread_id=self.thread_id, task=TASK, model=DEMO_MODEL_ID,
                                             max_attempts=4, created_at="2026-01-01T00:00:00+00:00"))
        self.graph.invoke(graph_input, self.config, context=self.context, durability="sync")
        return tuple(self.graph.get_state(self.config).next)

    def run(self) -> list[Any]:
        """Steps the thread to its end; returns its history, newest first."""
        first = True
        for _ in range(20):
            if not self.step(first):
                return list(self.graph.get_state_history(self.config))
            first = False
        raise AssertionError("the demo thread did not end in 20 steps")


def _latest_document(redis_url: str, thread_id: str) -> tuple[Any, bytes]:
    import redis

    client = redis.Redis.from_url(redis_url)
    key = sorted(client.scan_iter(match=f"checkpoint:{thread_id}:*".encode()))[-1]
    return client, key


def test_redis_saver_steps_our_graph_to_the_same_values_and_history_as_memory(saver: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    on_redis = _Thread(saver)
    in_memory = _Thread(InMemorySaver(), on_redis.thread_id)
    history, expected = on_redis.run(), in_memory.run()
    assert [s.values for s in history] == [s.values for s in expected]
    assert [s.next for s in history] == [s.next for s in expected]
    assert [s.metadata["step"] for s in history] == [s.metadata["step"] for s in expected]
    assert history[0].values["messages"][-1]["role"] == "assistant"
    assert on_redis.ledger.read(on_redis.thread_id) == LedgerEntry(2, 2, 4)


def test_redis_saver_resumes_a_thread_from_a_new_saver(saver: Any, redis_url: str) -> None:
    import redis

    from graph.store.redis.saver import redis_saver

    thread = _Thread(saver)
    assert thread.step(first=True)
    with redis.Redis.from_url(redis_url) as client:
        thread.graph = build_graph(redis_saver(client))
        while thread.step(first=False):
            pass
        final = thread.graph.get_state(thread.config).values
    assert final["messages"][-1]["role"] == "assistant"
    assert thread.ledger.read(thread.thread_id) == LedgerEntry(2, 2, 4)


def test_redis_saver_deletes_a_thread_whole_with_its_digests(saver: Any, redis_url: str) -> None:
    import redis

    thread = _Thread(saver)
    history = thread.run()
    client = redis.Redis.from_url(redis_url)
    ours = saver.digests.thread_keys(thread.thread_id)
    assert len(ours) == len(history) + 2  # a digest hash per checkpoint, its set, the saved set
    assert all(client.exists(key) for key in ours)
    saver.delete_thread(thread.thread_id)
    assert thread.graph.get_state(thread.config).values == {}
    left = list(client.scan_iter(match=f"*{thread.thread_id}*".encode()))
    assert left == []


def test_redis_saver_stores_channel_values_as_plain_json_without_our_checksum(
        saver: Any, redis_url: str) -> None:
    thread = _Thread(saver)
    thread.step(first=True)
    client, key = _latest_document(redis_url, thread.thread_id)
    stored = client.json().get(key)["checkpoint"]["channel_values"]
    assert stored["messages"][0] == {"role": "user", "content": TASK}  # no MRC1 prefix, no digest


def test_an_edited_checkpoint_document_is_refused(saver: Any, redis_url: str) -> None:
    thread = _Thread(saver)
    thread.step(first=True)
    client, key = _latest_document(redis_url, thread.thread_id)
    client.json().set(key, "$.checkpoint.channel_values.messages[0].content", "edited")
    with pytest.raises(CheckpointIntegrityError, match="does not match its digest"):
        thread.graph.get_state(thread.config)
    assert client.json().get(key, "$.checkpoint.channel_values.messages[0].content") == ["edited"]


def test_a_constructor_envelope_in_a_stored_value_is_never_revived(saver: Any, redis_url: str) -> None:
    thread = _Thread(saver)
    thread.step(first=True)
    client, key = _latest_document(redis_url, thread.thread_id)
    client.json().set(key, "$.checkpoint.channel_values.messages[0]", {
        "lc": 1, "type": "constructor", "id": ["langchain_core", "messages", "HumanMessage"],
        "kwargs": {"content": "revived"}})
    with pytest.raises(CheckpointIntegrityError, match="constructor envelope") as refused:
        thread.graph.get_state(thread.config)
    assert refused.value.error_code == ErrorCode.DAMAGED


def test_a_put_killed_before_its_script_ran_leaves_the_thread_resumable(
        saver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from graph.store.redis.saver import CheckedRedisSaver

    thread = _Thread(saver)
    thread.step(first=True)
    script = CheckedRedisSaver._script

    def killed(self: Any, name: str, *args: Any) -> Any:
        if name == "PUT":  # the document, digests and saved mark are one script: all or none
            raise SystemExit("killed inside put, before its script ran")
        return script(self, name, *args)

    monkeypatch.setattr(CheckedRedisSaver, "_script", killed)
    with pytest.raises(SystemExit):
        thread.step(first=False)
    monkeypatch.undo()
    while thread.step(first=False):
        pass
    assert thread.graph.get_state(thread.config).values["progress"]["status"] == "done"


def test_a_checkpoint_saved_while_the_history_is_read_is_not_taken_for_damage(
        saver: Any) -> None:
    thread = _Thread(saver)
    thread.step(first=True)
    history = saver.list({"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": ""}})
    first = next(history)
    thread.step(first=False)  # a writer saves a newer checkpoint meanwhile
    assert [first, *history][-1].metadata["source"] == "input"


def test_writes_saved_before_their_checkpoint_are_still_loaded_with_it(saver: Any) -> None:
    """LangGraph saves a run's input checkpoint in the background while its first task runs,
    so the task's writes can reach Redis first (the flaky approvals test on Redis)."""
    from langgraph.checkpoint.base import empty_checkpoint

    thread_id = f"t-{uuid.uuid4().hex}"
    checkpoint = empty_checkpoint()
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "",
                                    "checkpoint_id": checkpoint["id"]}}
    saver.put_writes(config, [("messages", ["hi"]), ("progress", {"status": "ready"})], "task-1")
    saver.put({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}, checkpoint,
              {"source": "input", "step": -1, "parents": {}}, {})
    loaded = saver.get_tuple(config)
    assert [(t, c) for t, c, _ in loaded.pending_writes] == [("task-1", "messages"),
                                                            ("task-1", "progress")]
    whole = saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert [len(t.pending_writes) for t in whole] == [2]


def test_a_write_saved_while_its_checkpoint_is_read_is_not_taken_for_damage(
        saver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis reads have no snapshot: another process may finish a write between LangGraph's
    load and the count of saved writes (seen as `damaged` in a concurrent batch)."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.redis import RedisSaver

    thread_id = f"t-{uuid.uuid4().hex}"
    checkpoint = empty_checkpoint()
    saver.put({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}, checkpoint,
              {"source": "input", "step": -1, "parents": {}}, {})
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "",
                                    "checkpoint_id": checkpoint["id"]}}
    load, raced = RedisSaver.get_tuple, []

    def load_then_another_process_writes(self: Any, conf: Any) -> Any:
        loaded = load(self, conf)
        if not raced:
            raced.append(True)
            saver.put_writes(config, [("messages", ["hi"])], "task-1")
        return loaded

    monkeypatch.setattr(RedisSaver, "get_tuple", load_then_another_process_writes)
    loaded = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert raced and [(t, c) for t, c, _ in loaded.pending_writes] == [("task-1", "messages")]


def test_setup_found_leaves_the_saver_as_upstreams_setup_does_asking_the_server_nothing(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`CheckedRedisSaver.setup_found` stands in for `RedisSaver.setup` (0.5.2) when
    `graph.store.redis.open` already listed both indexes: it must leave the same saver
    (cluster mode, key registry) and send no command; a change upstream fails here."""
    from graph.store.redis.conn import connect
    from graph.store.redis.open import _index_names
    from graph.store.redis.saver import CheckedRedisSaver

    upstream = CheckedRedisSaver(redis_client=connect(redis_url))
    upstream.setup()  # creates the indexes on this server
    ours = CheckedRedisSaver(redis_client=connect(redis_url))
    indexes = _index_names(connect(redis_url), redis_url)
    sent: list[Any] = []
    monkeypatch.setattr(type(ours._redis), "execute_command",
                        lambda self, *args, **kwargs: sent.append(args))
    assert ours.setup_found(indexes) is True
    assert sent == []
    assert ours.cluster_mode == upstream.cluster_mode is False
    assert type(ours._key_registry) is type(upstream._key_registry)
    assert ours._key_registry is not None
    assert set(vars(ours)) == set(vars(upstream))
    assert CheckedRedisSaver(redis_client=connect(redis_url)).setup_found({"checkpoint"}) is False
