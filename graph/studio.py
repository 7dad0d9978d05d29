"""The graph for LangGraph Studio (`langgraph dev`): a describable context, the ledger in GRAPH_DB.

`langgraph.json` names `graph.studio:studio_graph`. The server brings its own
checkpointer, so Studio's threads and checkpoints live in its storage, not in ours;
what keeps the budget is the attempt ledger in the database `GRAPH_DB` names (or the
context's `db`), reached by every node through the runtime context:

- the budget node counts each attempt there and reason claims it before its request
  leaves (a claim succeeds once per attempt number, so no fork, replay or state edit
  of Studio's checkpoints sends an uncounted request, and at the thread's maximum
  nothing is sent);
- one run sends at most one request: a second claim in one run (a run that overrode
  `interrupt_after`) is refused before anything is sent;
- a thread's ledger row is made when Studio creates the thread (node `create`), and
  a thread whose row is gone while its state counts attempts is refused, never given
  a fresh budget.

What does not hold here, because the server owns the checkpoints: fail-closed
loading of them, private file modes, our writer lock (the server runs one run per
thread at a time) and `graph.history`/`graph.verify`, which read our checkpoints.

Reviewing write calls: in Studio the thread pauses in the tools node with one `interrupt()` listing each write
call (id, tool, canonical arguments, hash), like the command line. The person resumes
it with `{"approve": [CALL_ID, ...], "reject": [CALL_ID, ...], "reason": "..."}`,
deciding every paused call at once. The decisions go through the same functions as
`graph.run --approve/--reject` (`graph.step.approvals`): recorded with the argument hash in
the context's database, approved writes applied there at most once in effect, before
the model sees their results. No model request is made by a resume.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from langchain_core.runnables import RunnableConfig
from langgraph.channels import EphemeralValue
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from typing_extensions import TypedDict

from graph.agent import build_graph, first_state
from graph.checkpoints.updates import check_edited
from graph.errors import ErrorCode, RefusedError, RunError, UsageError, error_line
from graph.settings import ThreadSpec, resolve_settings
from graph.step import models
from graph.step.approvals import apply_approved, decide
from graph.step.local_steps import needs_reopening
from graph.store import open_store
from graph.store.checks import check_tombstone, check_unstarted
from graph.text import without_key
from nodes.context import LedgerEntry
from nodes.request import PreparedRequests
from nodes.review import open_calls_of_last, pending_items, split_writes
from nodes.state import ThreadState, ThreadUpdate
from nodes.tools import answer_calls, tools_node

if TYPE_CHECKING:
    from graph.settings import Settings
    from graph.store.base import Store
    from nodes.context import ChatModel, NodeContext

__all__ = [
    "StudioContext",
    "StudioInput",
    "StudioLedger",
    "StudioLog",
    "create_node",
    "shown",
    "studio_graph",
    "studio_tools_node",
]


class StudioInput(TypedDict):
    """What starts a thread in Studio: its task and, optionally, its fixed limits."""

    task: str
    """The task text; on an existing thread it must equal the stored one."""
    max_attempts: NotRequired[int]
    """Model requests allowed (default 4), fixed at creation."""
    max_tokens: NotRequired[int]
    """Cap on the tokens the thread may use, fixed at creation."""
    workspace: NotRequired[str]
    """Folder of the read-only tools, fixed at creation."""
    allow_writes: NotRequired[str]
    """Folder of the write tools, fixed at creation; each write waits for a person."""
    reopen: NotRequired[Annotated[bool, EphemeralValue(bool)]]
    """True: put a thread stopped by a model error back to `ready` first (`graph.run
    --reopen`); this run then makes its next step. Read by this run alone: an ephemeral
    channel, gone after the step that reads it, so no later run reopens by itself."""


class _CreateState(StudioInput, total=False):
    """What the `create` node reads: the input, and the thread once it exists."""

    thread: dict[str, Any]
    progress: dict[str, Any]


@dataclass
class StudioContext:
    """The runtime context as Studio shows and sets it: plain fields only.

    The ledger, attempt log and model the nodes use (`nodes.context.NodeContext`) are
    resolved from these fields inside, per run; the database is opened for each use and
    closed after it, so every count, claim and log row is committed when it returns.

    Attributes:
        db: The database of the ledger: a SQLite path or `postgresql://` URL; None:
            `$GRAPH_DB`, else `./checkpoints.sqlite`.
        model_id: The model of a new thread (default `offline-demo`, or
            `$MANDAPI_MODEL_ID` with `live`); on an existing thread it must match.
        live: Allow paid MandAPI requests (needs `MANDAPI_API_KEY` in the server's
            environment).
    """

    db: str | None = None
    model_id: str | None = None
    live: bool = False

    @cached_property
    def settings(self) -> Settings:
        """The resolved settings (context field, then environment, then default)."""
        return resolve_settings(db=self.db, live=self.live, timeout_s=None)

    @contextmanager
    def store(self, *, create: bool = False) -> Iterator[Store]:
        """The ledger's database, open for one use."""
        with open_store(self.settings.db, create=create) as store:
            yield store

    def bind(self, thread: dict[str, Any], thread_id: str) -> None:
        """Records the thread a node runs for; refuses another model or thread id.

        Raises:
            RefusedError: `identity_mismatch`.
        """
        model = self.model_id or self.settings.env_model
        if thread["thread_id"] != thread_id or model not in (None, thread["model"]):
            raise RefusedError(f"the thread uses model {thread['model']!r}; the context "
                               f"names {model!r}", error_code=ErrorCode.IDENTITY_MISMATCH,
                               thread_id=thread_id)
        self.__dict__["_thread"] = (thread_id, thread["model"])

    def _bound(self) -> tuple[str, str]:
        bound = self.__dict__.get("_thread")
        if bound is None:  # a bug: every node is wrapped by `_binding`
            raise RuntimeError("no thread is bound to this Studio context")
        return bound

    @property
    def thread_id(self) -> str:
        """The Studio thread being advanced (its id is the ledger's key)."""
        return self._bound()[0]

    @cached_property
    def ledger(self) -> StudioLedger:
        """The ledger in the context's database, one request per run."""
        return StudioLedger(self)

    @cached_property
    def log(self) -> StudioLog:
        """The attempt log in the context's database."""
        return StudioLog(self)

    @cached_property
    def model(self) -> ChatModel:
        """The thread's own model (`graph.step.models.make_model`)."""
        return models.make_model(self._bound()[1], self.settings)  # looked up per use: tests swap it

    @property
    def charge(self) -> str | None:
        """No shared request cap in Studio."""
        return None

    @cached_property
    def prepared(self) -> PreparedRequests:
        """The request budget prepared, for reason in the same run."""
        return PreparedRequests()


class StudioLedger:
    """The attempt ledger of a Studio run: our ledger, opened per call, one claim per run."""

    def __init__(self, context: StudioContext) -> None:
        self._context = context
        self._claims = 0

    def count(self, thread_id: str) -> LedgerEntry:
        """`SqlLedger.count`, committed when it returns.

        Raises:
            RefusedError: `damaged`: the thread has no ledger row (its budget is unknown).
        """
        with self._context.store() as store:
            try:
                return store.ledger.count(thread_id)
            except LookupError:
                raise RefusedError("the thread has no row in the attempt ledger of "
                                   f"{store.location}; its budget is unknown, so nothing is "
                                   "sent", error_code=ErrorCode.DAMAGED,
                                   thread_id=thread_id) from None

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """`SqlLedger.claim` (made durable before it returns); a run's second claim is refused.

        Raises:
            UsageError: This run already claimed an attempt: one run sends at most one
                request; the attempt stays counted for the next run.
        """
        if self._claims:
            raise UsageError("one model request per run: this run already sent one (did it "
                             "override interrupt_after?); start another run to continue",
                             thread_id=thread_id)
        with self._context.store() as store:
            claimed = store.ledger.claim(thread_id, attempt, charge)
        self._claims += claimed
        return claimed


class StudioLog:
    """The attempt log of a Studio run, opened per row."""

    def __init__(self, context: StudioContext) -> None:
        self._context = context

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """`SqlAttemptLog.record`, committed when it returns."""
        with self._context.store() as store:
            store.log.record(thread_id, attempt, kind, payload)

    def used_tokens(self, thread_id: str) -> int:
        """`SqlAttemptLog.used_tokens`."""
        with self._context.store() as store:
            return store.log.used_tokens(thread_id)


_SHOWN_KINDS: dict[type[RunError], type[RunError]] = {}


def _shown_kind(kind: type[RunError]) -> type[RunError]:
    """`kind`, also a `RuntimeError`, its text `error (CODE): MESSAGE` (see `shown`); made once."""
    def text(error: RunError) -> str:
        return without_key(error_line(error.error_code, error.message))  # the server logs it too (I9)

    if kind not in _SHOWN_KINDS:
        _SHOWN_KINDS[kind] = type(kind.__name__, (kind, RuntimeError), {
            "__module__": kind.__module__, "__qualname__": kind.__qualname__, "__str__": text})
    return _SHOWN_KINDS[kind]


def shown(error: RunError) -> RunError:
    """`error` as the Studio server shows a run's error: its reason, not "An internal error occurred".

    `langgraph dev` (langgraph-api's `serde.default`) shows the message of a run's
    exception only for some built-in kinds (`ValueError`, `RuntimeError`, ...); any
    other reads "An internal error occurred", so a person could not tell a refused
    run (another model, a damaged ledger, a second request in one run) from a bug.
    The copy is still of its class (`RefusedError`, `UsageError`, ...: whoever catches
    those still does) with the same fields, and also a `RuntimeError` whose text is
    `error (CODE): MESSAGE`, the line the command line prints (the API key never in it).
    """
    if isinstance(error, RuntimeError):  # shown already
        return error
    kind = _shown_kind(type(error))
    copy = kind.__new__(kind)
    copy.__dict__.update(error.__dict__)
    copy.args = error.args
    return copy


def _showing_refusals(node: Callable[..., Any]) -> Callable[..., Any]:
    """`node`, raising each refusal (`RunError`) as `shown`."""
    @functools.wraps(node)
    def showing(*args: Any, **kwargs: Any) -> Any:  # LangGraph passes what node's signature names
        try:
            return node(*args, **kwargs)
        except RunError as exc:
            raise shown(exc).with_traceback(exc.__traceback__) from None

    return showing


def _binding(node: Callable[..., Any]
             ) -> Callable[[ThreadState, Runtime[StudioContext], RunnableConfig], Any]:
    """`node`, first binding the Studio context to the thread it runs for."""
    def bound(state: ThreadState, runtime: Runtime[StudioContext], config: RunnableConfig) -> Any:
        thread_id = config["configurable"]["thread_id"]
        check_edited(state["messages"], state["thread"]["task"], thread_id)
        runtime.context.bind(dict(state["thread"]), thread_id)
        return node(state, runtime)  # the context is a NodeContext, resolved

    bound.__name__ = getattr(node, "__name__", "node")
    return _showing_refusals(bound)


def create_node(state: _CreateState, runtime: Runtime[StudioContext],
                config: RunnableConfig) -> dict[str, Any]:
    """Creates the thread from Studio's input: identity, first message, ledger row.

    On an existing thread it changes nothing (a thread is never restarted); a different
    task is refused. With `"reopen": true` in the input, a thread stopped by a model error
    is put back to `ready` first, its attempts still counted (`graph.step.local_steps.
    needs_reopening`); budget then counts the next attempt as usual.

    Raises:
        RefusedError: `identity_mismatch` (another task); `damaged` (the ledger already
            counts attempts for this id: starting over would give it a fresh budget);
            `pruned`.
        UsageError: An invalid task or limit; a paid model without `live`; `reopen` of a
            thread not stopped by a model error.
    """
    thread_id = config["configurable"]["thread_id"]
    context = runtime.context
    if state.get("thread"):
        if state.get("task") not in (None, state["thread"]["task"]):
            raise RefusedError("created with a different task", thread_id=thread_id,
                               error_code=ErrorCode.IDENTITY_MISMATCH)
        if state.get("reopen") and needs_reopening(state["progress"], thread_id,
                                                   asked='the input "reopen": true'):
            with context.store() as store:
                store.ledger.touch(thread_id)
            return {"progress": {"status": "ready", "stop_reason": None}}
        return {}
    spec = ThreadSpec(thread_id=thread_id, task=state.get("task"), model=context.model_id,
                      max_attempts=state.get("max_attempts"), max_tokens=state.get("max_tokens"),
                      workspace=state.get("workspace"), allow_writes=state.get("allow_writes"),
                      source="line")
    created = first_state(spec.new_thread(context.settings),
                          datetime.now(UTC).isoformat(timespec="seconds"))
    with context.store(create=True) as store:
        check_tombstone(store, thread_id, task=spec.task, restart=False)
        check_unstarted(store.ledger.read(thread_id), store.location, thread_id)
        store.ledger.create(thread_id, created["thread"]["max_attempts"])
    return dict(created)


def studio_graph() -> Any:
    """The graph `langgraph dev` serves: create → budget → reason → tools, no checkpointer.

    The server compiles nothing itself and supplies its own checkpointer. Each run
    gets a `StudioContext` from its `context` (plain fields), which `Studio`'s
    assistant form shows from the graph's context schema.
    """
    def wrap(node: Callable[..., Any]) -> Callable[..., Any]:
        return _binding(studio_tools_node if node is tools_node else node)

    return build_graph(None, context_schema=StudioContext, input_schema=StudioInput,
                       first=("create", _showing_refusals(create_node)), wrap=wrap)


def _check_protocol(context: StudioContext) -> NodeContext:
    return context  # mypy checks that a StudioContext is what nodes read


def _decisions(answer: Any, ids: list[str]) -> tuple[list[str], list[str], str | None] | str:
    """`(approve, reject, reason)` deciding every call in `ids`, or what is wrong."""
    if not isinstance(answer, dict) or set(answer) - {"approve", "reject", "reason"}:
        return 'resume with {"approve": [CALL_ID, ...], "reject": [CALL_ID, ...], "reason": "..."}'
    approve, reject = list(answer.get("approve") or []), list(answer.get("reject") or [])
    reason = answer.get("reason")
    if not all(isinstance(i, str) for i in approve + reject) or not isinstance(reason, str | None):
        return "approve and reject list call ids; reason is text"
    if sorted(approve + reject) != sorted(ids):
        return f"decide every paused call exactly once: {', '.join(ids)}"
    return approve, reject, reason


def studio_tools_node(state: ThreadState, runtime: Runtime[StudioContext]) -> ThreadUpdate:
    """The tools node of the Studio graph: write calls are decided by a resume value.

    Without write calls to review it is `nodes.tools.tools_node`.

    A resume value that does not decide exactly the paused calls is not an error: the
    node pauses again with the same calls and an `error` saying what was wrong.

    Raises:
        RefusedError: `tampered`, `conflict` (as `graph.step.approvals`).
    """
    ctx = runtime.context
    calls = open_calls_of_last(state["messages"])
    writes, reviewed = split_writes(state["thread"].get("allow_writes"), calls)
    if not writes:
        return tools_node(state, runtime)  # type: ignore[arg-type]  # a NodeContext
    pending = pending_items(writes)
    ids = [p["tool_call_id"] for p in pending]
    request = {"kind": "approval", "pending": pending,
               "resume_with": {"approve": ids, "reject": [], "reason": None}}
    decided = _decisions(interrupt(request), ids)
    while isinstance(decided, str):  # asked again, saying why: nothing was decided
        decided = _decisions(interrupt({**request, "error": decided}), ids)
    approve, reject, reason = decided
    values: dict[str, Any] = dict(state)
    with ctx.store() as store:
        done = store.approvals.turn(ctx.thread_id, int(state["progress"]["attempts"]))
        decisions = done if set(ids) <= set(done) else decide(  # a rerun after a crash
            store, ctx.thread_id, pending, values, [i for i in approve if i not in done],
            [i for i in reject if i not in done], reason)
        decisions = apply_approved(store, ctx.thread_id, values, decisions)
    reviewed.update({cid: str(decisions[cid]["result"]) for cid in ids})
    return answer_calls(state, ctx, reviewed)  # type: ignore[arg-type]  # a NodeContext
