"""Damage to what `CheckedRedisSaver` stores is refused on load, and the keys stay as they were.

Each case edits one part of a finished demo thread on the private server (a field of the
latest checkpoint's RedisJSON document, an older checkpoint's pending-write document, or
this project's digest hash beside them), then loads the thread the way LangGraph does
(`get_state` reads through `get_tuple`, `get_state_history` through `list`): the load
raises `CheckpointIntegrityError` (`damaged`) and every key's bytes are unchanged.

Redis only: the parts damaged here (RedisJSON document fields, pending-write documents,
digest hashes) exist only in `RedisSaver`'s layout; checksummed SQL values are damaged in
`tests/checkpoints/test_damage.py`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from graph.errors import ErrorCode
from graph.store.serde import CheckpointIntegrityError, StoredTypeError
from tests.store.redis.test_saver import _Thread

_CONSTRUCTOR = {"lc": 1, "type": "constructor", "id": ["os", "system"], "kwargs": {}}


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    from graph.store.redis.conn import connect

    with connect(redis_url) as client:
        yield client


@pytest.fixture
def thread(client: Any) -> _Thread:
    """A demo thread run to its end on a checked saver."""
    from graph.store.redis.saver import redis_saver

    thread = _Thread(redis_saver(client))
    thread.run()
    return thread


def _keys(client: Any, prefix: str, thread_id: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{prefix}{thread_id}*".encode()))


def _latest(client: Any, thread_id: str) -> bytes:
    return _keys(client, "checkpoint:", thread_id)[-1]


def _older_write(client: Any, thread_id: str) -> bytes:
    """A pending write of the thread's second checkpoint (it has some; the latest has none)."""
    second = _keys(client, "checkpoint:", thread_id)[1].split(b":")[-1]
    return [k for k in _keys(client, "checkpoint_write:", thread_id) if second in k][0]


def _digest_hash(client: Any, thread_id: str, checkpoint: bytes) -> bytes:
    checkpoint_id = checkpoint.split(b":")[-1]
    return [k for k in _keys(client, "mandapi-resume:digest:", thread_id)
            if k.endswith(checkpoint_id)][0]


def _set(path: str, value: Any) -> Callable[[Any, str], None]:
    return lambda c, t: c.json().set(_latest(c, t), path, value)


def _set_write(path: str, value: Any) -> Callable[[Any, str], None]:
    return lambda c, t: c.json().set(_older_write(c, t), path, value)


def _blob(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def _retype(key: Callable[[Any, str], bytes]) -> Callable[[Any, str], None]:
    def damage(c: Any, t: str) -> None:
        name = key(c, t)
        c.delete(name)
        c.set(name, "not what was stored")
    return damage


def _latest_digest(c: Any, t: str) -> bytes:
    return _digest_hash(c, t, _latest(c, t))


def _older_digest(c: Any, t: str) -> bytes:
    return _digest_hash(c, t, _keys(c, "checkpoint:", t)[1])


DAMAGE: dict[str, tuple[Callable[[Any, str], None], bool]] = {
    # name: (damage, whether the latest checkpoint is hit: get_state refuses too)
    "doc channel value": (_set("$.checkpoint.channel_values.progress.attempts", 0), True),
    "doc channel removed": (lambda c, t: c.json().delete(
        _latest(c, t), "$.checkpoint.channel_values.progress"), True),
    "doc constructor envelope": (_set("$.checkpoint.channel_values.messages[0]",
                                      _CONSTRUCTOR), True),
    "doc channel version": (_set("$.checkpoint.channel_versions.messages",
                                 "00000000000000000000000000000009.0"), True),
    "doc versions seen": (_set("$.checkpoint.versions_seen", {}), True),
    "doc checkpoint id": (_set("$.checkpoint.id", "1f000000-0000-6000-8000-000000000000"), True),
    "doc timestamp": (_set("$.checkpoint.ts", "2020-01-01T00:00:00.000000+00:00"), True),
    "doc serializer type": (_set("$.checkpoint.type", "msgpack"), True),
    "doc metadata": (_set("$.metadata", '{"source":"loop","step":4,"parents":{}}'), True),
    "doc parent": (_set("$.parent_checkpoint_id", ""), True),
    # fields only LangGraph's search index reads: a load by key never sees them
    "doc indexed as another thread": (_set("$.thread_id", "someone-else"), True),
    "doc indexed in another namespace": (_set("$.checkpoint_ns", "sub"), True),
    "doc indexed with another id": (_set("$.checkpoint_id",
                                         "1f000000-0000-6000-8000-000000000000"), True),
    "doc indexed at another step": (_set("$.step", 99), True),
    "doc indexed with another source": (_set("$.source", "input"), True),
    "doc retyped": (_retype(_latest), True),
    "doc deleted": (lambda c, t: c.delete(_latest(c, t)), True),
    "doc of an older checkpoint deleted": (lambda c, t: c.delete(
        _keys(c, "checkpoint:", t)[2]), False),
    "write value": (_set_write("$.blob", _blob({"edited": True})), False),
    "write constructor envelope": (_set_write("$.blob", _blob(_CONSTRUCTOR)), False),
    "write channel": (_set_write("$.channel", "thread"), False),
    "write task": (_set_write("$.task_id", "00000000-0000-0000-0000-000000000000"), False),
    "write serializer type": (_set_write("$.type", "bytes"), False),
    "write deleted": (lambda c, t: c.delete(_older_write(c, t)), False),
    "digest hash deleted": (lambda c, t: c.delete(_latest_digest(c, t)), True),
    "digest edited": (lambda c, t: c.hset(_latest_digest(c, t), "", "0" * 64), True),
    "metadata digest deleted": (lambda c, t: c.hdel(_latest_digest(c, t), "\0metadata"), True),
    "write digest deleted": (lambda c, t: c.hdel(_older_digest(c, t), *[
        f for f in c.hkeys(_older_digest(c, t)) if f not in (b"", b"\0metadata")]), False),
    "digest hash retyped": (_retype(_latest_digest), True),
}


def _dump(client: Any, thread_id: str) -> dict[bytes, bytes]:
    return {k: client.dump(k) for k in client.scan_iter(match=f"*{thread_id}*".encode())}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damage_to_a_stored_checkpoint_is_refused_and_left_as_it_is(
        case: str, client: Any, thread: _Thread) -> None:
    damage, hits_latest = DAMAGE[case]
    damage(client, thread.thread_id)
    before = _dump(client, thread.thread_id)
    with pytest.raises(CheckpointIntegrityError) as refused:
        list(thread.graph.get_state_history(thread.config))
    assert refused.value.error_code == ErrorCode.DAMAGED
    if hits_latest:
        with pytest.raises(CheckpointIntegrityError):
            thread.graph.get_state(thread.config)
    assert _dump(client, thread.thread_id) == before


def test_a_checkpoint_whose_writes_flag_was_cleared_is_refused(client: Any,
                                                              thread: _Thread) -> None:
    key = _keys(client, "checkpoint:", thread.thread_id)[1]
    client.json().set(key, "$.has_writes", False)  # get_tuple then loads no pending writes
    config: Any = {"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": "",
                                    "checkpoint_id": key.split(b":")[-1].decode()}}
    with pytest.raises(CheckpointIntegrityError, match="pending write of task .* is missing"):
        thread.graph.checkpointer.get_tuple(config)


def test_an_undamaged_thread_loads_its_whole_history(client: Any, thread: _Thread) -> None:
    history = list(thread.graph.get_state_history(thread.config))
    assert len(history) == len(_keys(client, "checkpoint:", thread.thread_id))
    assert history[0].values["progress"]["status"] == "done"


def test_the_strict_serializer_revives_no_constructor_and_stores_nothing_it_cannot_load() -> None:
    from langgraph.types import Interrupt

    from graph.store.redis.serde import StrictRedisSerializer

    serde = StrictRedisSerializer()
    with pytest.raises(CheckpointIntegrityError, match="constructor envelope"):
        serde.loads_typed(("json", json.dumps({"a": [_CONSTRUCTOR]}).encode()))
    with pytest.raises(CheckpointIntegrityError, match="never written here"):
        serde.loads_typed(("bytes", b"raw"))
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    packed = JsonPlusSerializer().dumps_typed({"m": HumanMessage("revived")})
    assert packed[0] == "msgpack"
    with pytest.raises(CheckpointIntegrityError, match="msgpack extension"):
        serde.loads_typed(packed)
    with pytest.raises(StoredTypeError):
        serde.dumps_typed({"items": {1, 2}})
    record = Interrupt(value={"kind": "approval"}, id="i-1")
    assert serde.loads_typed(serde.dumps_typed([record])) == [record]


def _review() -> Any:
    from langgraph.types import Interrupt

    pending = {"tool_call_id": "w1", "name": "write_file", "arguments": '{"path":"a","text":"b"}',
               "sha256": "0" * 64}
    return [Interrupt(value={"kind": "approval", "pending": [pending]}, id="i-1")]


def test_a_review_interrupt_write_loads_back_as_an_interrupt_record(client: Any,
                                                                     thread: _Thread) -> None:
    saver = thread.graph.checkpointer
    latest = saver.get_tuple(thread.config)
    saver.put_writes(latest.config, [("__interrupt__", _review())], "task-review")
    loaded = saver.get_tuple(thread.config)
    assert [w[1:] for w in loaded.pending_writes] == [("__interrupt__", _review())]


def test_an_edited_review_interrupt_write_is_refused(client: Any, thread: _Thread) -> None:
    saver = thread.graph.checkpointer
    latest = saver.get_tuple(thread.config)
    saver.put_writes(latest.config, [("__interrupt__", _review())], "task-review")
    key = [k for k in _keys(client, "checkpoint_write:", thread.thread_id)
           if b"task-review" in k][0]
    stored = json.loads(base64.b64decode(client.json().get(key, "$.blob")[0]))
    stored[0]["value"]["pending"][0]["arguments"] = '{"path":"/etc/passwd","text":"b"}'
    client.json().set(key, "$.blob", _blob(stored))
    with pytest.raises(CheckpointIntegrityError, match="matches no digest"):
        thread.graph.get_state(thread.config)


def test_pruning_old_checkpoints_leaves_the_thread_loadable(client: Any, thread: _Thread) -> None:
    thread.graph.checkpointer.prune([thread.thread_id], keep_last=2)
    history = list(thread.graph.get_state_history(thread.config))
    assert len(history) == 2 == len(_keys(client, "checkpoint:", thread.thread_id))
    assert len(_keys(client, "mandapi-resume:digest:", thread.thread_id)) == 2
    assert history[0].values["progress"]["status"] == "done"



def test_a_write_saved_while_its_checkpoint_is_read_is_read_again_not_refused(
        client: Any, thread: _Thread, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader without the thread's lock (a batch reading a thread its cap holds back,
    history) loaded a checkpoint's writes and digests, then upstream's write registry, with
    a write saved in between: the registry named a write whose task had no digest in the
    first read, and the sound thread was refused as damaged (seen twice in ~20 loaded runs
    of the four-batch cap test on Redis). The checkpoint is now read again, and loads with
    the new write. (A task digest really missing stays refused: the field corpus.)"""
    from graph.store.redis.digests import RedisDigests

    saver = thread.graph.checkpointer
    key = _keys(client, "checkpoint:", thread.thread_id)[1]
    config: Any = {"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": "",
                                    "checkpoint_id": key.split(b":")[-1].decode()}}
    stored = RedisDigests.stored
    raced: list[bool] = []

    def with_a_write_saved_first(self: Any, *args: Any) -> Any:
        if not raced:  # another process saves a write of this checkpoint just now
            raced.append(True)
            saver.put_writes(config, [("messages", [])], "a-task-saved-meanwhile")
        return stored(self, *args)

    monkeypatch.setattr(RedisDigests, "stored", with_a_write_saved_first)
    loaded = saver.get_tuple(config)
    assert raced and "a-task-saved-meanwhile" in {w[0] for w in loaded.pending_writes}
