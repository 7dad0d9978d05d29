"""The checkpoint digests of `graph.store.digest`, kept in Redis beside LangGraph's documents.

`graph.store.saver.CheckedSaver` records and checks digests through this object, as
through `graph.store.digest.SqlDigests` on SQL backends. Each checkpoint has one hash
(`graph.store.redis.keys.digest_key`): field `""` holds the checkpoint's own digest(s),
field `METADATA` its metadata's, and `task_id NUL idx` each pending write's; a field
keeps every digest recorded for its slot, space separated; `WRITTEN task_id NUL idx`
marks a write LangGraph finished saving, so a deleted write is noticed; its value is
the digest of the whole write document as stored (`stored_digest`: task path, index,
type and blob included), or `1` where it was marked before those digests. Field
`DOCUMENT` holds the digest of the checkpoint's whole document as stored, bar
`has_writes` (which `put_writes` sets later; checked against the marks instead): its
`checkpoint_ts`, `run_id`, raw metadata and nested `pending_sends` are in no other
digest. Both are computed from the very JSON text the fenced script stores (`PUT`,
`PUT_WRITES` in `graph.store.redis.lua`) and written by it in the same step, so they
cover exactly what is stored; a `1` mark on a checkpoint from since `DOCUMENTS_SINCE`
is damage. A thread's set
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

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base.id import uuid6

from graph.store.redis import keys as redis_keys

__all__ = ["DOCUMENT", "DOCUMENTS_SINCE", "LEGACY_WRITTEN", "METADATA", "RedisDigests",
           "StoredCheckpoint", "WRITTEN", "stored_digest", "stored_json"]

METADATA = "\0metadata"
"""The field (and task id slot) of a checkpoint's metadata digest."""
WRITTEN = "\0written\0"
"""Starts the field `WRITTEN task_id NUL idx` set once LangGraph saved that write."""
DOCUMENT = "\0document"
"""The field of the digest of a checkpoint's whole stored document (`stored_digest`)."""
DOCUMENTS_SINCE = f"{redis_keys.PREFIX}documents-since"
"""A string: the checkpoint id (uuid6) from which on a saved checkpoint has a `DOCUMENT`
digest (set once, by the first writer after this digest existed). An older checkpoint
without one is from before it; one whose digest exists is checked whatever the marker says,
so an edited marker never switches a check off."""
LEGACY_WRITTEN = "1"
"""The value of a `WRITTEN` field marked before write documents had digests."""


def stored_digest(document: Any) -> str:
    """The SHA-256 of a stored RedisJSON document (a dict), bar its `has_writes` flag.

    Canonical form: JSON with sorted keys and no spaces. The saver computes it from the
    document it hands its script, parsed back from that exact JSON text
    (`stored_json`); a load computes it from what `JSON.GET key $` returned:
    RedisJSON gives back the same values (floats as their shortest round trip, as Python).
    """
    rest = {k: v for k, v in document.items() if k != "has_writes"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def stored_json(document: dict[str, Any]) -> tuple[str, str]:
    """The JSON text a fenced script stores for `document`, and that text's `stored_digest`.

    The digest is taken of the text parsed back, as a load parses the server's reply,
    so tuples and lists, or any value JSON writes in another form, digest alike.
    """
    text = json.dumps(document)
    return text, stored_digest(json.loads(text))


def _json_doc(raw: Any) -> Any:
    """A `JSON.GET key $` reply: the document, or None when the key is missing."""
    if raw is None:
        return None
    found = json.loads(raw) if isinstance(raw, (bytes, str)) else raw
    return found[0] if isinstance(found, list) and len(found) == 1 else found


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


@dataclass(frozen=True)
class StoredCheckpoint:
    """One checkpoint's stored parts beside LangGraph's load (`RedisDigests.stored`)."""

    document: Any
    """The whole RedisJSON document (a dict), or None when missing."""
    document_digest: str | None
    """Field `DOCUMENT` of its digest hash, or None."""
    written: dict[str, str]
    """The `WRITTEN` marks, by `task_id NUL idx`: each write's `stored_digest` or `"1"`."""
    registry: list[tuple[str, float]]
    """Upstream's sorted set of its write keys: (key, score)."""
    saved: bool
    """Whether it is in the thread's saved set."""


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
            if name.startswith(WRITTEN) or name == DOCUMENT:
                continue
            task, sep, idx = ("", "", "") if name in ("", METADATA) else name.rpartition("\0")
            if name not in ("", METADATA) and (not sep or not task  # a write's: TASK NUL IDX
                                               or not idx.lstrip("-").isdigit()):
                raise ValueError(f"its digest hash has a field {name!r:.80} never written here")
            task = task or name
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

    def documents_since(self, *, create: bool) -> str:
        """`DOCUMENTS_SINCE`, set to a new id now when missing and `create`.

        Returns "~" (after every id: nothing is from before) when missing and not created.

        Raises:
            ValueError: The key is not a string holding a checkpoint id.
            redis.ResponseError: Not WRONGTYPE: the server refused.
        """
        with self._lock:
            if create:
                self._client.set(DOCUMENTS_SINCE, str(uuid6()), nx=True)
            try:
                found = self._client.get(DOCUMENTS_SINCE)
            except Exception as exc:
                if "WRONGTYPE" not in str(exc):
                    raise
                raise ValueError(f"{DOCUMENTS_SINCE} is not a string") from None
        if found is None:
            return "~"
        text = _text(found)
        if len(text) != 36 or any(c not in "0123456789abcdef-" for c in text):
            raise ValueError(f"{DOCUMENTS_SINCE} does not hold a checkpoint id")
        return text

    def stored(self, thread_id: str, ns: str, checkpoint_id: str, registry_key: Any
               ) -> StoredCheckpoint:
        """What is stored for one checkpoint beside LangGraph's load, read in one pipeline.

        Args:
            thread_id: The thread.
            ns: The checkpoint's namespace.
            checkpoint_id: The checkpoint.
            registry_key: Upstream's sorted set of the checkpoint's write keys.

        Raises:
            redis.ResponseError: A key of the wrong Redis type (the saver refuses it).
        """
        with self._lock:
            pipe = self._client.pipeline(transaction=True)
            pipe.execute_command("JSON.GET", self._checkpoint_key(thread_id, ns, checkpoint_id), "$")
            pipe.hgetall(redis_keys.digest_key(thread_id, ns, checkpoint_id))
            pipe.zrange(registry_key, 0, -1, withscores=True)
            pipe.sismember(redis_keys.saved_key(thread_id), f"{ns}\0{checkpoint_id}")
            raw, fields, registry, saved = pipe.execute()
        marks = {_text(k): _text(v) for k, v in fields.items()}
        return StoredCheckpoint(
            document=_json_doc(raw), document_digest=marks.get(DOCUMENT),
            written={name[len(WRITTEN):]: value for name, value in marks.items()
                     if name.startswith(WRITTEN)},
            registry=[(_text(member), score) for member, score in registry], saved=bool(saved))

    def check_sets(self, thread_id: str) -> None:
        """Refuses a foreign member in the thread's digest set or saved set.

        Each member of the digest set is one of the thread's digest hash keys; each of
        the saved set is `ns NUL checkpoint_id`, and its checkpoint has a digest hash.

        Raises:
            ValueError: A member is not one this program adds.
            redis.ResponseError: A key of the wrong Redis type (the saver refuses it).
        """
        with self._lock:
            pipe = self._client.pipeline(transaction=True)
            pipe.smembers(redis_keys.digests_key(thread_id))
            pipe.smembers(redis_keys.saved_key(thread_id))
            hashes, saved = pipe.execute()
        for member in hashes:
            if not redis_keys.is_own_digest(thread_id, member):
                raise ValueError(f"its set of digest hashes holds "
                                 f"{redis_keys.shown(bytes(member))}, not one of its digest hashes")
        for member in map(_text, saved):
            ns, sep, checkpoint_id = member.rpartition("\0")
            if not sep or redis_keys.digest_key(thread_id, ns, checkpoint_id) not in hashes:
                raise ValueError(f"its set of saved checkpoints holds {member!r:.80}, not "
                                 "a checkpoint with digests")

    def write_documents(self, keys: list[Any]) -> list[Any]:
        """The stored write documents at `keys` (None where missing), in order."""
        if not keys:
            return []
        with self._lock:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.execute_command("JSON.GET", key, "$")
            return [_json_doc(raw) for raw in pipe.execute()]

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
            hashes = sorted(m for m in self._client.smembers(index)
                            if redis_keys.is_own_digest(thread_id, m))
        return [*hashes, index, redis_keys.saved_key(thread_id)]
