"""The checkpoint digests of `graph.store.digest`, kept in Redis beside LangGraph's documents.

`graph.store.saver.CheckedSaver` records and checks digests through this object, as
through `graph.store.digest.SqlDigests` on SQL backends. Each checkpoint has one hash
(`graph.store.redis.keys.digest_key`): field `""` holds the checkpoint's own digest(s),
field `METADATA` its metadata's, and `task_id NUL idx` each pending write's; a field
keeps every digest recorded for its slot, space separated; `WRITTEN task_id NUL idx`
marks a write LangGraph finished saving, so a deleted write is noticed. A thread's set
(`graph.store.redis.keys.digests_key`) lists its hashes so `delete_thread` removes them.

The saver writes a checkpoint's document, its digests and its place in the thread's
saved set (`graph.store.redis.keys.saved_key`) in one fenced script
(`graph.store.redis.lua.PUT`; a write and its written mark likewise, `PUT_WRITES`), and
deletes them together (`DROP`): never an undigested checkpoint, and a checkpoint deleted
afterwards (or hidden from LangGraph's search index) is noticed instead of resuming from
an older one.
There are no checkpoints from before digests on Redis: a checkpoint without its digest
is refused.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from graph.store.redis import keys as redis_keys

METADATA = "\0metadata"
"""The field (and task id slot) of a checkpoint's metadata digest."""
WRITTEN = "\0written\0"
"""Starts the field `WRITTEN task_id NUL idx` set once LangGraph saved that write."""

_RECORD = r"""
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
elseif not string.find(' ' .. cur .. ' ', ' ' .. ARGV[2] .. ' ', 1, true) then
  redis.call('HSET', KEYS[1], ARGV[1], cur .. ' ' .. ARGV[2])
end
redis.call('SADD', KEYS[2], KEYS[1])
return 1
"""


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


class RedisDigests:
    """Digests of one Redis database (the interface of `graph.store.digest.SqlDigests`).

    Args:
        client: A `redis.Redis` client (bytes or decoded replies).
        checkpoint_key: LangGraph's key of a checkpoint document, from
            `(thread_id, ns, checkpoint_id)` (`RedisSaver`'s own key function).
    """

    def __init__(self, client: Any, checkpoint_key: Callable[[str, str, str], Any]) -> None:
        self._client = client
        self._checkpoint_key = checkpoint_key
        self._record = client.register_script(_RECORD)
        self._lock = threading.Lock()

    def record(self, key: tuple[str, str, str, str, int], digest: str) -> None:
        """Adds a digest to a slot `(thread_id, ns, checkpoint_id, task_id, idx)`.

        The checkpoint's own slot has task id `""` and idx 0 (its field is `""`).
        """
        thread_id, ns, checkpoint_id, task_id, idx = key
        field = "" if task_id == "" else task_id if task_id == METADATA else f"{task_id}\0{idx}"
        with self._lock:
            self._record(keys=[redis_keys.digest_key(thread_id, ns, checkpoint_id),
                               redis_keys.digests_key(thread_id)], args=[field, digest])

    def marker(self) -> str:
        """The id before which checkpoints have no digest: none on Redis (`""`)."""
        return ""

    def of_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, set[str]]:
        """Every digest recorded for one checkpoint, by task id (the checkpoint's own: '').

        Raises:
            ValueError: A field is not one this program writes, or the hash is not in
                the thread's set of digest hashes (deleted, replaced or another thread's).
            redis.ResponseError: A key of the wrong Redis type (the saver refuses it).
        """
        key = redis_keys.digest_key(thread_id, ns, checkpoint_id)
        with self._lock:
            pipe = self._client.pipeline(transaction=True)
            pipe.hgetall(key)
            pipe.sismember(redis_keys.digests_key(thread_id), key)
            rows, listed = pipe.execute()
        if rows and not listed:
            raise ValueError("its digest hash is missing from the thread's set of digest hashes")
        found: dict[str, set[str]] = {}
        for field, value in rows.items():
            name = _text(field)
            if name.startswith(WRITTEN):
                continue
            task = name if name in ("", METADATA) else name.rpartition("\0")[0]
            if name not in ("", METADATA) and "\0" not in name:
                raise ValueError(f"its digest hash has a field {name!r} never written here")
            found.setdefault(task, set()).update(_text(value).split(" "))
        return found

    def written_counts(self, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, int]:
        """How many writes LangGraph saved for the checkpoint, by task id."""
        with self._lock:
            fields = self._client.hkeys(redis_keys.digest_key(thread_id, ns, checkpoint_id))
        counts: dict[str, int] = {}
        for field in map(_text, fields):
            if field.startswith(WRITTEN):
                task = field[len(WRITTEN):].rpartition("\0")[0]
                counts[task] = counts.get(task, 0) + 1
        return counts

    def check_indexed(self, thread_id: str, ns: str, checkpoint_id: str,
                      metadata: Mapping[str, Any]) -> None:
        """Refuses a checkpoint document whose indexed fields say it is another one.

        LangGraph's search index finds a document by its own `thread_id`,
        `checkpoint_ns`, `checkpoint_id`, `step` and `source`, which a load by key (the
        latest-checkpoint pointer) never reads: one edited there would be resumed by a
        step while history and verify, which list by the index, miss it.

        Raises:
            ValueError: A field differs from the checkpoint as loaded (`metadata`).
            redis.ResponseError: The key is not a JSON document (the saver refuses it).
        """
        expected = [[thread_id], [ns or "__empty__"], [checkpoint_id], [metadata.get("step")],
                    [metadata.get("source")]]
        if self._indexed_fields(thread_id, ns, checkpoint_id) != expected:
            raise ValueError("the fields LangGraph's index finds it by (thread, namespace, id, "
                             "step, source) do not match it: edited or copied")

    def _indexed_fields(self, thread_id: str, ns: str, checkpoint_id: str) -> list[Any]:
        """Each field of `check_indexed` as a JSONPath result list (`[]` when missing)."""
        paths = ("$.thread_id", "$.checkpoint_ns", "$.checkpoint_id", "$.step", "$.source")
        with self._lock:
            raw = self._client.execute_command(
                "JSON.GET", self._checkpoint_key(thread_id, ns, checkpoint_id), *paths)
        # redis-py may decode the reply itself (RedisJSON's response callback), or not
        found = json.loads(raw) if isinstance(raw, (bytes, str)) else raw or {}
        if not isinstance(found, dict):
            raise ValueError("its document's fields cannot be read")
        return [found.get(path, []) for path in paths]

    def checkpoint_exists(self, thread_id: str, ns: str, checkpoint_id: str) -> bool:
        """Whether LangGraph's checkpoint document is there now."""
        with self._lock:
            return bool(self._client.exists(self._checkpoint_key(thread_id, ns, checkpoint_id)))

    def saved_by_ns(self, thread_id: str) -> dict[str, set[str]]:
        """The ids of the thread's checkpoints whose `put` finished, by namespace."""
        with self._lock:
            members = self._client.smembers(redis_keys.saved_key(thread_id))
        found: dict[str, set[str]] = {}
        for member in members:
            ns, _, checkpoint_id = _text(member).rpartition("\0")
            found.setdefault(ns, set()).add(checkpoint_id)
        return found

    def saved_ids(self, thread_id: str, ns: str) -> set[str]:
        """The ids of the thread's checkpoints in namespace `ns` whose `put` finished."""
        return self.saved_by_ns(thread_id).get(ns, set())

    def thread_keys(self, thread_id: str) -> list[bytes]:
        """Every key of ours for the thread (to give them the TTL of LangGraph's keys)."""
        index = redis_keys.digests_key(thread_id)
        with self._lock:
            hashes = sorted(self._client.smembers(index))
        return [*hashes, index, redis_keys.saved_key(thread_id)]
