"""LangGraph's savers, with every checkpoint they read checked before LangGraph uses it.

`CheckedSaver` is mixed into `SqliteSaver` and `PostgresSaver` (and any later backend),
so `get_state`, `get_state_history`, `graph.copy` and resuming all read through the
same checks:

* rows LangGraph cannot parse (invalid JSON or UTF-8 metadata, a row JSON without
  `channel_versions`, `null`, ...) are refused instead of crashing,
* the metadata column, the checkpoint's own shape and its pending writes must have
  exactly the shape LangGraph writes (`graph.store.shape`),
* the digests of `graph.store.digest` must match what was loaded.

A refusal raises `CheckpointIntegrityError` (`damaged`) naming the checkpoint. A
checkpoint that fails only because it was deleted after LangGraph read it (a writer
trimmed the thread's window meanwhile, `graph.store.sql.window`, deleting its rows and
digests together) is no longer the thread's: `list` leaves it out and `get_tuple` reads
the thread again.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
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
from langgraph.checkpoint.sqlite import SqliteSaver

from graph.store.digest import SqlDigests, checkpoint_digest, write_digest
from graph.store.serde import CheckpointIntegrityError, make_serde
from graph.store.shape import check_checkpoint, check_metadata, check_writes
from graph.store.sql.conn import SqliteSql
from graph.store.sql.window import trim_in_transaction

if TYPE_CHECKING:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = ["CheckedSaver", "postgres_saver", "sqlite_saver"]

_T = TypeVar("_T")
_REREADS = 3  # how often `get_tuple` reads again a latest checkpoint trimmed while read


class _Vanished(Exception):
    """The checkpoint was deleted after it was read: it is no longer the thread's."""
_PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError)
_FAILED_GUARD = threading.Lock()
"""Guards every saver's failed writes (`CheckedSaver.take_failed_write`): saves run on
LangGraph's background threads."""


class CheckedSaver(BaseCheckpointSaver[str]):
    """Mixin for a LangGraph saver: digests on write, every check on read (module doc).

    Mixed in before the saver (`class X(CheckedSaver, SqliteSaver)`), so each method
    here runs first and hands on to the saver's own.

    Attributes:
        digests: Our digest table on the store's connection; None checks shape only.
    """

    digests: SqlDigests | None = None
    windows: dict[str, int] | None = None
    """Checkpoint windows (`keep_checkpoints`) by thread, kept inside each `put`'s own
    transaction; None when this saver cannot (the store trims after a step instead)."""
    _marker: str | None = None

    def _checkpoint_block(self, starts: bool = False) -> AbstractContextManager[None]:
        """Around a `put` or `delete_thread`: here nothing.

        `starts`: a new thread's input or `__start__` checkpoint, kept back on SQLite for the
        first node's commit (a kill before leaves no trace of the thread, as one before its
        input; no request leaves before it).
        """
        return nullcontext()

    def _writes_block(self, config: RunnableConfig) -> AbstractContextManager[None]:
        """Around a `put_writes` to checkpoint `config`: here nothing (each statement commits)."""
        return nullcontext()

    fence: Callable[[str], str] | None = None
    """The store's fencing hook (`graph.store.base.WriterLocks.fence`), set by `fence_with`;
    None for a saver used on its own (tests)."""

    def fence_with(self, fence: Callable[[str], str]) -> None:
        """Sends every later `put` and `put_writes` through the store's fencing hook."""
        self.fence = fence

    def _fenced(self, config: RunnableConfig) -> None:
        """Refuses a write to `config`'s thread by a store that may not write it (`fence`)."""
        if self.fence is not None:
            self.fence(str(config["configurable"]["thread_id"]))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Saves a checkpoint (`_put`), noting a failure for `take_failed_write`.

        Raises:
            BusyError: The fence refused it (exit 5); as any error of `_put`, also noted.
        """
        with self._noting_failure(config):
            return self._put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Saves a task's pending writes (`_put_writes`), noting a failure for `take_failed_write`.

        Raises:
            BusyError: The fence refused them (exit 5); as any error of `_put_writes`, also noted.
        """
        with self._noting_failure(config):
            self._put_writes(config, writes, task_id, task_path)

    @contextmanager
    def _noting_failure(self, config: RunnableConfig) -> Iterator[None]:
        """Keeps the first error a write of the thread raised until `take_failed_write`.

        LangGraph saves checkpoints on a background executor; when the save after an
        `interrupt_after` node fails, the interrupt is already being raised and the
        executor drops the save's error ("if there's already an exception being raised,
        don't raise another one", `langgraph.pregel._executor.BackgroundExecutor.__exit__`),
        so `invoke` returns as if the checkpoint were saved. The step asks afterwards.
        """
        try:
            yield
        except BaseException as exc:
            thread_id = str(config["configurable"].get("thread_id"))
            with _FAILED_GUARD:
                self._failed_writes.setdefault(thread_id, exc)
            raise

    def take_failed_write(self, thread_id: str) -> BaseException | None:
        """The first error a write of the thread raised since the last call, else None.

        Called before and after each invocation (`graph.step.invocation`): a write that
        failed where LangGraph dropped its error is raised there instead of lost.
        """
        with _FAILED_GUARD:
            return self._failed_writes.pop(thread_id, None)

    @property
    def _failed_writes(self) -> dict[str, BaseException]:
        failed: dict[str, BaseException] | None = self.__dict__.get("_failed_writes_by_thread")
        if failed is None:
            failed = self.__dict__.setdefault("_failed_writes_by_thread", {})
        return failed

    def _put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
             new_versions: ChannelVersions) -> RunnableConfig:
        """Records the checkpoint's digest, then saves it like LangGraph (fenced first)."""
        self._fenced(config)
        starts = (metadata.get("source"), metadata.get("step")) in (("input", -1), ("loop", 0))
        with self._checkpoint_block(starts):
            if self.digests is not None:
                key = (*_slot(config), checkpoint["id"], "", 0)
                self.digests.record(key, checkpoint_digest(self.serde, checkpoint))
            saved = super().put(config, checkpoint, metadata, new_versions)
            self._keep_window(config)
            return saved

    def _keep_window(self, config: RunnableConfig) -> None:
        """Inside a `put`'s block: trims the thread to its window; here nothing (`windows`)."""

    def _put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                    task_id: str, task_path: str = "") -> None:
        """Records each write's digest, then saves them like LangGraph (fenced first)."""
        self._fenced(config)
        with self._writes_block(config):
            if self.digests is not None:
                conf = config["configurable"]
                for idx, (channel, value) in enumerate(writes):
                    key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")),
                           str(conf["checkpoint_id"]), task_id, WRITES_IDX_MAP.get(channel, idx))
                    self.digests.record(key, write_digest(self.serde, task_id, channel, value))
            super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's checkpoints, then their digests (fenced first)."""
        self._fenced({"configurable": {"thread_id": thread_id}})
        with self._checkpoint_block():
            super().delete_thread(thread_id)
            if self.digests is not None:
                self.digests.delete_thread(thread_id)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """LangGraph's `get_tuple`, checked (see module doc).

        Returns:
            As LangGraph; None too for a given checkpoint id deleted while it was read.

        Raises:
            CheckpointIntegrityError: The checkpoint is refused.
        """
        for _ in range(_REREADS):
            saved = _parsed(lambda: super(CheckedSaver, self).get_tuple(config), config)
            try:
                if saved is not None:
                    self.check_tuple(saved)
                return saved
            except _Vanished:
                if config["configurable"].get("checkpoint_id"):
                    return None
        raise CheckpointIntegrityError(f"thread {config['configurable'].get('thread_id')!r}: "
                                       "its latest checkpoint kept vanishing while read")

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
                try:
                    self.check_tuple(saved)
                except _Vanished:
                    continue
                yield saved
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # release LangGraph's cursor now, while its connection is open

    def check_tuple(self, saved: CheckpointTuple) -> None:
        """Checks one loaded `CheckpointTuple`.

        Raises:
            CheckpointIntegrityError: `damaged`, naming the checkpoint and the fault.
            _Vanished: It failed, but its row is gone now (trimmed since it was read).
        """
        conf = saved.config["configurable"]
        checkpoint_id, key = str(conf.get("checkpoint_id")), (str(conf["thread_id"]),
                                                              conf.get("checkpoint_ns", ""))
        try:
            check_metadata(saved.metadata)
            check_checkpoint(saved.checkpoint, checkpoint_id, saved.metadata["source"])
            check_writes(saved.pending_writes)
            self._check_digests(*key, checkpoint_id, saved)
        except ValueError as exc:
            if self.digests is not None and not self.digests.checkpoint_exists(*key,
                                                                               checkpoint_id):
                raise _Vanished(checkpoint_id) from None
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


def sqlite_saver(sql: SqliteSql, digests: SqlDigests) -> SqliteSaver:
    """A checked `SqliteSaver` on the connection of `sql`: one commit per superstep.

    LangGraph calls `put_writes` once per finished task and `put` once per superstep
    (`langgraph.pregel._loop`), from background threads. Here `put_writes` keeps its
    rows and their digests back for the next commit (`SqliteSql.deferred`), and `put`
    commits them with the checkpoint and its digest (`SqliteSql.transaction`): a
    superstep reaches the file in one commit, with the attempt-log row or count its
    node kept back, and a digest never commits apart from what it covers. Writes with
    no `put` after them (a node that raised, an `interrupt()`) are committed after
    each graph call (`graph.step.invocation`) and when the store closes; so are writes that a
    background thread saves after their superstep's `put` (LangGraph waits only for the
    `put`), which a resume never needs: the checkpoint after them holds their effect.
    LangGraph's own write statements run in a transaction block too, and its lock is the
    connection's. A thread with a window in `windows` is trimmed inside each `put`'s
    transaction, and with late writes (`graph.store.sql.window`; `Store.keep_window`).

    Args:
        sql: The store's connection, shared by the saver and our tables.
        digests: Our digest table on the same connection.
    """

    class CheckedSqliteSaver(CheckedSaver, SqliteSaver):
        saved_after: dict[tuple[str, str], str | None]  # the parent of the last saved, by slot

        def put(self, config: RunnableConfig, checkpoint: Checkpoint,
                metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
            with sql.lock:
                saved = super().put(config, checkpoint, metadata, new_versions)
                self.saved_after[_slot(config)] = config["configurable"].get("checkpoint_id")
                return saved

        def _checkpoint_block(self, starts: bool = False) -> AbstractContextManager[None]:
            return sql.deferred() if starts else sql.transaction()

        @contextmanager
        def _writes_block(self, config: RunnableConfig) -> Iterator[None]:
            with sql.lock:
                late = self.saved_after.get(_slot(config)) == config["configurable"].get(
                    "checkpoint_id")  # its superstep's checkpoint is saved already
                with sql.deferred():
                    yield
                    if late:  # no later put trims them: here
                        self._keep_window(config)

        def _keep_window(self, config: RunnableConfig) -> None:
            thread_id, ns = _slot(config)
            if ns == "" and (keep := (self.windows or {}).get(thread_id)) is not None:
                trim_in_transaction(sql, thread_id, keep)

        @contextmanager
        def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
            with sql.transaction() if transaction else nullcontext(), \
                    super().cursor(transaction=False) as cur:
                yield cur

    saver = CheckedSqliteSaver(sql.conn, serde=make_serde())
    saver.lock, saver.digests, saver.saved_after, saver.windows = sql.lock, digests, {}, {}  # type: ignore[assignment]
    return saver


def _slot(config: RunnableConfig) -> tuple[str, str]:
    conf = config["configurable"]
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))


def postgres_saver(conn: psycopg.Connection[Any], digests: SqlDigests) -> PostgresSaver:
    """A checked `PostgresSaver` on `conn` (dict rows), recording into `digests`."""
    from langgraph.checkpoint.postgres import PostgresSaver  # noqa: PLC0415 - the postgres extra: imported only where a PostgreSQL store is used

    class CheckedPostgresSaver(CheckedSaver, PostgresSaver):
        pass

    saver = CheckedPostgresSaver(conn, serde=make_serde())
    saver.digests = digests
    return saver
