"""Advances one thread: the shared function behind `graph.run` (and later batch runs).

Order of checks, so that a refusal changes nothing: the writer lock (busy, exit 5),
then the stored checkpoint and ledger (refused, exit 4), then identity (exit 4) and
whether paid requests are allowed (exit 2); only then is the graph invoked, always
with `durability="sync"` so each node's checkpoint is on disk before the next node
starts, and with `None` input for an existing thread so it is never restarted
(INVARIANTS I7).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langgraph.types import Command

from graph.approvals import apply_approved, decide, pending_review
from graph.errors import RefusedError, UsageError
from graph.exitcodes import ExitCode
from graph.loading import load_thread
from graph.models import make_model
from graph.outcome import Outcome
from graph.repair import repair_routing, unrouted_output
from graph.settings import Settings, model_for_new_thread
from graph.state import initial_state
from nodes.context import ChatModel, NoModel, StepContext
from nodes.pairing import UnsafeHistoryError
from nodes.review import needs_review
from nodes.state import DEFAULT_CONTEXT_TOKENS, DEFAULT_MAX_ATTEMPTS, FINAL_STATUSES, SCHEMA_VERSION


@dataclass(frozen=True)
class StepRequest:
    """What the caller asks for.

    Attributes:
        thread_id: The thread to advance (already validated).
        task: Task text; required to create a thread, must match when resuming.
        model: `--model`; must match the stored model when resuming.
        once: Stop after one graph invocation (at most one model request).
        max_attempts: The maximum for a new thread (attempts).
        cancel: Mark the thread `cancelled` instead of advancing it.
        restart_pruned: Start a pruned thread anew, with a fresh budget, on purpose.
        approve: Call ids to approve (`--approve`).
        reject: Call ids to reject (`--reject`), with `reason`.
        reason: Why the rejected calls were rejected (`--reason`).
        allow_writes: `--allow-writes` (a folder path), fixed at creation.
        workspace: `--workspace` (a folder path), fixed at creation.
        max_tokens: `--max-tokens`, fixed at creation.
        context_tokens: `--context-tokens`, fixed at creation.

    `max_attempts`, `workspace`, `max_tokens` and `context_tokens` are None when not
    given: a new thread takes the defaults, a resumed one its stored values; given
    and different from the stored value, they are refused (exit 4).
    """

    thread_id: str
    task: str | None = None
    model: str | None = None
    once: bool = True
    max_attempts: int | None = None
    cancel: bool = False
    restart_pruned: bool = False
    workspace: str | None = None
    max_tokens: int | None = None
    context_tokens: int | None = None
    approve: tuple[str, ...] = ()
    reject: tuple[str, ...] = ()
    reason: str | None = None
    allow_writes: str | None = None


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _workspace_path(folder: str | None) -> str | None:
    """The absolute path of an existing workspace folder, or None.

    Raises:
        UsageError: `no_such_workspace` when the folder is missing here (exit 2,
            nothing counted): a step reads the folder on the machine that runs it.
    """
    if folder is None:
        return None
    try:
        path = Path(folder).expanduser().resolve()
        found = path.is_dir()
    except (OSError, ValueError, RuntimeError):  # too long, a NUL byte, a symlink loop
        found = False
    if not found:
        raise UsageError(f"workspace folder {folder} does not exist on this machine",
                         error_code="no_such_workspace")
    return str(path)


def _check_identity(values: dict[str, Any], request: StepRequest, settings: Settings) -> None:
    thread = values["thread"]
    where = f"thread {request.thread_id!r}"
    fixed = (("--max-attempts", request.max_attempts, thread["max_attempts"]),
             ("--max-tokens", request.max_tokens, thread["max_tokens"]),
             ("--context-tokens", request.context_tokens, thread["context_tokens"]),
             ("--workspace", _workspace_path(request.workspace) if request.workspace else None,
              thread["workspace"]),
             ("--allow-writes", _workspace_path(request.allow_writes) if request.allow_writes
              else None, thread["allow_writes"]))
    for flag, given, stored in fixed:
        if given is not None and given != stored:
            raise RefusedError(f"{where} was created with {flag} {stored}; it is fixed at "
                               f"creation and cannot become {given}",
                               error_code="identity_mismatch")
    if request.task is not None and request.task != thread["task"]:
        raise RefusedError(
            f"{where} was created with a different task; omit --task to resume it",
            error_code="identity_mismatch",
        )
    requested = (("--model", request.model),) if request.model is not None else (
        ("MANDAPI_MODEL_ID", settings.env_model),)
    for source, model in requested:
        if model is not None and model != thread["model"]:
            raise RefusedError(
                f"{where} uses model {thread['model']!r}, but {source} is {model!r}",
                error_code="identity_mismatch",
            )


_WRITER_OF_NEXT = {("tools",): "reason", ("reason",): "budget", ("budget",): "tools"}
"""For a checkpoint's next node, a node whose edges lead there (for `update_state`)."""


def check_ledger(entry: Any, values: dict[str, Any], thread_id: str, location: str,
                 log_rows: list[dict[str, Any]]) -> None:
    """Cross-checks a thread's ledger row against its checkpoint and attempt log.

    Raises:
        RefusedError: `damaged` when the row is missing, has another maximum, or counts
            fewer attempts, or fewer sent attempts, than the thread already shows.
    """
    where = f"{location}: thread {thread_id!r}"
    if entry is None:
        raise RefusedError(f"{where} has no attempt-ledger row; refusing to resume without "
                           "its counted attempts", error_code="damaged")
    if entry.max_attempts != values["thread"]["max_attempts"]:
        raise RefusedError(f"{where}: the ledger's maximum ({entry.max_attempts}) differs from "
                           f"the checkpoint's ({values['thread']['max_attempts']})",
                           error_code="damaged")
    if entry.attempts < values["progress"]["attempts"]:
        raise RefusedError(f"{where}: the ledger counts {entry.attempts} attempt(s), fewer than "
                           f"the checkpoint's {values['progress']['attempts']}",
                           error_code="damaged")
    # Requests already made that the ledger must have claimed: the mirrored count (less
    # one counted-but-unsent attempt), every assistant message, every logged attempt.
    replies = sum(1 for m in values["messages"] if m["role"] == "assistant")
    logged = max((r["attempt"] for r in log_rows if r["kind"] == "reason"), default=0)
    needed = max(values["progress"]["attempts"] - 1, replies, logged)
    if entry.claimed < needed:
        raise RefusedError(f"{where}: the ledger has {entry.claimed} sent attempt(s), but the "
                           f"thread already shows {needed}; refusing to send uncounted requests",
                           error_code="damaged")


def _store_migrated(graph: Any, config: dict[str, Any], loaded: Any) -> None:
    """Writes the migrated `thread` channel as the thread's next checkpoint."""
    writer = _WRITER_OF_NEXT.get(tuple(loaded.snapshot.next))
    if writer is not None:  # at __start__ the stored input is migrated again next load
        graph.update_state(config, {"thread": loaded.values["thread"]}, as_node=writer)


@contextmanager
def _storage_damage_refused(location: str) -> Iterator[None]:
    """Reports SQLite's own corruption errors (malformed pages) as refusals (exit 4)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise
        raise RefusedError(f"{location}: the database is damaged ({exc})",
                           error_code="damaged") from None


def _check_tombstone(store: Any, request: StepRequest) -> None:
    """Refuses a pruned thread (exit 4, `pruned`) unless it is restarted on purpose."""
    tombstone = store.tombstones.get(request.thread_id)
    if tombstone is None:
        return
    if not request.restart_pruned:
        raise RefusedError(
            f"thread {request.thread_id!r} was pruned on {tombstone.pruned_at} (status "
            f"{tombstone.final_status}); --restart-pruned starts it anew with a fresh budget",
            error_code="pruned")
    if request.task is None:
        raise UsageError("--restart-pruned needs --task: the pruned thread's task is gone")
    store.checkpointer.delete_thread(request.thread_id)  # leftovers of an interrupted prune
    store.ledger.delete(request.thread_id)
    store.tombstones.remove(request.thread_id)
    print(f"note: starting pruned thread {request.thread_id!r} anew with a fresh budget",
          file=sys.stderr)


def _cancel(graph: Any, config: dict[str, Any], store: Any, loaded: Any, thread_id: str) -> Outcome:
    """Marks a thread `cancelled`: no request is ever made for it again."""
    if loaded is None:
        raise RefusedError(f"no such thread {thread_id!r} in {store.location}",
                           error_code="no_such_thread")
    values = loaded.values
    if values["progress"]["status"] in FINAL_STATUSES:
        outcome = Outcome.from_state(thread_id, values, loaded.snapshot.next)
        if values["progress"]["status"] == "cancelled":
            outcome.exit_code, outcome.error, outcome.error_code = ExitCode.OK, None, None
        return outcome
    # Written as if by reason, whose router sends a cancelled thread to END from any point.
    graph.update_state(config, {"progress": {"status": "cancelled", "stop_reason": "cancelled"}},
                       as_node="reason")
    store.ledger.touch(thread_id)
    snapshot = graph.get_state(config)
    outcome = Outcome.from_state(thread_id, snapshot.values, snapshot.next)
    outcome.exit_code, outcome.error, outcome.error_code = ExitCode.OK, None, None
    return outcome


def _review(graph: Any, config: dict[str, Any], store: Any, loaded: Any, request: StepRequest,
            pending: list[dict[str, Any]]) -> Outcome:
    """Records decisions; once every paused write is decided, applies and resumes (no request)."""
    thread_id = request.thread_id
    decisions = decide(store, thread_id, pending, loaded.values, list(request.approve),
                       list(request.reject), request.reason)
    if not all(p["tool_call_id"] in decisions for p in pending):
        return Outcome.waiting(thread_id, loaded.values, pending, decisions)
    decisions = apply_approved(store, thread_id, loaded.values, decisions)
    payload = {"decisions": [{"tool_call_id": p["tool_call_id"], "sha256": p["sha256"],
                              "decision": decisions[p["tool_call_id"]]["decision"],
                              "result": decisions[p["tool_call_id"]]["result"]} for p in pending]}
    ctx = StepContext(thread_id, store.ledger, NoModel(), store.log)
    # Resume only the review interrupt found above, and stop before budget: an approval
    # invocation is local work and never makes a model request.
    graph.invoke(Command(resume=payload), config, context=ctx, durability="sync",
                 interrupt_before=["budget"])
    snapshot = graph.get_state(config)
    return Outcome.from_state(thread_id, snapshot.values, snapshot.next)


def advance(
    store: Any,
    request: StepRequest,
    settings: Settings,
    *,
    model_factory: Callable[[str, Settings], ChatModel] = make_model,
    now: Callable[[], str] = _utc_now,
    charge: str | None = None,
) -> Outcome:
    """Creates or resumes a thread and advances it by one or more graph invocations.

    Each invocation makes at most one model request: LangGraph runs budget → reason
    and stops after reason (`interrupt_after`). Without `request.once` it invokes
    again until the thread is done, exhausted or a request fails.

    Args:
        store: An open store (`graph.storage.open_store`).
        request: Thread, identity and mode.
        settings: Resolved settings.
        model_factory: Builds the model for the thread's model id (tests inject).
        now: Returns the current UTC time as ISO 8601 text.
        charge: A shared request cap (`request_caps`) charged with every request.

    Returns:
        The outcome; `exit_code` is 0 (ran or done), 3 (exhausted) or 6 (the
        request failed; the attempt stays counted).

    Raises:
        graph.errors.BusyError: Another process holds the thread (exit 5).
        graph.errors.RefusedError: Stored data refused or identity mismatch (exit 4).
        graph.errors.UsageError: A paid model without `--live` (exit 2).
    """
    thread_id = request.thread_id
    config = {"configurable": {"thread_id": thread_id}}
    from langsmith import tracing_context

    # Never trace: LangSmith's environment switches would upload tasks and conversations.
    with (tracing_context(enabled=False), store.locks.hold(thread_id),
          _storage_damage_refused(store.location)):
        _check_tombstone(store, request)
        graph = store.graph
        loaded = load_thread(graph, thread_id, store.location)
        entry = store.ledger.read(thread_id)
        if request.cancel:
            if loaded is not None:  # flags given with --cancel must name this thread
                _check_identity(loaded.values, request, replace(settings, env_model=None))
            return _cancel(graph, config, store, loaded, thread_id)
        if loaded is None:
            if entry is not None and entry.attempts > 0:
                raise RefusedError(
                    f"{store.location}: thread {thread_id!r} has {entry.attempts} counted "
                    "attempt(s) in the ledger but no checkpoint; refusing to start it over",
                    error_code="damaged",
                )
            if request.task is None:
                raise RefusedError(
                    f"no such thread {thread_id!r} in {store.location}; pass --task to create it",
                    error_code="no_such_thread",
                )
            if request.approve or request.reject:
                raise UsageError(f"thread {thread_id!r} does not exist, so it waits for no approval")
            model_id = model_for_new_thread(request.model, settings)
            workspace = _workspace_path(request.workspace)
            allow_writes = _workspace_path(request.allow_writes)
            model = model_factory(model_id, settings)
            max_attempts = request.max_attempts or DEFAULT_MAX_ATTEMPTS
            store.ledger.create(thread_id, max_attempts)
            graph_input: Any = initial_state(
                thread_id=thread_id,
                task=request.task,
                model=model_id,
                max_attempts=max_attempts,
                created_at=now(),
                workspace=workspace,
                max_tokens=request.max_tokens,
                context_tokens=request.context_tokens or DEFAULT_CONTEXT_TOKENS,
                allow_writes=allow_writes,
            )
        else:
            values = loaded.values
            _check_identity(values, request, settings)
            max_attempts = values["thread"]["max_attempts"]
            check_ledger(entry, values, thread_id, store.location, store.log.rows(thread_id))
            store.approvals.rows(thread_id)  # read with exact type checks, like every table
            pending = pending_review(loaded.snapshot)
            if pending is not None:
                return _review(graph, config, store, loaded, request, pending)
            if request.approve or request.reject:
                raise UsageError(f"thread {thread_id!r} is not waiting for approval")
            if values["progress"]["status"] in FINAL_STATUSES:
                return Outcome.from_state(thread_id, values, loaded.snapshot.next)
            _workspace_path(values["thread"]["workspace"])
            model = model_factory(values["thread"]["model"], settings)
            if loaded.stored_version != SCHEMA_VERSION:
                _store_migrated(graph, config, loaded)
            graph_input = None
        try:
            ctx = StepContext(thread_id, store.ledger, model, store.log, charge)
            return _invoke_steps(graph, config, store, ctx, graph_input, once=request.once,
                                 max_attempts=max_attempts)
        finally:
            close = getattr(model, "close", None)
            if close is not None:
                close()


def _step_failed(graph: Any, config: dict[str, Any], store: Any, thread_id: str,
                 exc: Exception) -> Outcome:
    """Routes a step whose node stored its output but failed after it, and reports that.

    The output (a paid reply included) is kept and routed as its node's router says,
    so the next run continues from it; this run exits 6 with `step_failed`.
    """
    repair_routing(graph, config, f"{store.location}: thread {thread_id!r}")
    snapshot = graph.get_state(config)
    outcome = Outcome.from_state(thread_id, snapshot.values, snapshot.next)
    outcome.error = (f"the step failed after its output was stored ({type(exc).__name__}: "
                     f"{exc}); the output is kept and the next run continues from it")
    outcome.error_code = "step_failed"
    if outcome.exit_code == ExitCode.OK:
        outcome.exit_code = ExitCode.REQUEST_FAILED
    return outcome


def _route_before_resume(graph: Any, config: dict[str, Any], store: Any, thread_id: str) -> None:
    """Makes sure a resumed thread goes on at a node that cannot send uncounted requests."""
    repair_routing(graph, config, f"{store.location}: thread {thread_id!r}")
    snapshot = graph.get_state(config)
    if snapshot.next == ("reason",) and not store.ledger.read(thread_id).unclaimed:
        # LangGraph would re-run reason (it raised or was killed) without passing
        # through budget. Its attempt is already claimed, so route the thread
        # back to budget to count a new one before anything is sent.
        graph.update_state(config, {"progress": {"outcome": "not_sent"}}, as_node="reason")


def _invoke_steps(
    graph: Any,
    config: dict[str, Any],
    store: Any,
    ctx: StepContext,
    graph_input: Any,
    *,
    once: bool,
    max_attempts: int,
) -> Outcome:
    thread_id = ctx.thread_id
    for _ in range(2 * max_attempts + 2):
        if graph_input is None:
            _route_before_resume(graph, config, store, thread_id)
        claimed_before = store.ledger.read(thread_id).claimed if graph_input is None else 0
        try:
            graph.invoke(graph_input, config, context=ctx, durability="sync")
        except UnsafeHistoryError as exc:
            raise RefusedError(f"{store.location}: thread {thread_id!r}: the conversation "
                               f"cannot be sent: {exc}", error_code="damaged") from None
        except Exception as exc:
            if unrouted_output(graph.get_state(config)) is None:
                raise
            return _step_failed(graph, config, store, thread_id, exc)
        graph_input = None
        repair_routing(graph, config, f"{store.location}: thread {thread_id!r}")
        snapshot = graph.get_state(config)
        if tuple(snapshot.next) == ("tools",) and needs_review(snapshot.values):
            # Say it now: run tools up to its review pause (no request; budget never runs).
            graph.invoke(None, config, context=ctx, durability="sync", interrupt_before=["budget"])
            snapshot = graph.get_state(config)
        pending = pending_review(snapshot)
        if pending is not None:
            return Outcome.waiting(thread_id, snapshot.values, pending, {})
        outcome = Outcome.from_state(thread_id, snapshot.values, snapshot.next)
        progress = snapshot.values["progress"]
        sent = store.ledger.read(thread_id).claimed > claimed_before
        if not sent and progress.get("outcome") == "not_sent":
            # The counted attempt could not be claimed (a full request cap): invoking
            # again would only go round budget and reason without sending.
            outcome.held_back = True
            return outcome
        if sent and progress.get("outcome") == "error":
            error = progress["last_error"]
            outcome.error, outcome.error_code = error["message"], error["error_code"]
            if outcome.status != "exhausted":
                outcome.exit_code = ExitCode.REQUEST_FAILED
            return outcome
        if once or outcome.status in FINAL_STATUSES:
            return outcome
    return outcome
