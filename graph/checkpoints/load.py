"""Reads a thread's checkpoint fail-closed: checksums, strict decoding, migration, validation.

Used by every entry point that reads a thread, so the CLI, history and notebooks all
refuse exactly the same stored data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graph.agent import build_graph
from graph.checkpoints.integrity import PairingBrokenError, check_messages, validate_state
from graph.errors import ErrorCode, RefusedError
from graph.store.checks import check_ledger
from graph.store.failures import undecodable
from graph.store.migrations import migrate_state
from graph.store.rows import FINAL_STATUSES
from graph.store.serde import CheckpointIntegrityError
from nodes.write_tools import canonical_arguments

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = [
    "LedgerWithoutCheckpoint", "LoadedThread", "check_snapshot", "check_stored_thread",
    "check_values", "graph_of", "history_page", "is_finished", "load_thread", "pending_input",
    "read_snapshot",
]


class LedgerWithoutCheckpoint(RefusedError):
    """A thread whose ledger counts attempts but which has no checkpoint (`damaged`).

    What a Studio thread looks like in the ledger's database (`langgraph dev` keeps its
    checkpoints elsewhere), so `graph.verify` tells a database of only these apart.
    """


def pending_review(snapshot: Any) -> list[dict[str, Any]] | None:
    """The write calls a thread is paused on, or None when it is not waiting for review.

    Read from the snapshot's pending `interrupt()` (`graph.step.approvals` records the
    decisions); the stored status of such a thread stays `ready`.

    Returns:
        Each with `tool_call_id`, `name`, `arguments` (canonical: exactly what an
        approval applies) and `sha256`, in call order.
    """
    for task in snapshot.tasks or ():
        for pending in task.interrupts or ():
            value = pending.value
            if isinstance(value, dict) and value.get("kind") == "approval":
                return [{**p, "arguments": canonical_arguments(p["arguments"])}
                        for p in value["pending"]]
    return None

def is_finished(status: Any, next_nodes: Any) -> bool:
    """Whether a thread is finished: one rule for the step, verify, retention, copy and TTL.

    Its status is final (`graph.store.rows.FINAL_STATUSES`) and nothing is left to run
    but `budget`, which ends a finished thread without a request: an
    `update_state(as_node="tools")` of a done thread leaves `budget` next, and no step
    runs it (a step answers for a finished thread as it stands), so such a thread is as
    finished as one with nothing next (an outside attack found it kept forever on Redis,
    its TTL taken off by the update and never given back). A thread paused on a review
    (`tools` next) can still continue: `--approve` runs it.

    Args:
        status: The state's `progress.status`.
        next_nodes: The nodes LangGraph would run next (`StateSnapshot.next`).
    """
    return status in FINAL_STATUSES and set(next_nodes or ()) <= {"budget"}


@dataclass(frozen=True)
class LoadedThread:
    """A thread's latest checkpoint, checked and migrated.

    Attributes:
        snapshot: LangGraph's `StateSnapshot` (its `values` are as stored).
        values: The migrated, validated state values.
        stored_version: The schema version the checkpoint was written with.
    """

    snapshot: Any
    values: dict[str, Any]
    stored_version: int

    @property
    def finished(self) -> bool:
        """Whether the thread is finished (`is_finished`), as LangGraph shows the state.

        Stored pending writes are applied, and `StateSnapshot.next` leaves out a task
        whose writes are stored. A task
        whose writes were stored before a kill or a lost lease, with no checkpoint after
        them, counts as run: the step reports such a thread finished, so verify and
        retention read it so too (a TTL on it is right, and it is pruned in its turn).
        """
        return is_finished(self.values["progress"]["status"], self.snapshot.next)


def graph_of(store: Store) -> Any:
    """The agent graph compiled with `store`'s checkpointer: built once per open store.

    Returns:
        The `CompiledStateGraph` (`graph.agent.build_graph`), kept in `store.compiled`.
    """
    if store.compiled is None:
        store.compiled = build_graph(store.checkpointer)
    return store.compiled


@contextmanager
def _refused_as(where: str, thread_id: str | None = None) -> Iterator[None]:
    """Turns checkpoint and storage failures of LangGraph reads into refusals (exit 4).

    Args:
        where: The location the refusal names (the database, or a caller's own text).
        thread_id: The thread being read, when `where` does not name it already.

    Raises:
        RefusedError: `damaged` or `incompatible`, at `where` (and `thread_id`).
    """
    try:
        yield
    except CheckpointIntegrityError as exc:
        raise RefusedError(str(exc), error_code=ErrorCode(exc.error_code), location=where,
                           thread_id=thread_id) from None
    except Exception as exc:
        if not undecodable(exc):
            raise
        raise RefusedError(f"the database is damaged ({exc})", error_code=ErrorCode.DAMAGED,
                           location=where, thread_id=thread_id) from None


def read_snapshot(graph: Any, config: dict[str, Any], where: str,
                  thread_id: str | None = None) -> Any:
    """`graph.get_state(config)`, with storage and checksum failures refused.

    Raises:
        RefusedError: `damaged` or `incompatible`, at `where` (and `thread_id`).
    """
    with _refused_as(where, thread_id):
        return graph.get_state(config)


def history_page(graph: Any, config: dict[str, Any], where: str,
                 limit: int | None = None, *, thread_id: str | None = None) -> list[Any]:
    """`graph.get_state_history(config, limit=limit)` as a list, newest first.

    Raises:
        RefusedError: Any checkpoint of the page fails its checks (as `read_snapshot`).
    """
    with _refused_as(where, thread_id):
        return list(graph.get_state_history(config, limit=limit))


def _check_history(graph: Any, thread_id: str, location: str) -> None:
    """Checks every checkpoint of a thread as `load_thread` checks its latest one.

    Raises:
        RefusedError: Naming the first checkpoint refused.
    """
    config = {"configurable": {"thread_id": thread_id}}
    for snapshot in history_page(graph, config, location, thread_id=thread_id):
        checkpoint_id = snapshot.config["configurable"]["checkpoint_id"]
        values = snapshot.values
        if tuple(snapshot.next) == ("__start__",):
            try:
                values = pending_input(graph, snapshot.config, location, thread_id)
            except RefusedError as exc:
                raise exc.at(checkpoint_id=checkpoint_id) from None
        if values.get("thread"):  # the input checkpoint holds no state yet
            check_values(values, tuple(snapshot.next), location, thread_id,
                         checkpoint_id=checkpoint_id)


def check_stored_thread(store: Store, graph: Any, thread_id: str) -> LoadedThread | None:
    """Everything `graph.run` checks before advancing a thread, plus its older checkpoints.

    The latest checkpoint, its ledger row, attempt log, approvals and tombstone, and
    every older checkpoint: what `graph.verify` reports and `graph.copy` requires.

    Returns:
        The loaded thread, or None when it has no checkpoint.

    Raises:
        RefusedError: The first problem found; `LedgerWithoutCheckpoint` for counted
            attempts without a checkpoint.
    """
    try:
        tombstone = store.tombstones.get(thread_id)
        entry = store.ledger.read(thread_id)
        log_rows = store.log.rows(thread_id)
        store.approvals.rows(thread_id)
    except RefusedError as exc:
        raise exc.at(location=store.location, thread_id=thread_id) from None
    store.check_lock(thread_id)  # as a step's lock would (history and verify take none)
    loaded = load_thread(graph, thread_id, store.location)
    if loaded is None:
        if entry is not None and entry.attempts > 0 and tombstone is None:
            raise LedgerWithoutCheckpoint(f"{entry.attempts} counted attempt(s) in the ledger "
                                          "but no checkpoint", error_code=ErrorCode.DAMAGED,
                                          location=store.location, thread_id=thread_id)
        return None
    logged = max((r["attempt"] for r in log_rows if r["kind"] == "reason"), default=0)
    check_ledger(entry, loaded.values, thread_id, store.location, logged)
    store.log.covers(thread_id, loaded.values, log_rows)
    _check_history(graph, thread_id, store.location)
    return loaded


def check_values(values: Any, next_nodes: tuple[str, ...], where: str, thread_id: str, *,
                 checkpoint_id: str | None = None) -> tuple[dict, int]:
    """Migrates (in memory, `graph.store.migrations`) and validates the stored values of `thread_id`.

    Returns them and the version they were stored with; nothing is written (the rule of
    `graph.store.migrations`: a reader never writes back).

    Args:
        values: The stored state values.
        next_nodes: The checkpoint's next nodes.
        where: The location a refusal names (the database, or a caller's own text).
        thread_id: The thread the values must belong to.
        checkpoint_id: The checkpoint a refusal names, if not the latest.

    Raises:
        RefusedError: `damaged` or `incompatible`, at `where`, the thread and checkpoint.
    """
    try:
        migrated, version = migrate_state(values, thread_id)
        validate_state(migrated, next_nodes, thread_id)
    except RefusedError as exc:
        raise exc.at(location=where, thread_id=thread_id, checkpoint_id=checkpoint_id) from None
    return migrated, version


def load_thread(graph: Any, thread_id: str, location: str) -> LoadedThread | None:
    """Loads the latest checkpoint of `thread_id`.

    Returns:
        None when the thread has no checkpoint, or only an input checkpoint whose input
        was never saved (a process killed while creating it); otherwise the checked
        thread.

    Raises:
        RefusedError: The checkpoint cannot be read exactly as written (see module doc).
    """
    config = {"configurable": {"thread_id": thread_id}}
    return check_snapshot(graph, read_snapshot(graph, config, location, thread_id), thread_id,
                          location)


def check_snapshot(graph: Any, snapshot: Any, thread_id: str, location: str) -> LoadedThread | None:
    """Checks a latest state already read (`graph.get_state`) as `load_thread` checks what it reads.

    A step that has just read its thread's state after an invocation checks that,
    rather than loading it again (`graph.step.finished.remember_finished`).

    Returns:
        As `load_thread`.

    Raises:
        RefusedError: As `load_thread`.
    """
    config = {"configurable": {"thread_id": thread_id}}
    stored = snapshot.values
    if tuple(snapshot.next) == ("__start__",):
        stored = pending_input(graph, config, location, thread_id)
        if not stored:
            return None  # killed before LangGraph saved the input: creation never happened
    if not stored:
        if snapshot.config and snapshot.config.get("configurable", {}).get("checkpoint_id"):
            raise RefusedError("the checkpoint has no state", error_code=ErrorCode.DAMAGED,
                               location=location, thread_id=thread_id)
        return None
    try:
        values, version = check_values(stored, tuple(snapshot.next), location, thread_id)
    except PairingBrokenError as exc:
        raise _with_fork_point(exc, graph, config, location, thread_id) from None
    return LoadedThread(snapshot, values, version)


def _with_fork_point(exc: PairingBrokenError, graph: Any, config: dict[str, Any], location: str,
                     thread_id: str) -> PairingBrokenError:
    """`exc` naming the checkpoint to fork from: the newest older one whose pairing holds.

    Reads only; when no older checkpoint is intact (or the history cannot be read), the
    refusal says so instead.
    """
    fork = None
    try:
        for snapshot in history_page(graph, config, location, thread_id=thread_id)[1:]:
            values = snapshot.values
            if not values.get("messages") or not values.get("thread"):
                continue
            try:
                check_messages(values["messages"], values["thread"]["task"])
            except RefusedError:
                continue
            fork = snapshot.config["configurable"]["checkpoint_id"]
            break
    except (RefusedError, KeyError, TypeError, AttributeError):  # other damage: name none
        fork = None
    where = (f"; fork from checkpoint {fork}, the last one before the break" if fork
             else "; no earlier checkpoint of this thread has an intact conversation")
    refused = PairingBrokenError(exc.detail + where, error_code=ErrorCode.DAMAGED,
                                 location=exc.location, thread_id=exc.thread_id)
    return refused.at(checkpoint_id=exc.checkpoint_id)


def pending_input(graph: Any, config: dict[str, Any], where: str,
                  thread_id: str | None = None) -> dict[str, Any]:
    """The input of a thread whose process died right after LangGraph saved it.

    LangGraph saves a thread's input as pending writes of its first (`__start__`)
    checkpoint; state values appear only in the next checkpoint. Resuming with `None`
    applies them, so such a thread is checked by its pending input.

    Raises:
        RefusedError: The pending writes cannot be read (as `read_snapshot`).
    """
    with _refused_as(where, thread_id):
        saved = graph.checkpointer.get_tuple(config)
    return {channel: value for _, channel, value in (saved.pending_writes or [])
            if channel in ("thread", "messages", "progress")}
