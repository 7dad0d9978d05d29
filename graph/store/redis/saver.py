"""LangGraph's Redis checkpointer with this project's checks: `CheckedRedisSaver`.

`RedisSaver` (langgraph-checkpoint-redis) stores each checkpoint as one RedisJSON
document, channel values inline, and each pending write as another; it takes no
serializer, so `graph.store.serde`'s checksum inside serialized bytes cannot be used. Instead:

* `graph.store.saver.CheckedSaver` is mixed in, as on SQLite and PostgreSQL: before
  `put` and `put_writes` write, the digests of `graph.store.digest` (a SHA-256 over the
  canonical form of the checkpoint id, channel versions, versions seen and channel
  values; of each pending write) are recorded in `graph.store.redis.digests`, and every load
  (`get_tuple`, which `get_state` and LangGraph's Pregel loop call, and `list`, which
  `get_state_history` calls) checks the shape of what was loaded and recomputes them;
* what that digest leaves out (the metadata, the checkpoint's `v`, `ts` and
  `updated_channels`, the parent's id) gets a digest of its own (`rest_digest`);
* once LangGraph's `put` or `put_writes` returns, the checkpoint or write is marked
  saved, so one deleted later (or hidden from LangGraph's search index) is refused
  instead of resuming from an older checkpoint or running a task again; the mark holds
  the digest of the whole document as stored (`graph.store.redis.digests.stored_digest`),
  so the fields no load reads (`checkpoint_ts`, `run_id`, a write's `task_path`, `idx`
  and `type`) are covered too, and every load checks each document's exact field set,
  upstream's registry of write keys and the thread's saved and digest sets
  (`_check_stored`): any one field edited is refused;
* the serializer is `graph.store.redis.serde.StrictRedisSerializer`: nothing but LangGraph's
  interrupt record is revived from stored JSON, and values are never "recovered"
  as raw data when they fail to load.

A refusal raises `CheckpointIntegrityError` (`damaged`, exit 4) naming the checkpoint
and changes nothing stored. `delete_thread` deletes the digests with the thread, and
`prune` those of the checkpoints it deleted; code that deletes LangGraph's keys any
other way (a TTL, a window) must delete ours too (`RedisDigests.forget`, or the whole
thread), or the thread is refused as damaged.

Use `redis_saver(client)` (or `CheckedRedisSaver(redis_client=client)` then `setup()`);
the server needs the RedisJSON and RediSearch modules (`tests/redis_server.py`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.redis import RedisSaver

from graph.store.redis.digests import LEGACY_WRITTEN, METADATA, RedisDigests, stored_digest
from graph.store.redis.serde import StrictRedisSerializer
from graph.store.saver import CheckedSaver
from graph.store.serde import CheckpointIntegrityError


def rest_digest(serde: StrictRedisSerializer, checkpoint: Any, metadata: Any,
                parent_id: str | None) -> str:
    """The digest of what `graph.store.digest.checkpoint_digest` leaves out.

    Covers the metadata, the checkpoint's format version `v`, its timestamp `ts`, its
    `updated_channels` and its parent's id, as handed to `put` or loaded back.
    """
    rest = {"metadata": dict(metadata), "v": checkpoint.get("v"), "ts": checkpoint.get("ts"),
            "updated_channels": checkpoint.get("updated_channels"), "parent": parent_id or None}
    return hashlib.sha256(serde.checksummed(rest)[1]).hexdigest()


class CheckedRedisSaver(CheckedSaver, RedisSaver):
    """`RedisSaver` with digests, shape checks and strict loading (see module doc).

    Construct it as `RedisSaver` (`redis_url=` or `redis_client=`); the strict
    serializer and the digests are set up here. Call `setup()` once per database
    (creates LangGraph's search indexes; `redis_saver` does).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.serde = StrictRedisSerializer()
        self._order = threading.Lock()
        self.digests = RedisDigests(  # type: ignore[assignment]
            self._redis, self._make_redis_checkpoint_key_cached,
            self._make_redis_checkpoint_writes_key_cached)
        self._documents_since: str | None = None

    @property
    def strict(self) -> StrictRedisSerializer:
        """The serializer (always the strict one set at construction)."""
        serde = self.serde
        if not isinstance(serde, StrictRedisSerializer):
            raise TypeError("CheckedRedisSaver.serde was replaced; it must stay strict")
        return serde

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Records the digest of the rest (`rest_digest`), then saves like `CheckedSaver.put`.

        LangGraph's loop saves a run's input checkpoint in the background while its first
        task runs, so that task's `put_writes` may finish before this `put`; `RedisSaver.put`
        then overwrites the document's `has_writes` with false and every later load skips
        those writes (LangGraph would run the task again; our check refuses the checkpoint
        as damaged). `put` and `put_writes` therefore hold one lock, and a checkpoint whose
        writes were already saved gets `has_writes` set back to true before `put` returns.
        """
        self._fenced(config)  # before the digest is recorded
        conf = config["configurable"]
        key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), checkpoint["id"],
               METADATA, 0)
        parent = conf.get("checkpoint_id")  # as RedisSaver.put reads the parent
        assert self.digests is not None
        self.digests.record(key, rest_digest(self.strict, checkpoint, metadata,
                                             parent if parent != checkpoint["id"] else None))
        with self._order:
            saved = super().put(config, checkpoint, metadata, new_versions)
            self._redis_digests.saved(key[0], key[1], key[2])
            if self._redis_digests.written_counts(key[0], key[1], key[2]):
                self._redis.json().merge(self._make_redis_checkpoint_key_cached(*key[:3]),
                                         "$", {"has_writes": True})
        return saved

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Saves like `CheckedSaver.put_writes`, then marks the writes saved.

        Runs under the lock `put` takes (see `put`), so a checkpoint saved after its
        writes is marked as having them.
        """
        conf = config["configurable"]
        with self._order:
            super().put_writes(config, writes, task_id, task_path)
            self._redis_digests.written(
                str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")),
                str(conf["checkpoint_id"]), task_id,
                [WRITES_IDX_MAP.get(channel, idx) for idx, (channel, _) in enumerate(writes)])

    @property
    def _redis_digests(self) -> RedisDigests:
        digests = self.digests
        assert isinstance(digests, RedisDigests)
        return digests

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`CheckedSaver.get_tuple`, also refusing a latest checkpoint older than the newest saved.

        The saved set is read before LangGraph reads, so a checkpoint another process
        saves meanwhile is not mistaken for a missing one; a missing one still saved
        after the read (not deleted with its digests since) is refused, and so is a
        latest checkpoint with a parent beside an empty saved set (the set was deleted).

        Raises:
            CheckpointIntegrityError: The checkpoint is refused (`damaged`); also a key of
                the wrong Redis type.
        """
        conf = config["configurable"]
        slot = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        latest = not conf.get("checkpoint_id")
        try:
            before = self._redis_digests.saved_ids(*slot) if latest else set()
            self._redis_digests.check_sets(slot[0])
        except redis.ResponseError as exc:
            raise _refused(config, exc) from None
        except ValueError as exc:
            raise CheckpointIntegrityError(f"thread {slot[0]!r}: {exc}") from None
        saved = self._read_whole(config)
        loaded = saved.config["configurable"]["checkpoint_id"] if saved else ""
        newer = {i for i in before if i > loaded}
        after = self._redis_digests.saved_ids(*slot) if newer or saved else set()
        if newer and (newer & after):
            raise CheckpointIntegrityError(
                f"thread {slot[0]!r}: its newest checkpoint {max(newer)} is missing or hidden "
                f"from LangGraph's index (found {loaded or 'none'}); an older one is never "
                "resumed instead")
        if latest and saved is not None and saved.parent_config and not after:
            raise CheckpointIntegrityError(
                f"thread {slot[0]!r}: checkpoint {loaded} has a parent but the thread's set "
                "of saved checkpoints is empty: deleted or damaged")
        return saved

    def _read_whole(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`CheckedSaver.get_tuple`, read again when a write was saved while it was read.

        Redis has no read snapshot: a write another process finishes between LangGraph's
        load and the count of saved writes looks missing. A checkpoint whose writes still
        fall short on every one of `_REREADS` reads is refused.
        """
        for _ in range(_REREADS):
            try:
                return super().get_tuple(config)
            except redis.ResponseError as exc:
                raise _refused(config, exc) from None
            except _WritesRaced as exc:
                short = exc
        raise CheckpointIntegrityError(str(short))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        """`CheckedSaver.list`; a key of the wrong Redis type is refused too.

        Listing a whole thread (a namespace, no filter, `before` or `limit`) also
        refuses when a checkpoint saved before the listing began, and still saved after
        it, is missing from what LangGraph found.
        """
        conf = (config or {}).get("configurable", {})
        whole = (filter is None and before is None and limit is None and "thread_id" in conf
                 and conf.get("checkpoint_ns") is not None and not conf.get("checkpoint_id"))
        slot = str(conf.get("thread_id")), str(conf.get("checkpoint_ns"))
        try:
            expected = self._redis_digests.saved_ids(*slot) if whole else set()
            if whole:
                self._redis_digests.check_sets(slot[0])
            for item in super().list(config, filter=filter, before=before, limit=limit):
                expected.discard(item.config["configurable"]["checkpoint_id"])
                yield item
        except redis.ResponseError as exc:
            raise _refused(config, exc) from None
        except (_WritesRaced, ValueError) as exc:
            raise CheckpointIntegrityError(str(exc)) from None
        missing = expected & self._redis_digests.saved_ids(*slot) if expected else set()
        if missing:
            raise CheckpointIntegrityError(
                f"thread {slot[0]!r}: saved checkpoint(s) {sorted(missing)} are missing or "
                "hidden from LangGraph's index")

    def prune(self, thread_ids: Sequence[str], **kwargs: Any) -> None:
        """`RedisSaver.prune`, then forgets the digests of the checkpoints it deleted.

        Raises:
            ValueError: As `RedisSaver.prune` (no thread ids, a negative `keep_last`).
        """
        super().prune(thread_ids, **kwargs)
        digests = self._redis_digests
        for thread_id in thread_ids:
            for ns, ids in digests.saved_by_ns(thread_id).items():
                gone = [i for i in ids if not digests.checkpoint_exists(thread_id, ns, i)]
                digests.forget(thread_id, ns, gone)

    def _check_digests(self, thread_id: str, ns: str, checkpoint_id: str,
                       saved: CheckpointTuple) -> None:
        super()._check_digests(thread_id, ns, checkpoint_id, saved)
        assert self.digests is not None
        self._redis_digests.check_indexed(thread_id, ns, checkpoint_id, saved.metadata or {})
        digested = self.digests.of_checkpoint(thread_id, ns, checkpoint_id)
        recorded = digested.get(METADATA)
        parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        if rest_digest(self.strict, saved.checkpoint, saved.metadata, parent) not in (
                recorded or ()):
            raise ValueError("its metadata, timestamp or parent does not match its digest: "
                             "edited or deleted")
        loaded: dict[str, int] = {}
        for task_id, _, _ in saved.pending_writes or ():
            loaded[task_id] = loaded.get(task_id, 0) + 1
        for task_id, count in self._redis_digests.written_counts(
                thread_id, ns, checkpoint_id).items():
            if loaded.get(task_id, 0) < count:
                raise _WritesRaced(f"checkpoint {checkpoint_id}: a pending write of task "
                                   f"{task_id} is missing: deleted, or hidden from "
                                   "LangGraph's index")
        self._check_stored(thread_id, ns, checkpoint_id, saved, set(digested))

    def _check_stored(self, thread_id: str, ns: str, checkpoint_id: str,
                      saved: CheckpointTuple, digested: set[str]) -> None:
        """Checks every field of the stored documents that LangGraph's load drops or ignores.

        The checkpoint document: exactly upstream's fields (`_DOCUMENT`, `_INNER`), no
        pending sends, type `json`, `has_writes` a boolean that agrees with the write
        marks, and its whole-document digest (`RedisDigests.saved`; required for a
        checkpoint marked saved since `DOCUMENTS_SINCE`). Upstream's registry of write
        keys (`write_keys_zset`): each member is the key of one of this checkpoint's
        writes whose task has a digest, scored by its place in its `put_writes` batch
        (a whole number below the member count), and each marked write is in it. Each
        write document: exactly upstream's fields, naming this checkpoint, its task and
        index as its key does, and matching its mark's digest.

        Raises:
            ValueError: A field differs (the checkpoint is refused as damaged).
            _WritesRaced: What a write saved meanwhile can explain; read again.
        """
        digests = self._redis_digests
        if self._documents_since is None:
            self._documents_since = digests.documents_since(create=False)
        registry_key = self._key_registry.make_write_keys_zset_key(  # type: ignore[union-attr]
            thread_id, ns, checkpoint_id)
        stored = digests.stored(thread_id, ns, checkpoint_id, registry_key)
        doc = stored.document
        if doc is None:
            raise _WritesRaced(f"checkpoint {checkpoint_id}: its document vanished while read")
        if not isinstance(doc, dict) or set(doc) != _DOCUMENT:
            raise ValueError("its document does not have exactly the fields LangGraph writes")
        inner = doc["checkpoint"]
        if not isinstance(inner, dict) or set(inner) != _INNER:
            raise ValueError("its checkpoint object does not have exactly the fields "
                             "LangGraph writes")
        if inner["pending_sends"] != [] or inner["type"] != "json":
            raise ValueError("its pending_sends or type were never written by this program")
        if doc["metadata"] != self._dump_metadata(saved.metadata):
            raise ValueError("its stored metadata text is not what its metadata reads as")
        if stored.document_digest is not None:
            if stored_digest(doc) != stored.document_digest:
                raise ValueError("its document does not match its digest (checkpoint_ts, "
                                 "run_id or another field was edited)")
        elif stored.saved and checkpoint_id >= self._documents_since:
            raise ValueError("it is marked saved but its document digest is missing")
        if stored.document_digest is not None and not stored.saved:  # one MULTI adds both
            raise ValueError("it has its document digest but is missing from the thread's "
                             "set of saved checkpoints")
        self._check_writes(thread_id, ns, checkpoint_id, stored, digested, registry_key)
        has_writes = doc["has_writes"]
        if not isinstance(has_writes, bool):
            raise ValueError("its has_writes is not a boolean")
        if (stored.written or stored.registry) and not has_writes:
            raise _WritesRaced(f"checkpoint {checkpoint_id}: it has saved writes but "
                               "has_writes is false")
        if has_writes and not (stored.written or stored.registry or digested - {"", METADATA}):
            raise ValueError("its has_writes is true but no write of it was ever recorded")

    def _check_writes(self, thread_id: str, ns: str, checkpoint_id: str, stored: Any,
                      digested: set[str], registry_key: Any) -> None:
        """The write-key registry and each write document (see `_check_stored`)."""
        slots: dict[str, tuple[str, int]] = {}
        for slot in stored.written:
            task_id, _, idx = slot.rpartition("\0")
            if not idx.lstrip("-").isdigit():
                raise ValueError(f"its digest hash marks a write {slot!r} never written here")
            key = _text(self._make_redis_checkpoint_writes_key_cached(
                thread_id, ns, checkpoint_id, task_id, int(idx)))
            slots[key] = (task_id, int(idx))
        listed = dict(stored.registry)
        for key, (task_id, idx) in slots.items():
            if key not in listed:
                raise ValueError(f"saved write {task_id}/{idx} is missing from "
                                 f"{_text(registry_key)!r}")
        docs = self._redis_digests.write_documents(list(listed))
        for (key, score), doc in zip(listed.items(), docs, strict=True):
            task_id, idx = slots.get(key) or _write_slot(key)
            expected = _text(self._make_redis_checkpoint_writes_key_cached(
                thread_id, ns, checkpoint_id, task_id, idx))
            if (key != expected or task_id not in digested or score != int(score)
                    or not 0 <= score < len(listed)):  # its place in its put_writes batch
                raise ValueError(f"{_text(registry_key)!r} has a member {key!r:.120} that is "
                                 "not a recorded write of this checkpoint")
            if not isinstance(doc, dict) or set(doc) != _WRITE:
                raise ValueError(f"write {key!r:.120} is missing or does not have exactly "
                                 "the fields LangGraph writes")
            names = (doc["thread_id"], doc["checkpoint_ns"], doc["checkpoint_id"],
                     doc["task_id"], doc["idx"])
            head = expected.split(":", 1)[1].rsplit(":", 2)[0]
            if (names[3:] != (task_id, idx) or type(names[4]) is not int
                    or ":".join(map(str, names[:3])) != head):
                raise ValueError(f"write {key!r:.120} names another checkpoint, task or index")
            mark = stored.written.get(f"{task_id}\0{idx}")
            if mark is not None and mark != LEGACY_WRITTEN and mark != stored_digest(doc):
                raise ValueError(f"write {key!r:.120} does not match its digest (task_path, "
                                 "type or another field was edited)")

    def _load_checkpoint(self, checkpoint: Any, channel_values: dict[str, Any],
                         pending_sends: Sequence[Any]) -> Checkpoint:
        """`RedisSaver`'s, without the keys it adds (`type`; `pending_sends`, never written)."""
        if pending_sends:
            raise ValueError("it has pending sends, never written by this program")
        if not isinstance(channel_values, dict):
            raise ValueError("its channel_values are not an object")
        revived = self.strict.revive(channel_values)
        loaded = dict(super()._load_checkpoint(checkpoint, revived, []))
        if loaded.pop("type", None) not in ("json", None) or loaded.pop("pending_sends", []):
            raise ValueError("its document has a serializer type never written here")
        return loaded  # type: ignore[return-value]

    def _deserialize_channel_values(self, channel_values: dict[str, Any]) -> dict[str, Any]:
        """Strict: refuses what `StrictRedisSerializer.revive` refuses, never returns raw data."""
        if not isinstance(channel_values, dict):
            raise ValueError("its channel_values are not an object")
        revived = self.strict.revive(channel_values)
        return dict(revived)

    def _recursive_deserialize(self, obj: Any) -> Any:
        return self.strict.revive(obj)


_DOCUMENT = frozenset({"thread_id", "run_id", "checkpoint_ns", "checkpoint_id",
                       "parent_checkpoint_id", "checkpoint_ts", "checkpoint", "metadata",
                       "has_writes", "source", "step"})
"""The fields of upstream's checkpoint document (`RedisSaver.put`)."""
_INNER = frozenset({"type", "v", "ts", "id", "channel_values", "channel_versions",
                    "versions_seen", "updated_channels", "pending_sends"})
"""The fields of the checkpoint object inside it (`_dump_checkpoint`)."""
_WRITE = frozenset({"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path",
                    "idx", "channel", "type", "blob"})
"""The fields of upstream's write document (`RedisSaver.put_writes`)."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _write_slot(key: str) -> tuple[str, int]:
    """`(task_id, idx)` as the end of a write key names them; ("", -1) when it does not."""
    head, _, idx = key.rpartition(":")
    task_id = head.rpartition(":")[2]
    return (task_id, int(idx)) if idx.lstrip("-").isdigit() else ("", -1)


class _WritesRaced(Exception):
    """Fewer pending writes were loaded than were saved: damage, or a write saved meanwhile."""


_REREADS = 3
"""How often `get_tuple` reads a checkpoint whose saved writes were not all loaded."""


def _refused(config: RunnableConfig | None, exc: Exception) -> CheckpointIntegrityError:
    thread_id = (config or {}).get("configurable", {}).get("thread_id")
    return CheckpointIntegrityError(f"a checkpoint key of thread {thread_id!r} cannot be read "
                                    f"({exc})")


def redis_saver(client: redis.Redis) -> CheckedRedisSaver:
    """A checked saver on `client` (a `redis.Redis`), its search indexes created.

    Raises:
        redis.RedisError: The server cannot be reached or lacks RedisJSON / RediSearch.
    """
    saver = CheckedRedisSaver(redis_client=client)
    saver.setup()
    return saver
