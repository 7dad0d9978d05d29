"""`RedisSaver` that finds a thread's checkpoints by their exact keys, never by a search query.

langgraph-checkpoint-redis 0.5.2 finds a thread's checkpoints and writes with RediSearch
queries (`@thread_id:{...}`) in `list`, `delete_thread` and `prune`. Every legal thread
id (`[A-Za-z0-9._:-]{1,128}`, `graph.settings.THREAD_ID_RE`) must work on every backend,
and those queries fail them in three ways:

* the id `_` is not escaped by redisvl's tag escaping and makes the query invalid
  ("Syntax error ... near thread_id"): `history`, `verify`, `replay export`, `copy` and
  a step's window trim failed with exit 6;
* TAG fields are case-insensitive, so the query for thread `A` also finds thread `a`'s
  checkpoints: a window trim of `A` could delete its newest checkpoints for being older
  than `a`'s, and its history was refused as damaged;
* a query returns at most 10,000 results (`num_results`), and `list` ignores `before=`
  unless the checkpoint ids are ULIDs (LangGraph's are UUIDv6), so
  `get_state_history(before=...)` returned every checkpoint.

`ExactRedisSaver` overrides those three methods.
A thread's keys are found by `SCAN` with
the id's glob characters escaped (`graph.store.redis.keys.glob_escape`), then kept only
when the key parses back to exactly that id (`thread_checkpoints`): a checkpoint key is
`checkpoint:<thread>:<namespace>:<checkpoint id>`, and neither the namespace (the root's
is the sentinel `__empty__`; this program has no subgraphs) nor a checkpoint id (a UUID)
holds a `:`; a key is listed only when its document's `thread_id` is that id, as
LangGraph's index finds only documents with that field (a document without it, as the
SIGKILL test in `tests/step/test_crash.py` once left, is not a checkpoint). The window
trim, after every step, reads the thread's saved set instead (`prune`).
`list` then filters and orders as the SQL savers do (namespace and
checkpoint id exact, `before` as `checkpoint_id < before`, metadata filter by equality,
newest first, no limit but the caller's) and loads each checkpoint by its key
(`RedisSaver.get_tuple` with a checkpoint id reads no index). The `tests/store/redis/
test_history_filters.py` tests fail once upstream changes what this works around.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.redis import RedisSaver
from langgraph.checkpoint.redis.key_registry import CheckpointKeyRegistry
from langgraph.checkpoint.redis.util import from_storage_safe_str

from graph.store.redis import keys
from graph.store.redis.keys import langgraph_keys

__all__ = ["ExactRedisSaver", "langgraph_keys", "saved_checkpoints", "thread_checkpoints"]

_CHECKPOINT = "checkpoint:"
_WRITE = "checkpoint_write:"


def thread_checkpoints(client: Any, thread_id: str) -> list[tuple[str, str]]:
    """`(namespace, checkpoint id)` of each of the thread's checkpoint keys, found now.

    The namespace is as LangGraph hands it to a saver (`""` for the root). A key whose
    thread part is another id (one that starts with this id and a `:`) is left out.
    """
    found = []
    for key in keys.scan_thread(client, _CHECKPOINT, thread_id):
        parts = key.decode("utf-8", "surrogateescape")[len(_CHECKPOINT):].rsplit(":", 2)
        if len(parts) == 3 and parts[0] == thread_id:
            found.append((from_storage_safe_str(parts[1]), parts[2]))
    return found


def saved_checkpoints(client: Any, thread_id: str) -> list[tuple[str, str]]:
    """`(namespace, checkpoint id)` of each member of the thread's saved set (one key).

    The set (`graph.store.redis.keys.saved_key`, members `namespace NUL checkpoint id`)
    holds each checkpoint whose `put` finished; reading it costs the thread's size, not
    the keyspace's as `thread_checkpoints`' `SCAN` does.
    """
    members = client.smembers(keys.saved_key(thread_id))
    found = []
    for member in members:
        text = member.decode("utf-8", "surrogateescape") if isinstance(member, bytes) else member
        ns, sep, checkpoint_id = text.rpartition("\0")
        if sep:
            found.append((ns, checkpoint_id))
    return found


def _write_keys(client: Any, thread_id: str, checkpoints: set[tuple[str, str]]) -> list[bytes]:
    """The keys of the pending writes of the thread's `checkpoints` (`(namespace, id)`s)."""
    found = []
    for key in keys.scan_thread(client, _WRITE, thread_id):
        parts = key.decode("utf-8", "surrogateescape")[len(_WRITE):].rsplit(":", 4)
        if (len(parts) == 5 and parts[0] == thread_id
                and (from_storage_safe_str(parts[1]), parts[2]) in checkpoints):
            found.append(key)
    return found


class ExactRedisSaver(RedisSaver):
    """`RedisSaver` whose `list`, `delete_thread` and `prune` read exact keys (module doc)."""

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        """The thread's checkpoints, newest first, as the SQL savers list them.

        Args:
            config: `configurable.thread_id` (required on Redis), `checkpoint_ns` (when
                not None, only that namespace), `checkpoint_id` (only that one).
            filter: Metadata keys and the values they must equal.
            before: Only checkpoints whose id sorts before its `checkpoint_id`.
            limit: At most this many.

        Raises:
            ValueError: No thread id: a Redis database is never listed whole.
        """
        conf = (config or {}).get("configurable", {})
        if "thread_id" not in conf:
            raise ValueError("listing checkpoints on Redis needs a thread id")
        thread_id = str(conf["thread_id"])
        ns, only = conf.get("checkpoint_ns"), conf.get("checkpoint_id")
        bound = (before or {}).get("configurable", {}).get("checkpoint_id")
        chosen = sorted(((cid, cns) for cns, cid in thread_checkpoints(self._redis, thread_id)
                         if (ns is None or cns == ns) and (not only or cid == only)
                         and (not bound or cid < bound)), reverse=True)
        with self._redis.pipeline(transaction=False) as pipe:
            for checkpoint_id, checkpoint_ns in chosen:
                pipe.json().get(self._make_redis_checkpoint_key_cached(
                    thread_id, checkpoint_ns, checkpoint_id), "$.thread_id")
            owners = pipe.execute()
        left = limit
        for (checkpoint_id, checkpoint_ns), owner in zip(chosen, owners, strict=True):
            if owner != [thread_id]:  # not a document of this thread (as the index skips it)
                continue
            if left is not None and left <= 0:
                return
            saved = RedisSaver.get_tuple(self, {"configurable": {
                "thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id}})
            if saved is None:  # deleted since the scan (a window trim)
                continue
            if filter and any(saved.metadata.get(k) != v for k, v in filter.items()):
                continue
            if left is not None:
                left -= 1
            yield saved

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every checkpoint, latest pointer, write and write registry of the thread.

        Writes whose checkpoint is gone already (a `put` killed after its writes) too.
        """
        doomed = langgraph_keys(self._redis, thread_id)
        with self._redis.pipeline(transaction=False) as pipe:
            for key in doomed:
                pipe.delete(key)
            pipe.execute()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest",
              keep_last: int | None = None, max_results: int = 0) -> None:
        """Deletes each thread's saved checkpoints but the newest `keep_last` per namespace.

        Runs after every step that fills the thread's window
        (`graph.store.redis.backend.RedisBackend.trim`), so it reads the thread's saved set
        (`saved_checkpoints`), never the keyspace: a checkpoint whose `put` was killed
        before it joined the set is neither counted nor deleted here (`delete_thread`
        finds it by `SCAN`).

        Args:
            thread_ids: The threads.
            strategy: `keep_latest` (keep 1) or `delete` (keep none), when `keep_last` is None.
            keep_last: How many of the newest to keep, per namespace.
            max_results: Ignored (upstream's page size; every checkpoint is found here).

        Raises:
            ValueError: No thread ids, or a negative `keep_last` (as upstream).
        """
        del max_results
        keep = keep_last if keep_last is not None else (0 if strategy == "delete" else 1)
        if not thread_ids:
            raise ValueError("``thread_ids`` must be a non-empty sequence")
        if keep < 0:
            raise ValueError(f"``keep_last`` must be >= 0, got {keep}")
        for thread_id in thread_ids:
            by_ns: dict[str, list[str]] = {}
            for ns, checkpoint_id in saved_checkpoints(self._redis, thread_id):
                by_ns.setdefault(ns, []).append(checkpoint_id)
            evicted = {(ns, cid) for ns, ids in by_ns.items()
                       for cid in sorted(ids, reverse=True)[keep:]}
            if evicted:
                self._delete(thread_id, evicted, whole=keep == 0)

    def _delete(self, thread_id: str, checkpoints: set[tuple[str, str]], *, whole: bool) -> None:
        """Deletes `checkpoints` of the thread with their writes and write registries.

        With `whole`, also the latest pointers of every namespace the thread has.
        """
        doomed: list[Any] = [*_write_keys(self._redis, thread_id, checkpoints)]
        for ns, checkpoint_id in sorted(checkpoints):
            doomed.append(self._make_redis_checkpoint_key_cached(thread_id, ns, checkpoint_id))
            doomed.append(CheckpointKeyRegistry.make_write_keys_zset_key(
                thread_id, ns, checkpoint_id))
        if whole:
            doomed += [self._make_redis_checkpoint_latest_key(thread_id, ns)
                       for ns in {ns for ns, _ in checkpoints} | {""}]
        with self._redis.pipeline(transaction=False) as pipe:
            for key in doomed:
                pipe.delete(key)
            pipe.execute()
