"""The `backend` fixture's Redis adapter: the session's private server, emptied per test.

Tests run one at a time, so each Redis-param test gets a clean database by `FLUSHALL`
on the session server (`tests.redis_server.redis_server`); the flush also drops
LangGraph's search indexes, which the product's first writer sets up again
(`graph.store.redis.open.open_redis`), as a new SQLite file or PostgreSQL database would be.
The methods mirror `SqliteBackend` and `PostgresBackend` of `tests/conftest.py` over
keys instead of rows: the ledger hash, every key and value, and the channel values
inline in `RedisSaver`'s latest checkpoint document.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from graph.store.redis import keys as redis_keys

_UNCOUNTED = (redis_keys.FSYNC.encode(),)
"""Keys written by reads too (the durability probe's counter), left out of comparisons."""


class RedisBackend:
    """A Redis database on the session's private server, flushed before the test."""

    name = "redis"

    def __init__(self, url: str) -> None:
        from graph.store.redis.conn import connect

        self.db = url
        self._client = connect(url)
        self._client.flushall()

    def close(self) -> None:
        """Closes the adapter's connection (the data stays until the next test's flush)."""
        self._client.close()

    def ledger_row(self, thread_id: str) -> tuple[int, int, int] | None:
        """(attempts, claimed, max_attempts) read straight from the ledger hash (None if none)."""
        values = self._client.hmget(redis_keys.ledger_key(thread_id),
                                    ["attempts", "claimed", "max_attempts"])
        if all(v is None for v in values):
            return None
        return tuple(int(v) for v in values)  # type: ignore[return-value]

    def lock_gone(self, thread_id: str) -> bool:
        """True when nobody holds the thread's writer lease (none taken, released or run out)."""
        return not self._client.exists(redis_keys.lock_key(thread_id))

    def no_lock_left(self) -> bool:
        """True when no thread's writer lease is held (every one released or run out)."""
        return not self._client.keys(redis_keys.pattern(redis_keys.LOCK))

    def _items(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, canonical value) of every key, sorted by key."""
        client = self._client
        for key in sorted(client.scan_iter(count=1000)):
            if key in _UNCOUNTED:
                continue
            kind = client.type(key)
            kind = kind.decode() if isinstance(kind, bytes) else kind
            value: Any
            if kind == "string":
                value = client.get(key)
            elif kind == "hash":
                value = sorted(client.hgetall(key).items())
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            elif kind == "set":
                value = sorted(client.smembers(key))
            elif kind == "zset":
                value = client.zrange(key, 0, -1, withscores=True)
            elif kind == "ReJSON-RL":
                value = json.dumps(client.json().get(key), sort_keys=True)
            else:
                value = client.dump(key)
            yield key, repr(value).encode() if not isinstance(value, bytes) else value

    def fingerprint(self) -> str:
        """A hash of every key and value (logical content), for 'unchanged' checks."""
        digest = hashlib.sha256()
        for key, value in self._items():
            digest.update(key + b"\0" + value + b"\0")
        return digest.hexdigest()

    def dump(self) -> bytes:
        """Every key and value stored, as bytes."""
        return b"\n".join(key + b"\0" + value for key, value in self._items())

    def execute(self, sql: str, params: tuple = ()) -> None:
        raise AssertionError("a Redis database runs no SQL: mark the test sql_only")

    def update_ledger(self, thread_id: str, **columns: Any) -> None:
        """Sets fields of the thread's ledger hash behind the product's back."""
        self._client.hset(redis_keys.ledger_key(thread_id),
                          mapping={name: str(value) for name, value in columns.items()})

    def delete_ledger(self, thread_id: str) -> None:
        """Deletes the thread's ledger hash behind the product's back."""
        self._client.delete(redis_keys.ledger_key(thread_id))

    def _saver(self) -> Any:
        from graph.store.redis.saver import redis_saver

        return redis_saver(self._client)

    def _latest_key(self, thread_id: str) -> bytes:
        """The key of the thread's latest checkpoint document (ids sort by time)."""
        return latest_key(self._client, thread_id)

    def get_raw(self, thread_id: str, channel: str) -> tuple[str, bytes]:
        """("json", the JSON text of `channel` inline in the latest checkpoint document)."""
        key = self._latest_key(thread_id)
        value = self._client.json().get(key, f"$.checkpoint.channel_values.{channel}")[0]
        return "json", json.dumps(value).encode()

    def set_raw(self, thread_id: str, channel: str, type_: str, data: bytes) -> None:
        """Writes JSON text `data` as `channel` of the latest checkpoint document."""
        assert type_ == "json", "a Redis document holds JSON values only"
        key = self._latest_key(thread_id)
        self._client.json().set(key, f"$.checkpoint.channel_values.{channel}", json.loads(data))

    def edit_values(self, thread_id: str, edit: Any) -> None:
        """Applies `edit(channel_values)` to the latest checkpoint, with a matching digest."""
        saver = self._saver()
        saved = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        key = self._latest_key(thread_id)
        checkpoint = copy.deepcopy(saved.checkpoint)
        edit(checkpoint["channel_values"])
        self._client.json().set(key, "$.checkpoint", saver._dump_checkpoint(checkpoint))
        self.reseal(thread_id)

    def reseal(self, thread_id: str) -> None:
        """Sets the digest of `thread_id`'s latest checkpoint to match what is stored now."""
        reseal_redis(self._client, thread_id)


def latest_key(client: Any, thread_id: str) -> bytes:
    """The key of `thread_id`'s latest checkpoint document in `RedisSaver`'s layout."""
    found = client.scan_iter(match=f"checkpoint:{thread_id}:__empty__:*".encode(), count=1000)
    return max(found)


def reseal_redis(client: Any, thread_id: str) -> None:
    """Sets the digest of `thread_id`'s latest checkpoint (on `client`) to what is stored now."""
    from graph.store.digest import checkpoint_digest
    from graph.store.redis.digests import DOCUMENT, stored_digest
    from graph.store.redis.saver import redis_saver

    saver = redis_saver(client)
    key = latest_key(client, thread_id)
    document = client.json().get(key)["checkpoint"]  # read as stored: no digest check
    checkpoint = saver._load_checkpoint(document, document.get("channel_values", {}), [])
    checkpoint_id = key.decode().rsplit(":", 1)[1]
    client.hdel(redis_keys.digest_key(thread_id, "", checkpoint_id), "")
    saver.digests.record((thread_id, "", checkpoint_id, "", 0),
                         checkpoint_digest(saver.serde, checkpoint))
    client.hset(redis_keys.digest_key(thread_id, "", checkpoint_id), DOCUMENT,
                stored_digest(client.json().get(key)))  # the whole document, as stored now
