"""LangGraph's Redis checkpointer with this project's checks: `CheckedRedisSaver`.

`RedisSaver` (langgraph-checkpoint-redis) stores each checkpoint as one RedisJSON
document, channel values inline, and each pending write as another; it takes no
serializer, so `graph.store.serde`'s checksum inside serialized bytes cannot be used. Instead:

* `graph.store.saver.CheckedSaver` is mixed in, as on SQLite and PostgreSQL, for reading:
  every load (`get_tuple`, which `get_state` and LangGraph's Pregel loop call, and `list`,
  which `get_state_history` calls) checks the shape of what was loaded and recomputes the
  digests of `graph.store.digest` (a SHA-256 over the canonical form of the checkpoint
  id, channel versions, versions seen and channel values; of each pending write), kept in
  `graph.store.redis.digests`;
* what that digest leaves out (the metadata, the checkpoint's `v`, `ts` and
  `updated_channels`, the parent's id) gets a digest of its own (`rest_digest`);
* writing replaces upstream's pipelines: `put` and `put_writes` store exactly the
  documents upstream builds (`checkpoint_document`), with their digests and the marks
  that they were saved (so one deleted later, or hidden from LangGraph's search index,
  is refused instead of resuming from an older checkpoint or running a task again), in
  one Lua script per call that first checks the writer's lease token against the
  thread's lock (`graph.store.redis.lua.PUT`, `PUT_WRITES`): all or nothing, and nothing
  from a writer that lost its lease (INVARIANTS I8; `BusyError`, exit 5). `prune` (the
  window's trim) and `delete_thread` find keys by exact names, never by a search query,
  and delete them with their digests in one fenced script (`DROP`);
* the checkpoint's `DOCUMENT` field and each write's mark hold the digest of the whole
  document as stored (`graph.store.redis.digests.stored_digest`, computed from the JSON
  text the script stores and handed to it with that text), so the fields no load
  reads (`checkpoint_ts`, `run_id`, a write's `task_path`, `idx` and `type`) are
  covered too, and every load checks each document's exact field set,
  upstream's registry of write keys and the thread's saved and digest sets
  (`_check_stored`): any one field edited is refused;
* the serializer is `graph.store.redis.serde.StrictRedisSerializer`: nothing but LangGraph's
  interrupt record is revived from stored JSON, and values are never "recovered"
  as raw data when they fail to load.

A refusal raises `CheckpointIntegrityError` (`damaged`, exit 4) naming the checkpoint
and changes nothing stored. Code that deletes LangGraph's keys any other way (a TTL)
must delete ours too (the whole thread), or the thread is refused as damaged.

Use `redis_saver(client)` (or `CheckedRedisSaver(redis_client=client)` then `setup()`);
the server needs the RedisJSON and RediSearch modules (`tests/redis_server.py`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.redis.key_registry import SyncCheckpointKeyRegistry
from langgraph.checkpoint.redis.util import to_storage_safe_id, to_storage_safe_str
from ulid import ULID

from graph.store.digest import checkpoint_digest, write_digest
from graph.store.redis import keys
from graph.store.redis import lua as redis_lua
from graph.store.redis.digests import (
    DOCUMENT,
    LEGACY_WRITTEN,
    METADATA,
    WRITTEN,
    RedisDigests,
    stored_digest,
    stored_json,
)
from graph.store.redis.exact import ExactRedisSaver
from graph.store.redis.serde import StrictRedisSerializer
from graph.store.redis.ttl import keep_alive, thread_keys
from graph.store.saver import CheckedSaver
from graph.store.serde import CheckpointIntegrityError

__all__ = ["CheckedRedisSaver", "redis_saver", "rest_digest"]


def rest_digest(serde: StrictRedisSerializer, checkpoint: Any, metadata: Any,
                parent_id: str | None) -> str:
    """The digest of what `graph.store.digest.checkpoint_digest` leaves out.

    Covers the metadata, the checkpoint's format version `v`, its timestamp `ts`, its
    `updated_channels` and its parent's id, as handed to `put` or loaded back.
    """
    rest = {"metadata": dict(metadata), "v": checkpoint.get("v"), "ts": checkpoint.get("ts"),
            "updated_channels": checkpoint.get("updated_channels"), "parent": parent_id or None}
    return hashlib.sha256(serde.checksummed(rest)[1]).hexdigest()


class CheckedRedisSaver(CheckedSaver, ExactRedisSaver):
    """`RedisSaver` with digests, shape checks and strict loading (see module doc).

    Its `list`, `delete_thread` and `prune` find a thread's keys exactly
    (`graph.store.redis.exact.ExactRedisSaver`), never by a search query.

    Construct it as `RedisSaver` (`redis_url=` or `redis_client=`); the strict
    serializer and the digests are set up here. Call `setup()` once per database
    (creates LangGraph's search indexes; `redis_saver` does).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.ttl_config:
            raise ValueError("CheckedRedisSaver takes no ttl: retention is graph.store.redis.ttl's")
        self.serde = StrictRedisSerializer()
        self._scripts: dict[str, Any] = {}
        self.digests = RedisDigests(  # type: ignore[assignment]
            self._redis, self._make_redis_checkpoint_key_cached)
        self._documents_since: str | None = None

    def setup_found(self, indexes: set[str]) -> bool:
        """Upstream's `setup()` for a database whose search indexes were already listed.

        `RedisSaver.setup` (0.5.2) detects cluster mode, creates each of its two indexes
        unless it exists, and makes its key registry. Asking whether an index exists is an
        `FT.INFO`, a reply of about a thousand fields per index: most of the CPU of
        opening a store. `graph.store.redis.open` lists the indexes once (`FT._LIST`);
        when both are in `indexes` this does the rest of upstream's setup itself and asks
        the server nothing. `tests/store/redis/test_saver.py` checks that the saver ends as
        upstream's `setup()` leaves it, so a change upstream fails there.

        Args:
            indexes: The names of the indexes on the server.

        Returns:
            True when both indexes were there (set up here); False when `setup()` is
            still needed (it creates what is missing).
        """
        if not {self.checkpoints_index.name, self.checkpoint_writes_index.name} <= indexes:
            return False
        self._detect_cluster_mode()
        if self._redis is not None and not self._key_registry:
            self._key_registry = SyncCheckpointKeyRegistry(self._redis)
        return True

    @property
    def strict(self) -> StrictRedisSerializer:
        """The serializer (always the strict one set at construction)."""
        serde = self.serde
        if not isinstance(serde, StrictRedisSerializer):
            raise TypeError("CheckedRedisSaver.serde was replaced; it must stay strict")
        return serde

    def _token(self, thread_id: str) -> str:
        """The lease token a write of the thread carries (the fencing hook, `fence_with`).

        '' for a saver used on its own: its scripts then write only while nobody holds
        the thread.

        Raises:
            BusyError: Another process holds the thread, this one not (exit 5).
        """
        return (self.fence(thread_id) if self.fence is not None else "") or ""

    def _script(self, name: str, thread_id: str, keys: list[Any], args: list[Any]) -> list[Any]:
        """Runs fenced script `name` of `graph.store.redis.lua` with the thread's token first.

        Raises:
            BusyError: The thread's lease is another's, or this process lost it (exit 5);
                nothing was written.
            RefusedError: `damaged` (exit 4): a key of the wrong type; nothing written.
        """
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._redis.register_script(getattr(redis_lua, name))
        reply = script(keys=keys, args=[self._token(thread_id), *args])
        return redis_lua.answer(reply, thread_id, None)

    def checkpoint_document(self, config: RunnableConfig, checkpoint: Checkpoint,
                            metadata: CheckpointMetadata) -> tuple[dict[str, Any], RunnableConfig]:
        """The document `RedisSaver.put` (0.5.2) stores for a checkpoint, and the config it returns.

        Built as upstream builds it, with its own helpers (`_dump_checkpoint`,
        `_dump_metadata`, `to_storage_safe_id`), so its `get_tuple`, `list` and search
        index read it unchanged; `tests/store/redis/test_fenced_writes.py` compares it with
        a document upstream's `put` writes. Only `checkpoint_ts` differs: whole
        milliseconds of the wall clock, where upstream keeps its fraction.
        """
        configurable = dict(config["configurable"])
        run_id = configurable.pop("run_id", metadata.get("run_id"))
        thread_id = configurable.pop("thread_id")
        checkpoint_ns = configurable.pop("checkpoint_ns", "")
        config_checkpoint_id = configurable.pop("checkpoint_id", None)
        thread_ts = configurable.pop("thread_ts", "")
        checkpoint_id = config_checkpoint_id or thread_ts or checkpoint.get("id", "")
        parent_checkpoint_id = None
        if (checkpoint.get("id") and config_checkpoint_id
                and checkpoint.get("id") != config_checkpoint_id):
            parent_checkpoint_id, checkpoint_id = config_checkpoint_id, checkpoint["id"]
        try:
            checkpoint_ts: float = ULID.from_str(checkpoint_id).timestamp
        except Exception:  # noqa: BLE001 - as upstream: any id that is not a ULID
            # Upstream's wall clock in ms (`time.time() * 1000`), cut to whole ms: a float
            # of 17 digits comes back from RedisJSON one unit off now and then (its parser
            # is not exact), and the whole-document digest is taken of the text sent.
            checkpoint_ts = float(time.time_ns() // 1_000_000)
        document: dict[str, Any] = {
            "thread_id": to_storage_safe_id(thread_id),
            "run_id": to_storage_safe_id(run_id) if run_id else "",
            "checkpoint_ns": to_storage_safe_str(checkpoint_ns),
            "checkpoint_id": to_storage_safe_id(checkpoint_id),
            "parent_checkpoint_id": (to_storage_safe_id(parent_checkpoint_id)
                                     if parent_checkpoint_id else ""),
            "checkpoint_ts": checkpoint_ts,
            "checkpoint": self._dump_checkpoint(checkpoint.copy()),
            "metadata": self._dump_metadata(metadata),
            "has_writes": False,
        }
        if all(key in metadata for key in ("source", "step")):
            document["source"], document["step"] = metadata["source"], metadata["step"]
        return document, {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                                           "checkpoint_id": checkpoint_id}}

    def _put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
             new_versions: ChannelVersions) -> RunnableConfig:
        """Saves a checkpoint as `RedisSaver.put` does, with its digests, in one fenced script.

        The document (`checkpoint_document`), the thread's latest pointer, the
        checkpoint's digests (`graph.store.digest.checkpoint_digest`, `rest_digest`, and
        the whole document's `stored_digest` in field `DOCUMENT`, bar `has_writes`) and
        its saved mark are written by one script (`graph.store.redis.lua.PUT`) that first
        checks this writer's lease token against the thread's lock: all or nothing, and
        nothing once the lease is lost. LangGraph may save a checkpoint's writes before the
        checkpoint itself (a run's input checkpoint is saved in the background while the
        first task runs); the script then sets `has_writes`, which upstream's `put` resets.

        A thread that carries a TTL loses it first (`graph.store.redis.ttl.keep_alive`): a
        new checkpoint on a finished thread (a fork, `update_state`) can continue, and
        one whose keys may have partly expired is refused as `pruned`, nothing written.

        Raises:
            BusyError: The thread's lease is another's, or this process lost it (exit 5).
            RefusedError: `pruned` (exit 4): the thread's TTL ran out; nothing written.
        """
        document, saved = self.checkpoint_document(config, checkpoint, metadata)
        conf = saved["configurable"]
        thread_id, ns, checkpoint_id = (str(conf["thread_id"]), str(conf["checkpoint_ns"]),
                                        str(conf["checkpoint_id"]))
        parent = config["configurable"].get("checkpoint_id")  # as RedisSaver.put reads the parent
        key = self._make_redis_checkpoint_key_cached(thread_id, ns, checkpoint_id)
        digests = ["", checkpoint_digest(self.serde, checkpoint), METADATA,
                   rest_digest(self.strict, checkpoint, metadata,
                               parent if parent != checkpoint["id"] else None)]
        keep_alive(cast("redis.Redis", self._redis), thread_id,  # a fork can continue
                   self._token(thread_id))
        text, whole = stored_json(document)
        self._script("PUT", thread_id, [
            keys.lock_key(thread_id), key, self._make_redis_checkpoint_latest_key(thread_id, ns),
            keys.digest_key(thread_id, ns, checkpoint_id), keys.digests_key(thread_id),
            keys.saved_key(thread_id)],
            [text, key, f"{ns}\0{checkpoint_id}", WRITTEN, DOCUMENT, whole, *digests])
        return saved

    def _put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                    task_id: str, task_path: str = "") -> None:
        """Saves writes as `RedisSaver.put_writes` does, with digests, in one fenced script.

        The write documents, the checkpoint's `has_writes`, upstream's write-key registry,
        each write's digest (`graph.store.digest.write_digest`) and its written mark (the
        whole write document's `stored_digest`) are written by one script
        (`graph.store.redis.lua.PUT_WRITES`) that first checks this writer's lease token
        against the thread's lock.

        Raises:
            BusyError: The thread's lease is another's, or this process lost it (exit 5).
        """
        conf = config["configurable"]
        thread_id, ns, checkpoint_id = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")),
                                        str(conf["checkpoint_id"]))
        write_keys: list[str] = []
        args: list[Any] = []
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            type_, blob = self.serde.dumps_typed(value)
            write_keys.append(self._make_redis_checkpoint_writes_key_cached(
                thread_id, ns, checkpoint_id, task_id, idx))
            text, whole = stored_json({
                "thread_id": to_storage_safe_id(thread_id), "checkpoint_ns": to_storage_safe_str(ns),
                "checkpoint_id": to_storage_safe_id(checkpoint_id), "task_id": task_id,
                "task_path": task_path, "idx": idx, "channel": channel, "type": type_,
                "blob": self._encode_blob(blob)})
            args += [text, f"{task_id}\0{idx}", write_digest(self.serde, task_id, channel, value),
                     f"{WRITTEN}{task_id}\0{idx}", whole]
        self._script("PUT_WRITES", thread_id, [
            keys.lock_key(thread_id), self._make_redis_checkpoint_key_cached(thread_id, ns,
                                                                             checkpoint_id),
            SyncCheckpointKeyRegistry.make_write_keys_zset_key(thread_id, ns, checkpoint_id),
            keys.digest_key(thread_id, ns, checkpoint_id), keys.digests_key(thread_id),
            *write_keys], args)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every checkpoint key of the thread with its digests, in one fenced script.

        The keys are found by exact prefixes (`graph.store.redis.ttl.thread_keys`), never by
        a search query; the thread's attempt log and decisions are not checkpoints and stay.

        Raises:
            BusyError: The thread's lease is another's, or this process lost it (exit 5).
        """
        ours = {keys.log_key(thread_id), keys.approvals_key(thread_id)}
        found = [key for key in thread_keys(cast("redis.Redis", self._redis), thread_id)
                 if key not in ours]
        self._drop(thread_id, found, [])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest",
              keep_last: int | None = None, max_results: int = 10000) -> None:
        """`RedisSaver.prune` from exact keys, fenced: each thread's trim is one script.

        Keeps the latest `keep_last` (else 1, or 0 for `strategy="delete"`) saved
        checkpoints per namespace (the saved set, `graph.store.redis.keys.saved_key`);
        deletes the others with their writes, write registries, digests and saved marks,
        and the latest pointer of a namespace left empty. `max_results` is accepted for
        upstream's signature; no search query limits what is found.

        Raises:
            ValueError: As `RedisSaver.prune` (no thread ids, a negative `keep_last`).
            BusyError: A thread's lease is another's, or this process lost it (exit 5).
        """
        keep = keep_last if keep_last is not None else 0 if strategy == "delete" else 1
        if not thread_ids:
            raise ValueError("``thread_ids`` must be a non-empty sequence")
        if keep < 0:
            raise ValueError(f"``keep_last`` must be >= 0, got {keep}")
        for thread_id in thread_ids:
            found: list[Any] = []
            members: list[str] = []
            for ns, ids in self._redis_digests.saved_by_ns(thread_id).items():
                evicted = sorted(ids, reverse=True)[keep:]
                for checkpoint_id in evicted:
                    found += self._checkpoint_keys(thread_id, ns, checkpoint_id)
                    members.append(f"{ns}\0{checkpoint_id}")
                if evicted and len(evicted) == len(ids):
                    found.append(self._make_redis_checkpoint_latest_key(thread_id, ns))
            if found:
                self._drop(thread_id, found, members)

    def _checkpoint_keys(self, thread_id: str, ns: str, checkpoint_id: str) -> list[Any]:
        """Every key of one checkpoint: its document, writes, write registry and digest hash."""
        registry = SyncCheckpointKeyRegistry.make_write_keys_zset_key(thread_id, ns, checkpoint_id)
        digest = keys.digest_key(thread_id, ns, checkpoint_id)
        writes = {_text(key) for key in self._redis.zrange(registry, 0, -1)}
        for field in map(_text, self._redis.hkeys(digest)):
            if field.startswith(WRITTEN):
                task_id, _, idx = field[len(WRITTEN):].rpartition("\0")
                writes.add(self._make_redis_checkpoint_writes_key_cached(
                    thread_id, ns, checkpoint_id, task_id, int(idx)))
        return [self._make_redis_checkpoint_key_cached(thread_id, ns, checkpoint_id),
                *sorted(writes), registry, digest]

    def _drop(self, thread_id: str, found: list[Any], members: list[str]) -> None:
        """Deletes `found` keys and saved-set `members` of the thread in one fenced script."""
        self._script("DROP", thread_id, [keys.lock_key(thread_id), keys.digests_key(thread_id),
                                         keys.saved_key(thread_id), *found], members)

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
        marks, and its whole-document digest (written by `put`'s script; required for a
        checkpoint marked saved since `DOCUMENTS_SINCE`). Upstream's registry of write
        keys (`write_keys_zset`): each member is the key of one of this checkpoint's
        writes whose task has a digest, scored by its place in its `put_writes` batch
        (a whole number below the member count), and each marked write is in it. Each
        write document: exactly upstream's fields, naming this checkpoint, its task and
        index as its key does, and matching its mark's digest. On a checkpoint older
        than `DOCUMENTS_SINCE` a write may lack its mark (a kill between upstream's
        pipeline and the mark) or have a mark `1` (from before write digests); since,
        `PUT_WRITES` stores each write with its digest mark in one step.

        Raises:
            ValueError: A field differs (the checkpoint is refused as damaged).
            _WritesRaced: What a write saved meanwhile can explain; read again.
        """
        digests = self._redis_digests
        if self._documents_since is None:
            self._documents_since = digests.documents_since(create=False)
        registry_key = SyncCheckpointKeyRegistry.make_write_keys_zset_key(
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
        if checkpoint_id >= (self._documents_since or "~"):  # PUT_WRITES adds both together
            marked = {slot.rpartition("\0")[0] for slot in stored.written}
            ghosts = sorted(digested - {"", METADATA} - marked)
            if ghosts:
                raise ValueError(f"its digest hash has digests of task {ghosts[0]!r:.80}, "
                                 "which has no saved write: added")
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
            if task_id not in digested and key == expected and f"{task_id}\0{idx}" in stored.written:
                # its digest was read before this write was saved (one script stores the
                # write, its registry member, its digest and its mark): read again; still
                # so on every read (`_REREADS`), it is refused as damaged
                raise _WritesRaced(f"checkpoint {checkpoint_id}: write {task_id}/{idx} is "
                                   "marked saved but its task has no digest")
            if (key != expected or task_id not in digested or score != int(score)
                    or not 0 <= score < len(listed)  # its place in its put_writes batch,
                    or (idx >= 0 and score != idx)):  # which a channel's idx is (upstream)
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
            since = checkpoint_id >= (self._documents_since or "~")
            if mark is None and since:  # PUT_WRITES stores a write and its mark together
                raise ValueError(f"write {key!r:.120} is stored but not marked saved: its "
                                 "mark was deleted")
            if mark == LEGACY_WRITTEN and since:
                raise ValueError(f"write {key!r:.120} is marked saved without its digest, "
                                 "which every write since digests were kept has: edited")
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


def _write_slot(key: str) -> tuple[str, int]:
    """`(task_id, idx)` as the end of a write key names them; ("", -1) when it does not."""
    head, _, idx = key.rpartition(":")
    task_id = head.rpartition(":")[2]
    return (task_id, int(idx)) if idx.lstrip("-").isdigit() else ("", -1)


class _WritesRaced(Exception):
    """Fewer pending writes were loaded than were saved: damage, or a write saved meanwhile."""


_REREADS = 3
"""How often `get_tuple` reads a checkpoint whose saved writes were not all loaded."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


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
