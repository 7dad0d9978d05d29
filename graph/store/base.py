"""An open checkpoint database, whatever the backend: the one interface storage offers.

A `Store` holds LangGraph's checkpointer and our tables on their connections, the
per-thread writer locks, and (kept by `graph.checkpoints.load.graph_of`) the graph
compiled with its checkpointer. It offers the per-thread operations retention, copy
and verify need, so no module outside storage writes SQL for our tables
(`graph.store.sql.schema` lists them) or asks which backend it has.

Everything a `Store` is made of is typed here by what its callers use: the protocols
`Ledger`, `AttemptLog`, `Tombstones`, `Approvals`, `Summaries`, the backend's own
operations on whole threads (`Backend`) and the writer locks (`WriterLocks`). This
module imports no backend: the SQL classes (`graph.store.sql`, built into a `Store` by
`graph.store.sql.build.sql_store` for `graph.store.sqlite` and `graph.store.postgres`)
and the Redis ones (`graph.store.redis`) implement the protocols.

Where is an attempt counted? In the `Ledger`, in two writes. `count` (called by
`nodes/budget.py`) adds one attempt, unless an earlier one was counted but never claimed
(a crash between the two: that one is reused, never counted twice) or the maximum is
reached; on SQLite it commits with the next commit (the budget node's checkpoint, at
the latest the claim), elsewhere at once. `claim` (called by `nodes/reason.py` before its one request) marks
that attempt sent, once, and returns only when the claim is durable (`make_durable`:
SQLite's synced `-wal` checkpoint in `graph.store.sqlite.ledger`, else
`NotDurableError` exit 6 `wal_busy`; PostgreSQL's commit with `synchronous_commit` on;
Redis's `WAITAOF`). The request is sent only after that, so the durable claim is the
count INVARIANTS I1 speaks of (an unclaimed count sends nothing). Both statements are in
`graph/store/sql/ledger.py` (SQLite, PostgreSQL) and `graph/store/redis/ledger.py`.
The whole answer, step by step, is in `graph/__init__.py`.

Where could a second writer be stopped? First at `WriterLocks.hold(thread_id)`, which
`graph.step.advance.advance` takes for the whole step (`BusyError`, exit 5, before
anything is counted). Then at `WriterLocks.fence(thread_id)`, the one fencing hook,
which every write of a thread's rows goes through before it is made: our tables'
(ledger, attempt log, decisions, tombstones, summaries), the checkpointer's `put`,
`put_writes` and `delete_thread` (`graph.store.saver.CheckedSaver`), and the checkpoint
window's trim (`graph.store.sql.window`). It refuses (`BusyError`, exit 5; INVARIANTS
I8) a write by a store that does not hold the thread's writer lock while another holder
does. On Redis it hands the write this store's lease token, which the write's Lua
script compares with the lock key on the server in the same atomic step
(`graph.store.redis.lua`): every write there (ledger, log row, checkpoint with its
latest pointer, digests and saved mark, pending writes, decisions, tombstones, TTL,
trims, deletions) is such a script, so a writer whose lease ran out while it was paused
changes nothing and exits 5. A write of a thread that nobody holds (`graph.copy`
importing a new thread, a Studio edit, a prune's sweep) carries no token and passes only
while nobody holds the thread. On SQLite and PostgreSQL a lock lives with its
process's file handle or session, which a pause does not end
(`graph.store.postgres.locks.AdvisoryThreadLocks.fence` says what that guarantees).
Request caps are not a thread's rows and are not fenced.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from graph.errors import BusyError, ErrorCode, RefusedError
from graph.outcome import Figures
from graph.store.rows import LedgerRow, LogTally, Tombstone

if TYPE_CHECKING:
    from graph.outcome import Outcome
    from nodes.context import LedgerEntry

__all__ = ["Approvals", "AttemptLog", "Backend", "Closable", "Ledger", "ReadOnlyLocks", "Store",
           "Summaries", "ThreadExport", "Tombstones", "WriterLocks"]


class Ledger(Protocol):
    """The attempt ledger and request caps (`graph.store.sql.ledger`, `graph.store.redis.ledger`)."""

    def read(self, thread_id: str) -> LedgerEntry | None:
        """The thread's counts, or None when it has no row."""

    def row(self, thread_id: str) -> LedgerRow | None:
        """The thread's whole row, read with exact types, or None."""

    def insert_row(self, row: LedgerRow) -> None:
        """Inserts a whole row as it was elsewhere (`graph.copy`)."""

    def create(self, thread_id: str, max_attempts: int) -> LedgerEntry:
        """Creates the thread's row with no attempts; keeps an existing row as it is."""

    def count(self, thread_id: str) -> LedgerEntry:
        """Counts a new attempt unless an unclaimed one exists or the maximum is reached."""

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """Marks counted attempt `attempt` as sent, durably; True exactly once per attempt."""

    def make_durable(self, what: str) -> None:
        """Waits until every write acknowledged so far is on disk."""

    def ensure_cap(self, cap_id: str, max_requests: int) -> tuple[int, int]:
        """Creates request cap `cap_id` if new; returns its `(requests, max_requests)`."""

    def insert_cap(self, cap_id: str, requests: int, max_requests: int) -> None:
        """Inserts a cap with its count as it was elsewhere (`graph.copy`)."""

    def cap(self, cap_id: str) -> tuple[int, int] | None:
        """`(requests, max_requests)` of a request cap, or None."""

    def caps(self) -> dict[str, tuple[int, int]]:
        """Every request cap, checked."""

    def touch(self, thread_id: str) -> None:
        """Sets the row's `updated_at` to now."""

    def updated_at(self) -> dict[str, str]:
        """`updated_at` of every thread in the ledger, by thread id."""

    def thread_ids(self) -> set[str]:
        """Every thread id in the ledger, read without checking the rows."""

    def delete(self, thread_id: str) -> None:
        """Deletes the thread's row (retention, `--restart-pruned`)."""


class AttemptLog(Protocol):
    """The append-only attempt log (`graph.store.sql.attempt_log` says what it holds)."""

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """Appends one row (`kind`: `reason` or `tool`)."""

    def import_rows(self, thread_id: str, rows: list[dict[str, Any]]) -> None:
        """Appends rows as `rows` returned them elsewhere, times kept (`graph.copy`)."""

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's rows (retention)."""

    def last_attempt(self, thread_id: str) -> int:
        """The highest attempt of the thread's `reason` rows; 0 when none.

        Raises:
            RefusedError: `damaged` for a stored value of the wrong form.
        """

    def tally(self, thread_id: str) -> LogTally:
        """`last_attempt` and `usage` in one read; the rows too where `covers` judges rows.

        A step passes them on (`check_ledger`, then `covers(..., tally.rows)`, then the
        figures it reports: `Store.figures`), so the log is read once per step.

        Raises:
            RefusedError: `damaged`, as `last_attempt`, `usage` and `rows`.
        """

    def usage(self, thread_id: str) -> dict[str, int]:
        """`prompt_tokens`, `completion_tokens`, `total_tokens` summed over `reason` rows.

        Forks included: the whole log, whatever checkpoint the thread's latest state
        came from. Zeros when there are none.

        Raises:
            RefusedError: `damaged` when a value is not a non-negative number, or a sum
                not a whole number.
        """

    def used_tokens(self, thread_id: str) -> int:
        """The sum of `usage.total_tokens` over the thread's `reason` rows; 0 when none.

        Raises:
            RefusedError: `damaged` when the sum is not a non-negative integer.
        """

    def covers(self, thread_id: str, values: dict[str, Any],
               rows: list[dict[str, Any]] | None = None, usage: dict[str, int] | None = None) -> None:
        """Refuses a log that lacks rows the thread's checkpoint `values` show were made.

        `rows`, when given, are judged instead of reading the stored ones: a step's
        (`tally`), or another store's (`graph.copy`); `usage`, when given, is what they
        sum to, already summed (a step's `tally.usage`: not summed again).

        Raises:
            RefusedError: `damaged` (exit 4).
        """

    def rows(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's rows, oldest first: `attempt`, `kind`, `payload`, `created_at`.

        Raises:
            RefusedError: `damaged` for a row that fails its checks.
        """


class Tombstones(Protocol):
    """Tombstones of pruned threads (`graph.store.sql.tombstones`)."""

    def get(self, thread_id: str) -> Tombstone | None:
        """The thread's tombstone, or None; `damaged` raised for a malformed one."""

    def add(self, tombstone: Tombstone) -> None:
        """Records a tombstone; a thread that already has one keeps it."""

    def thread_ids(self) -> set[str]:
        """Every tombstoned thread id, read without checking the rows."""

    def remove(self, thread_id: str) -> None:
        """Deletes the tombstone (for `--restart-pruned`)."""


class Approvals(Protocol):
    """Decisions on write calls, one per call of one turn (`graph.store.sql.approvals`)."""

    def rows(self, thread_id: str) -> dict[tuple[int, str], dict[str, Any]]:
        """Every decision of a thread by (attempt, call id), in decision order."""

    def turn(self, thread_id: str, attempt: int) -> dict[str, dict[str, Any]]:
        """The decisions on the calls of one turn, by call id."""

    def add(self, row: dict[str, Any]) -> None:
        """Records one decision; a second one for the same call is refused."""

    def plan(self, thread_id: str, attempt: int, tool_call_id: str, before: str | None,
             after: str) -> None:
        """Records, before writing, the file's hash now and the hash it will have after."""

    def mark_applied(self, thread_id: str, attempt: int, tool_call_id: str) -> None:
        """Marks an approved write as done."""

    def mark_failed(self, thread_id: str, attempt: int, tool_call_id: str, error: str,
                    result: str) -> None:
        """Records that an approved write could not be applied, and why."""

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's decisions (retention)."""


class Summaries(Protocol):
    """Summaries of finished threads (`graph.store.sql.summaries`)."""

    def keep(self, thread_id: str, outcome: Outcome) -> None:
        """Stores the summary of a finished thread's outcome."""

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's summary."""


class Backend(Protocol):
    """A backend's operations on whole threads and on the database itself.

    `graph.store.base.Store` delegates to it everything that depends on how the
    checkpoints and our tables are stored.
    """

    def commit(self) -> None:
        """Commits what the last graph call left kept back (nothing where writes commit at once)."""

    def checkpoint_thread_ids(self) -> set[str]:
        """Every thread id with a checkpoint, read without decoding any."""

    def count_checkpoints(self, thread_id: str) -> int:
        """How many checkpoints the thread has stored, read without decoding any."""

    def bury(self, tombstone: Tombstone) -> None:
        """Deletes a finished thread, leaving its tombstone (`graph.store.base.Store.bury`)."""

    def trim(self, thread_id: str, keep: int | None) -> int:
        """Deletes the thread's checkpoints older than its latest `keep`; returns how many."""

    def expire_finished(self, thread_id: str, status: str) -> None:
        """Gives a finished thread's keys their time-to-live (`graph.store.redis.ttl`); else nothing."""

    def carries_ttl(self, thread_id: str) -> bool:
        """True when the thread's keys carry a time-to-live or an expiry mark (Redis only)."""

    def check_lock(self, thread_id: str) -> None:
        """Refuses a thread whose writer-lock key has another form (Redis only; `damaged`)."""

    def buried_with_checkpoints(self) -> set[str]:
        """Tombstoned thread ids that still have checkpoints (an interrupted `bury`)."""

    def used_bytes(self) -> int:
        """Bytes the database uses (0 where this is not known)."""

    def reclaim_space(self) -> None:
        """Gives free space back where the backend can (SQLite's `VACUUM`)."""


class WriterLocks(Protocol):
    """One writer per thread (`graph.store.sqlite.locks`, `graph.store.postgres.locks`, Redis leases)."""

    def hold(self, thread_id: str) -> AbstractContextManager[None]:
        """Holds the thread's lock for a block; raises `BusyError` when another has it."""

    def fence(self, thread_id: str) -> str:
        """The fencing hook: called before each write of the thread's rows (module doc).

        Returns:
            The token the write carries: on Redis this store's lease token ('' when it
            holds none), which the write's script checks again on the server; '' on SQL.

        Raises:
            BusyError: Another store or process holds the thread's writer lock and this
                store does not (exit 5); nothing was written.
        """

    def close(self) -> None:
        """Releases every lock (after the database connections are closed)."""


class Closable(Protocol):
    """A database connection, as far as closing it goes."""

    def close(self) -> None:
        """Closes the connection."""


class ReadOnlyLocks:
    """The locks of a store opened read-only: a reader never holds a writer lock."""

    def hold(self, thread_id: str) -> AbstractContextManager[None]:
        """Never returns.

        Raises:
            RuntimeError: Always (a bug: only writers lock threads).
        """
        raise RuntimeError(f"thread {thread_id!r}: a store opened read-only holds no locks")

    def fence(self, thread_id: str) -> str:
        """Never returns.

        Raises:
            RuntimeError: Always (a bug: a store opened read-only writes nothing).
        """
        raise RuntimeError(f"thread {thread_id!r}: a store opened read-only writes nothing")

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True)
class ThreadExport:
    """One thread as `graph.copy` moves it: its rows in our tables and its checkpoints.

    Attributes:
        thread_id: The thread.
        ledger: Its ledger row, or None (a pruned thread has none).
        tombstone: Its tombstone, or None.
        checkpoints: Every checkpoint with its pending writes, newest first.
        log: Its attempt-log rows, oldest first (`AttemptLog.rows`).
        decisions: Its decisions on write calls, in decision order.
    """

    thread_id: str
    ledger: LedgerRow | None
    tombstone: Tombstone | None
    checkpoints: list[CheckpointTuple]
    log: list[dict[str, Any]]
    decisions: list[dict[str, Any]]


@dataclass
class Store:
    """An open checkpoint database (a SQLite file, PostgreSQL or Redis).

    Holds no SQL: what depends on how things are stored is in `backend` and the
    tables (the protocols of this module). Built by `graph.store.sql.build.sql_store`
    (SQLite, PostgreSQL) and `graph.store.redis.open.open_redis`.

    Attributes:
        location: The file path, or the URL with its password redacted, for messages.
        checkpointer: LangGraph's saver (checked, `graph.store.saver`, on SQL
            backends), on its own connection.
        backend: The backend's operations on whole threads (`graph.store.sql.backend`,
            `graph.store.redis.backend`).
        ledger: The attempt ledger and the request caps.
        log: The append-only attempt log.
        tombstones: Tombstones of pruned threads.
        approvals: Decisions on write calls.
        locks: Per-thread writer locks (`hold(thread_id)`).
        summaries: Summaries of finished threads (`graph.store.sql.summaries`), or None.
        store_id: A random id the database keeps (Redis: `graph.store.redis.open`), so a
            queued job names the checkpoint database it was enqueued for; None when the
            queue lives in the checkpoint database itself (PostgreSQL).
    """

    location: str
    checkpointer: BaseCheckpointSaver[str]
    backend: Backend
    ledger: Ledger
    log: AttemptLog
    tombstones: Tombstones
    approvals: Approvals
    locks: WriterLocks
    _conns: tuple[Closable, ...] = field(repr=False)
    summaries: Summaries | None = None
    store_id: str | None = None
    compiled: Any = field(default=None, repr=False)
    """The agent graph compiled with this store's checkpointer, kept by
    `graph.checkpoints.load.graph_of` (the store builds no graph)."""
    keeps_pool: bool = False
    """Whether a long-lived process (the queue worker's `graph.fleet.worker.StorePool`)
    should keep this store open for its next job rather than open one per job: True on
    PostgreSQL (two sessions and a compiled graph are worth keeping); False on SQLite (a
    file only tests give a worker) and Redis (one client per job)."""
    supports_async: bool = False
    """Whether the checkpointer has working async methods (`aget_tuple`, `aput`, ...).
    False for every backend here: LangGraph's `SqliteSaver`, `PostgresSaver` and
    `RedisSaver` as used here are synchronous (`graph.step.checked_graph` refuses an
    async graph method on them)."""

    @property
    def sql(self) -> Any:
        """The SQL connection (`graph.store.sql.conn.Sql`) of a SQLite or PostgreSQL store.

        For tests and SQL-only tools; code that works on any store never asks for it.

        Raises:
            AttributeError: The store is not SQL (Redis).
        """
        sql = getattr(self.backend, "sql", None)
        if sql is None:
            raise AttributeError(f"{self.location}: this store has no SQL connection")
        return sql

    def answers(self) -> bool:
        """True when the store's connections still answer one round trip each.

        Asked by `graph.fleet.worker.StorePool` before it lends a kept store
        (`keeps_pool`); a backend without a way to ask (Redis) answers True.
        """
        ping = getattr(self.backend, "answers", None)
        return True if ping is None else bool(ping())

    def take_failed_write(self, thread_id: str) -> BaseException | None:
        """The first error a checkpoint write of the thread raised since the last call.

        LangGraph drops the error of a checkpoint save that fails while an interrupt is
        being raised (`graph.store.saver.CheckedSaver.take_failed_write` says where), so
        `invoke` returns as if it were saved; `graph.step` asks here after each
        invocation and raises it (a lost lease: `BusyError`, exit 5). None when nothing
        failed, or the checkpointer is not one of ours.
        """
        take = getattr(self.checkpointer, "take_failed_write", None)
        return take(thread_id) if callable(take) else None

    def raise_failed_write(self, thread_id: str) -> None:
        """Raises `take_failed_write`'s error, if any (see there)."""
        failed = self.take_failed_write(thread_id)
        if failed is not None:
            raise failed

    def commit(self) -> None:
        """Commits what the last graph call left kept back (`graph.store.sql.conn.Sql.deferred`).

        LangGraph saves a node's writes without a checkpoint after them when the node
        raised or paused (`interrupt()`); on SQLite they wait for the next commit, and
        this is it. Called after each graph call and on close.
        """
        self.backend.commit()

    def close(self) -> None:
        """Commits what is kept back, closes the connections, then the lock handle.

        In that order: closing a handle of the database file first would drop SQLite's
        own locks (see `graph.store.sqlite.locks`).
        """
        try:
            self.commit()
        finally:
            for conn in self._conns:
                conn.close()
            self.locks.close()

    def thread_ids(self) -> list[str]:
        """Every thread id with a checkpoint, a ledger row or a tombstone, sorted.

        Read without decoding or checking any row, so one damaged row cannot hide the
        other threads (`graph.verify` checks each one).
        """
        ids = self.backend.checkpoint_thread_ids()
        return sorted(ids | self.ledger.thread_ids() | self.tombstones.thread_ids())

    def figures(self, thread_id: str, *, entry: LedgerEntry | None = None,
                usage: dict[str, int] | None = None) -> Figures:
        """The thread's attempts and tokens: what every face shows (`graph.outcome.Figures`).

        The one source of those figures for `graph.run` (text and `--json`), `graph.history`,
        `graph.api`, `graph.batch` and the queue workers: the ledger's count and the sums
        over the whole attempt log, which no fork or `update_state` lowers. A step that
        already read them passes what it read, so nothing is read twice: `entry` (the
        ledger row, or the entry its last `count` returned), `usage` (`AttemptLog.tally`'s
        sums, plus what the step recorded since). What is not given is read here, on
        every backend through its `Ledger.read` and `AttemptLog.usage`.

        Raises:
            RefusedError: `damaged` when the ledger has no row for the thread (its
                checkpoint without it is refused everywhere), or a log value is wrong.
        """
        if entry is None:
            entry = self.ledger.read(thread_id)
            if entry is None:
                raise RefusedError("the attempt-ledger row is missing", error_code=ErrorCode.DAMAGED,
                                   location=self.location, thread_id=thread_id)
        return Figures(entry.attempts, dict(self.log.usage(thread_id) if usage is None else usage))

    def bury(self, tombstone: Tombstone) -> None:
        """Deletes a finished thread, leaving its tombstone (retention; INVARIANTS I10).

        Two commits: first, in one transaction, the tombstone is written and the
        thread's ledger row, attempt log, decisions and summary are deleted; then LangGraph's
        `delete_thread` removes its checkpoints (and their digests). From the first
        commit on the thread is refused as `pruned`, so a crash in between leaves it
        gone, never half-usable; `sweep_buried` removes the leftover checkpoints.
        """
        self.backend.bury(tombstone)

    def trim(self, thread_id: str, keep: int | None) -> int:
        """Deletes the thread's checkpoints older than its latest `keep` (None: keeps all).

        Hold the thread's lock. One transaction (`graph.store.sql.window`); returns how
        many checkpoints were deleted.
        """
        return self.backend.trim(thread_id, keep)

    def count_checkpoints(self, thread_id: str) -> int:
        """How many checkpoints the thread has stored (its window), read without decoding any."""
        return self.backend.count_checkpoints(thread_id)

    def keep_window(self, thread_id: str, keep: int | None) -> None:
        """Registers the thread's window for a saver that keeps it as it saves (SQLite).

        Each later checkpoint of the thread, in this store, deletes those that fall out
        of its window in its own transaction (`graph.store.saver.sqlite_saver`); hold
        the thread's lock. Elsewhere nothing: call `trim_after_step`.
        """
        windows = getattr(self.checkpointer, "windows", None)
        if windows is not None and keep is not None:
            windows[thread_id] = keep

    def trim_after_step(self, thread_id: str, keep: int | None) -> int:
        """`trim`, unless the saver already keeps the window registered by `keep_window`."""
        if getattr(self.checkpointer, "windows", None) is not None:
            return 0
        return self.trim(thread_id, keep)

    def expire_finished(self, thread_id: str, status: str) -> None:
        """Gives a finished thread's keys their TTL (Redis: `graph.store.redis.ttl`); else nothing."""
        self.backend.expire_finished(thread_id, status)

    def carries_ttl(self, thread_id: str) -> bool:
        """True when the thread's keys carry a time-to-live or an expiry mark (Redis only)."""
        return self.backend.carries_ttl(thread_id)

    def check_lock(self, thread_id: str) -> None:
        """Refuses a thread whose writer-lock key has another form (Redis; nothing on SQL).

        A step's lock refuses it when it tries to take the thread; history and verify,
        which take no lock, read the key's type here, so all three agree.

        Raises:
            RefusedError: `damaged`, naming the key.
        """
        self.backend.check_lock(thread_id)

    def used_bytes(self) -> int:
        """Bytes the database uses (0 where this is not known)."""
        return self.backend.used_bytes()

    def reclaim_space(self) -> None:
        """Gives free space back where the backend can (SQLite's `VACUUM`); else nothing."""
        self.backend.reclaim_space()

    def sweep_buried(self) -> int:
        """Deletes leftover checkpoints of tombstoned threads (an interrupted `bury`).

        Each thread is held while its checkpoints go (the deletion is fenced); one
        another process holds is left for the next prune.

        Returns:
            How many threads had leftovers.
        """
        swept = 0
        for thread_id in sorted(self.backend.buried_with_checkpoints()):
            try:
                with self.locks.hold(thread_id):
                    self.checkpointer.delete_thread(thread_id)
            except BusyError:
                continue  # restarted (`--restart-pruned`) meanwhile; the next prune sweeps it
            swept += 1
        return swept

    def export_thread(self, thread_id: str) -> ThreadExport:
        """Reads a whole thread: our rows with exact types, and every checkpoint, checked.

        Raises:
            RefusedError: `damaged` for a row of ours that fails its checks.
            CheckpointIntegrityError: A checkpoint fails its checks.
        """
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        return ThreadExport(thread_id, self.ledger.row(thread_id),
                            self.tombstones.get(thread_id), list(self.checkpointer.list(config)),
                            self.log.rows(thread_id),
                            list(self.approvals.rows(thread_id).values()))

    def import_thread(self, export: ThreadExport) -> None:
        """Writes a thread exported from another store (`graph.copy`); it must be new here.

        The ledger row goes first: a copy interrupted later leaves a thread whose
        counted attempts have no checkpoint, which is refused, never restarted with a
        new budget. Checkpoints go through LangGraph's `put` and `put_writes`, oldest
        first (each parent before its child), so they are re-serialized with fresh
        checksums and digests.
        """
        thread_id = export.thread_id
        if export.ledger is not None:
            self.ledger.insert_row(export.ledger)
        if export.tombstone is not None:
            self.tombstones.add(export.tombstone)
        for item in reversed(export.checkpoints):
            parent_conf = (item.parent_config or {}).get("configurable") or {"thread_id": thread_id}
            parent: RunnableConfig = {"configurable": {"checkpoint_ns": "", **parent_conf}}
            saved = self.checkpointer.put(parent, _langgraph_form(item.checkpoint), item.metadata,
                                          item.checkpoint["channel_versions"])
            for task_id, writes in _writes_by_task(item).items():
                self.checkpointer.put_writes(saved, writes, task_id)
        self.log.import_rows(thread_id, export.log)
        for decision in export.decisions:
            self.approvals.add(decision)


def _langgraph_form(checkpoint: Any) -> Any:
    """The checkpoint without what LangGraph's `RedisSaver` adds as it loads one.

    It adds `type` and `pending_sends` (empty for this graph, which sends no `Send`);
    other savers refuse a checkpoint with other keys (`graph.store.shape`). A
    non-empty `pending_sends` is kept, so the target refuses it rather than lose it.
    """
    extra = {"type"} | ({"pending_sends"} if checkpoint.get("pending_sends") == [] else set())
    return {key: value for key, value in checkpoint.items() if key not in extra}


def _writes_by_task(item: CheckpointTuple) -> dict[str, list[tuple[str, Any]]]:
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in item.pending_writes or []:
        by_task.setdefault(task_id, []).append((channel, value))
    return by_task

