"""LangGraph's savers, with every checkpoint they read checked before LangGraph uses it.

`CheckedSaver` is mixed into `SqliteSaver` and `PostgresSaver` (and any later backend),
so `get_state`, `get_state_history`, `graph.copy` and resuming all read through the
same checks:

* rows LangGraph cannot parse (invalid JSON or UTF-8 metadata, a row JSON without
  `channel_versions`, `null`, ...) are refused instead of crashing,
* the metadata column, the checkpoint's own shape and its pending writes must have
  exactly the shape LangGraph writes; a state checkpoint must hold every channel
  the graph always writes; an `__interrupt__` write must be a non-empty list of real
  `langgraph.types.Interrupt` records pausing write calls for review,
* the digests of `graph.digest` must match what was loaded.

A refusal raises `CheckpointIntegrityError` (`damaged`) naming the checkpoint.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from graph.digest import SqlDigests, checkpoint_digest, write_digest
from graph.serde import CheckpointIntegrityError, make_serde

if TYPE_CHECKING:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

_T = TypeVar("_T")

STATE_CHANNELS = frozenset({"thread", "messages", "progress"})
"""Channels every checkpoint after the input holds (the graph writes all three first)."""
_SOURCES = frozenset({"input", "loop", "update", "fork"})
_CHECKPOINT_KEYS = frozenset({"v", "id", "ts", "channel_values", "channel_versions",
                              "versions_seen"})
_PENDING_KEYS = frozenset({"tool_call_id", "name", "arguments", "sha256"})
_PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError)


def _version(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _str_dict(value: Any, check: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and check(v)
                                           for k, v in value.items())


def check_metadata(metadata: Any) -> None:
    """Refuses metadata unlike LangGraph's `{source, step, parents}`.

    Raises:
        ValueError: What is wrong.
    """
    if not isinstance(metadata, dict):
        raise ValueError(f"its metadata is {type(metadata).__name__}, not an object")
    if set(metadata) != {"source", "step", "parents"}:
        raise ValueError(f"its metadata has keys {sorted(metadata)}, not source, step, parents")
    step = metadata["step"]
    if metadata["source"] not in _SOURCES:
        raise ValueError(f"its metadata source {metadata['source']!r} is unknown")
    if not isinstance(step, int) or isinstance(step, bool) or step < -1:
        raise ValueError(f"its metadata step {step!r} is not a step number")
    if not _str_dict(metadata["parents"], lambda v: isinstance(v, str)):
        raise ValueError("its metadata parents are not checkpoint ids by namespace")


def check_checkpoint(checkpoint: Any, checkpoint_id: str, source: str) -> None:
    """Refuses a checkpoint unlike LangGraph's, or a state checkpoint lacking a channel.

    Raises:
        ValueError: What is wrong.
    """
    if not isinstance(checkpoint, dict):
        raise ValueError(f"it is {type(checkpoint).__name__}, not a checkpoint")
    keys = set(checkpoint) - {"updated_channels"}
    if keys != _CHECKPOINT_KEYS:
        raise ValueError(f"it has keys {sorted(checkpoint)}, not LangGraph's")
    if checkpoint["id"] != checkpoint_id:
        raise ValueError(f"its id {checkpoint['id']!r} is not the row's id")
    if not isinstance(checkpoint["v"], int) or not isinstance(checkpoint["ts"], str):
        raise ValueError("its version or timestamp has the wrong type")
    if not _str_dict(checkpoint["channel_versions"], _version):
        raise ValueError("its channel_versions are not versions by channel")
    if not _str_dict(checkpoint["versions_seen"], lambda v: _str_dict(v, _version)):
        raise ValueError("its versions_seen are not versions by node")
    updated = checkpoint.get("updated_channels")
    if updated is not None and not (isinstance(updated, list)
                                    and all(isinstance(c, str) for c in updated)):
        raise ValueError("its updated_channels are not channel names")
    values = checkpoint["channel_values"]
    if not _str_dict(values, lambda v: True):
        raise ValueError("its channel_values are not values by channel")
    missing = STATE_CHANNELS - set(values)
    if source != "input" and missing:
        raise ValueError(f"its state lacks channel(s) {sorted(missing)} the graph always writes")


def _check_interrupt(value: Any) -> None:
    from langgraph.types import Interrupt

    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError("its __interrupt__ write is not a non-empty list of interrupts")
    for item in value:
        if not isinstance(item, Interrupt) or not isinstance(item.id, str):
            raise ValueError(f"its __interrupt__ write holds {type(item).__name__}, "
                             "not a LangGraph Interrupt record")
        payload = item.value
        if (not isinstance(payload, dict) or set(payload) != {"kind", "pending"}
                or payload["kind"] != "approval" or not isinstance(payload["pending"], list)
                or not payload["pending"]
                or not all(isinstance(p, dict) and set(p) == _PENDING_KEYS
                           and all(isinstance(p[k], str) for k in _PENDING_KEYS)
                           for p in payload["pending"])):
            raise ValueError("its __interrupt__ write is not a review of write calls")


def check_writes(writes: Any) -> None:
    """Refuses pending writes unlike LangGraph's `(task id, channel, value)` triples.

    Raises:
        ValueError: What is wrong.
    """
    for write in writes or ():
        if (not isinstance(write, tuple) or len(write) != 3 or not isinstance(write[0], str)
                or not isinstance(write[1], str)):
            raise ValueError("a pending write is not (task id, channel, value)")
        if write[1] == "__interrupt__":
            _check_interrupt(write[2])


class CheckedSaver(BaseCheckpointSaver[str]):
    """Mixin for a LangGraph saver: digests on write, every check on read (module doc).

    Mixed in before the saver (`class X(CheckedSaver, SqliteSaver)`), so each method
    here runs first and hands on to the saver's own.

    Attributes:
        digests: Our digest table on the store's connection; None checks shape only.
    """

    digests: SqlDigests | None = None
    _marker: str | None = None

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Records the checkpoint's digest, then saves it like LangGraph."""
        if self.digests is not None:
            conf = config["configurable"]
            key = (str(conf["thread_id"]), conf.get("checkpoint_ns", ""), checkpoint["id"], "", 0)
            self.digests.record(key, checkpoint_digest(self.serde, checkpoint))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Records each write's digest, then saves them like LangGraph."""
        if self.digests is not None:
            conf = config["configurable"]
            for idx, (channel, value) in enumerate(writes):
                key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")),
                       str(conf["checkpoint_id"]), task_id, WRITES_IDX_MAP.get(channel, idx))
                self.digests.record(key, write_digest(self.serde, task_id, channel, value))
        super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's checkpoints, then their digests."""
        super().delete_thread(thread_id)
        if self.digests is not None:
            self.digests.delete_thread(thread_id)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """LangGraph's `get_tuple`, checked (see module doc).

        Raises:
            CheckpointIntegrityError: The checkpoint is refused.
        """
        saved = _parsed(lambda: super(CheckedSaver, self).get_tuple(config), config)
        if saved is not None:
            self.check_tuple(saved)
        return saved

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        """LangGraph's `list`, each checkpoint checked as it is yielded."""
        items = _parsed(lambda: super(CheckedSaver, self).list(
            config, filter=filter, before=before, limit=limit), config)
        try:
            while True:
                saved = _parsed(lambda: next(items, None), config)
                if saved is None:
                    return
                self.check_tuple(saved)
                yield saved
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # release LangGraph's cursor now, while its connection is open

    def check_tuple(self, saved: CheckpointTuple) -> None:
        """Checks one loaded `CheckpointTuple`.

        Raises:
            CheckpointIntegrityError: `damaged`, naming the checkpoint and the fault.
        """
        conf = saved.config["configurable"]
        checkpoint_id = str(conf.get("checkpoint_id"))
        try:
            check_metadata(saved.metadata)
            check_checkpoint(saved.checkpoint, checkpoint_id, saved.metadata["source"])
            check_writes(saved.pending_writes)
            self._check_digests(str(conf["thread_id"]), conf.get("checkpoint_ns", ""),
                                checkpoint_id, saved)
        except ValueError as exc:
            raise CheckpointIntegrityError(f"checkpoint {checkpoint_id}: {exc}") from None

    def _check_digests(self, thread_id: str, ns: str, checkpoint_id: str,
                       saved: CheckpointTuple) -> None:
        if self.digests is None:
            return
        if self._marker is None:
            self._marker = self.digests.marker()
            if self._marker is None:
                self.digests = None  # a database from before digests, opened read-only
                return
        legacy = checkpoint_id < self._marker
        stored = self.digests.of_checkpoint(thread_id, ns, checkpoint_id)
        own = stored.get("")
        if own is None and not legacy:
            raise ValueError("it has no digest: it was not written by this program")
        if own is not None and checkpoint_digest(self.serde, saved.checkpoint) not in own:
            raise ValueError("it does not match its digest: a row of it was deleted, "
                             "repointed or edited")
        for task_id, channel, value in saved.pending_writes or ():
            recorded = stored.get(task_id)
            if recorded is None and legacy:
                continue
            if write_digest(self.serde, task_id, channel, value) not in (recorded or ()):
                raise ValueError(f"its pending {channel!r} write of task {task_id} matches no "
                                 "digest: it was added, edited or moved")


def _parsed(read: Callable[[], _T], config: RunnableConfig | None) -> _T:
    """Runs a LangGraph read, turning a crash on an unparsable row into a refusal."""
    try:
        return read()
    except _PARSE_ERRORS as exc:
        thread_id = (config or {}).get("configurable", {}).get("thread_id")
        raise CheckpointIntegrityError(
            f"a checkpoint of thread {thread_id!r} cannot be "
            f"parsed ({type(exc).__name__}: {exc})") from None
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc):
            raise
        raise CheckpointIntegrityError(f"a checkpoint row is not valid text ({exc})") from None


def sqlite_saver(conn: sqlite3.Connection, digests: SqlDigests) -> SqliteSaver:
    """A checked `SqliteSaver` on `conn`, with our serializer, recording into `digests`."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    class CheckedSqliteSaver(CheckedSaver, SqliteSaver):
        pass

    saver = CheckedSqliteSaver(conn, serde=make_serde())
    saver.digests = digests
    return saver


def postgres_saver(conn: psycopg.Connection[Any], digests: SqlDigests) -> PostgresSaver:
    """A checked `PostgresSaver` on `conn` (dict rows), recording into `digests`."""
    from langgraph.checkpoint.postgres import PostgresSaver

    class CheckedPostgresSaver(CheckedSaver, PostgresSaver):
        pass

    saver = CheckedPostgresSaver(conn, serde=make_serde())
    saver.digests = digests
    return saver
