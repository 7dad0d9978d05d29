"""`graph.api.Database.graph`: the compiled graph a step invokes, its invocations checked first.

A runtime context (`Database.invocation(thread_id)`) carries one thread's ledger and
attempt log, bound to that database and to its `with` block (`nodes.context.Lease`).
Invoking another thread or database with it, after its block, or invoking without one,
would count attempts against the wrong thread or none, or without the thread's lock:
`CheckedGraph` refuses each before LangGraph writes anything (not even the input
checkpoint), and the budget node refuses them again for any other caller
(`nodes.budget.check_invocation`). Each check raises the project's typed errors
(`graph.errors`) before LangGraph reads or writes a checkpoint, so a refused call changes
nothing stored:

- the arguments' shapes: `config` a dict (a batch: a list or tuple of them) whose
  `configurable` is a dict, `context` a `nodes.context.StepContext` (`_check_config`,
  `_check_call`);
- the context itself: made by `Database.invocation` of this database (its lease's
  saver is the graph's checkpointer), its `with` block not yet ended (the thread's
  lock still held: INVARIANTS I8), and for the invoked thread (I1, I2);
- the checkpoint a fork starts from: never the thread's input checkpoint (`_check_fork`);
- async methods on a saver that has none (`_check_async`).

`refusal` turns the budget node's own refusal into the `RunError` a step reports
(`graph.step.invocation`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from langgraph.errors import EmptyInputError

from graph.checkpoints.updates import LIBRARY_ERRORS, check_updates, update_pairs
from graph.errors import ErrorCode, RefusedError, RunError, UsageError
from graph.settings import check_thread_id, shown
from nodes.context import StepContext
from nodes.errors import InvocationErrorCode, InvocationRefusedError

__all__ = ["CheckedGraph", "refusal"]


def refusal(exc: InvocationRefusedError, location: str | None = None) -> RunError:
    """The `RunError` for the budget node's refusal of an invocation."""
    if exc.error_code == InvocationErrorCode.USAGE:
        return UsageError(exc.message, location=location)
    return RefusedError(exc.message, error_code=ErrorCode.IDENTITY_MISMATCH,
                        location=location, thread_id=exc.thread_id)


def _converted(exc: Exception, location: str) -> RunError:
    """The `RunError` for what LangGraph or the budget node raised while running."""
    if isinstance(exc, InvocationRefusedError):
        return refusal(exc, location)
    return UsageError(f"nothing to run from this checkpoint ({exc}): give an input, or "
                      "resume the thread with Database.run", location=location)


_REFUSALS = (InvocationRefusedError, EmptyInputError)
"""What a run raises that `_converted` turns into a `RunError`."""


def _each_config(config: Any) -> list[Any]:
    """The configs of a batch: `config` itself, or each of a list of them."""
    return list(config) if isinstance(config, (list, tuple)) else [config]


class CheckedGraph:
    """The compiled graph with every invocation checked first (see the module doc).

    Checked before anything runs, and the budget node's own refusal raised as a
    `RunError`: `invoke`, `stream`, `batch`, `batch_as_completed`, `stream_events`,
    `astream_log`, `transform` and their async forms (`a...`); `with_config` and `copy`
    return a checked graph too. A batch is refused whole when any of its configs is
    refused. A fork from a thread's input checkpoint is refused (`_check_fork`).
    `update_state`, `bulk_update_state` and their async forms are the graph's own,
    their configs checked first: they run no node (only a node's channel writers), so
    they send nothing and count nothing, and the next invocation of the thread is
    checked and budgeted like any other; a `messages` update is checked first as a
    load would check the result (`graph.checkpoints.updates`): one that would leave the
    thread unloadable is a `UsageError`, nothing written. Unless the store says its
    checkpointer is async (`graph.store.base.Store.supports_async`; no backend here is)
    each async method is refused (`_check_async`). Everything else (`get_state`,
    `get_graph`, ...) is the graph's own.

    Args:
        graph: The compiled graph (`graph.agent.build_graph`).
        location: The database, named in refusals.
        supports_async: The store's `supports_async`: whether async methods may run.
        after_update: Called after each `update_state` / `bulk_update_state` that wrote,
            with the config of the new checkpoint (`graph.api` gives a finished thread
            its Redis TTL back there: `Database._settle_ttl`).
    """

    def __init__(self, graph: Any, location: str, *, supports_async: bool = False,
                 after_update: Callable[[Any], None] | None = None) -> None:
        self._graph = graph
        self._location = location
        self._async = supports_async
        self._after_update = after_update

    def _updated(self, config: Any, result: Any) -> Any:
        """Runs `after_update` with the config an update returned (its new checkpoint)."""
        if self._after_update is not None:
            self._after_update(result if isinstance(result, dict) else config)
        return result

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._graph, name)
        if name not in ("aget_state", "aget_state_history"):
            return found

        def checked(*args: Any, **kwargs: Any) -> Any:
            _check_async(self._async, name, self._location)
            return found(*args, **kwargs)

        return checked

    def _check(self, config: Any, kwargs: dict[str, Any], method: str = "") -> None:
        saver = self._graph.checkpointer
        for one in _each_config(config):
            _check_call(one, kwargs.get("context"), saver, self._location)
        if method.startswith("a"):
            _check_async(self._async, method, self._location)
        for one in _each_config(config):
            _check_fork(one, saver, self._location)
            _check_fork_keeps_answer(one, kwargs["context"], saver, self._location)

    def _check_single(self, config: Any, kwargs: dict[str, Any], method: str) -> None:
        """`_check` for a method taking one config (a list is refused, not batched)."""
        _check_config(config, self._location)
        self._check(config, kwargs, method)

    def _refused(self, exc: Exception) -> RunError:
        return _converted(exc, self._location)

    def _results(self, results: list[Any]) -> list[Any]:
        """A batch's results with the budget node's refusals (`return_exceptions`) converted."""
        return [self._refused(r) if isinstance(r, _REFUSALS) else r for r in results]

    def _iterate(self, parts: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from parts
        except _REFUSALS as exc:
            raise self._refused(exc) from None

    async def _aiterate(self, parts: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for part in parts:
                yield part
        except _REFUSALS as exc:
            raise self._refused(exc) from None

    def _wrapped(self, result: Any) -> Any:
        """A stream with refusals converted; another result (an events run object) as is."""
        if hasattr(result, "__anext__"):
            return self._aiterate(result)
        return self._iterate(result) if hasattr(result, "__next__") else result

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.invoke`, refused first as `_check_call` says."""
        self._check_single(config, kwargs, "invoke")
        try:
            return self._graph.invoke(input, config, **kwargs)
        except _REFUSALS as exc:
            raise self._refused(exc) from None

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.ainvoke`, refused first as `_check_call` says."""
        self._check_single(config, kwargs, "ainvoke")
        try:
            return await self._graph.ainvoke(input, config, **kwargs)
        except _REFUSALS as exc:
            raise self._refused(exc) from None

    def batch(self, inputs: Any, config: Any = None, **kwargs: Any) -> list[Any]:
        """`CompiledStateGraph.batch`: every config checked before any input runs."""
        self._check(config, kwargs, "batch")
        try:
            return self._results(self._graph.batch(inputs, config, **kwargs))
        except _REFUSALS as exc:
            raise self._refused(exc) from None

    async def abatch(self, inputs: Any, config: Any = None, **kwargs: Any) -> list[Any]:
        """`CompiledStateGraph.abatch`: every config checked before any input runs."""
        self._check(config, kwargs, "abatch")
        try:
            return self._results(await self._graph.abatch(inputs, config, **kwargs))
        except _REFUSALS as exc:
            raise self._refused(exc) from None

    def update_state(self, config: Any, values: Any, as_node: Any = None, **kwargs: Any) -> Any:
        """`CompiledStateGraph.update_state`: its config checked, never the input checkpoint."""
        _check_config(config, self._location, thread_needed=True)
        _check_fork(config, self._graph.checkpointer, self._location)
        check_updates(self._graph, config, [(values, as_node)])
        try:
            result = self._graph.update_state(config, values, as_node, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise UsageError(f"update_state: {exc}; nothing was written") from None
        return self._updated(config, result)

    async def aupdate_state(self, config: Any, values: Any, as_node: Any = None,
                            **kwargs: Any) -> Any:
        """`CompiledStateGraph.aupdate_state`, checked as `update_state`."""
        _check_config(config, self._location, thread_needed=True)
        _check_async(self._async, "aupdate_state", self._location)
        _check_fork(config, self._graph.checkpointer, self._location)
        check_updates(self._graph, config, [(values, as_node)])
        try:
            return await self._graph.aupdate_state(config, values, as_node, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise UsageError(f"aupdate_state: {exc}; nothing was written") from None

    def bulk_update_state(self, config: Any, supersteps: Any, **kwargs: Any) -> Any:
        """`CompiledStateGraph.bulk_update_state`: its config checked as `update_state`."""
        _check_config(config, self._location, thread_needed=True)
        _check_fork(config, self._graph.checkpointer, self._location)
        check_updates(self._graph, config, update_pairs(supersteps))
        try:
            result = self._graph.bulk_update_state(config, supersteps, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise UsageError(f"bulk_update_state: {exc}; nothing was written") from None
        return self._updated(config, result)

    async def abulk_update_state(self, config: Any, supersteps: Any, **kwargs: Any) -> Any:
        """`CompiledStateGraph.abulk_update_state`: checked as `aupdate_state`."""
        _check_config(config, self._location, thread_needed=True)
        _check_async(self._async, "abulk_update_state", self._location)
        _check_fork(config, self._graph.checkpointer, self._location)
        check_updates(self._graph, config, update_pairs(supersteps))
        try:
            return await self._graph.abulk_update_state(config, supersteps, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise UsageError(f"abulk_update_state: {exc}; nothing was written") from None

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.stream`, refused when called (not at the first part)."""
        self._check_single(config, kwargs, "stream")
        return self._wrapped(self._graph.stream(input, config, **kwargs))

    def astream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.astream`, refused when called (not at the first part)."""
        self._check_single(config, kwargs, "astream")
        return self._wrapped(self._graph.astream(input, config, **kwargs))


def _checked_stream(name: str) -> Any:
    """A method of `CheckedGraph` that checks, then returns the graph's stream `name`."""

    def method(self: CheckedGraph, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        if name.endswith("batch_as_completed"):
            self._check(config, kwargs, name)
        else:
            self._check_single(config, kwargs, name)
        return self._wrapped(getattr(self._graph, name)(input, config, **kwargs))

    method.__name__ = name
    method.__doc__ = f"`CompiledStateGraph.{name}`, refused first as `_check_call` says."
    return method


def _checked_copy(name: str) -> Any:
    """A method of `CheckedGraph` returning the graph's `name(...)` (a copy), checked too."""

    def method(self: CheckedGraph, *args: Any, **kwargs: Any) -> CheckedGraph:
        return CheckedGraph(getattr(self._graph, name)(*args, **kwargs), self._location,
                            supports_async=self._async, after_update=self._after_update)

    method.__name__ = name
    method.__doc__ = f"`CompiledStateGraph.{name}`, the copy checked like this graph."
    return method


for _name in ("batch_as_completed", "abatch_as_completed", "stream_events", "astream_events",
              "astream_log", "transform", "atransform"):
    setattr(CheckedGraph, _name, _checked_stream(_name))
for _name in ("with_config", "copy"):
    setattr(CheckedGraph, _name, _checked_copy(_name))


_USAGE = ("invoke the graph with context=: the runtime context of "
          "Database.invocation(thread_id) (its ledger counts each attempt)")


def _check_config(config: Any, location: str | None = None, *,
                 thread_needed: bool = False) -> dict[str, Any]:
    """`config` as LangGraph reads it, or a `UsageError` naming what is wrong with it.

    Args:
        config: A `RunnableConfig` (a dict) or None.
        location: The database, named in refusals.
        thread_needed: Refuse a config without `configurable.thread_id` (`update_state`).

    Returns:
        The `configurable` dict (empty when `config` is None or has none).

    Raises:
        UsageError: `config` is no dict, its `configurable` is no dict, or (with
            `thread_needed`) its `thread_id` is missing or no str.
    """
    if config is not None and not isinstance(config, Mapping):
        raise UsageError(f"config must be a dict (a RunnableConfig such as "
                         f"{{'configurable': {{'thread_id': ...}}}}), not {shown(config)}",
                         location=location)
    configurable = (config or {}).get("configurable") or {}
    if not isinstance(configurable, Mapping):
        raise UsageError(f"config['configurable'] must be a dict, not {shown(configurable)}",
                         location=location)
    if thread_needed and not isinstance(configurable.get("thread_id"), str):
        raise UsageError("config['configurable'] must name the thread: thread_id, a str, not "
                         f"{shown(configurable.get('thread_id'))}", location=location)
    if isinstance(configurable.get("thread_id"), str):
        check_thread_id(configurable["thread_id"])  # letters, digits, . _ : - (as run's)
    return dict(configurable)


def _check_call(config: Any, context: Any, saver: Any, location: str | None = None) -> None:
    """Refuses an invocation whose config is malformed or whose context may not run it.

    Args:
        config: The invocation's config.
        context: Its `context=`: a live `StepContext` of this database's `invocation`.
        saver: The graph's checkpointer (the context's lease must name it).
        location: The database, named in refusals.

    Raises:
        UsageError: A malformed config; no context, or one that is no `StepContext`, not
            made by `Database.invocation`, or whose `with` block has ended (`usage`).
        RefusedError: `identity_mismatch`: the context is another database's, or
            `config`'s `configurable.thread_id` is not the context's thread.
    """
    invoked = _check_config(config, location).get("thread_id")
    if context is None:
        raise UsageError(_USAGE, location=location)
    if not isinstance(context, StepContext):
        raise UsageError(f"context must be the StepContext of Database.invocation(thread_id), "
                         f"not {shown(context)}", location=location)
    lease = context.lease
    if lease is None or lease.ledger is not context.ledger or lease.thread_id != context.thread_id:
        raise UsageError("the context was not made by Database.invocation(thread_id) of this "
                         "database (it holds no lock of the thread)", location=location)
    if lease.saver is not saver:
        raise RefusedError("the context is another database's (its ledger would count this "
                           "thread's attempts there); use this database's invocation()",
                           error_code=ErrorCode.IDENTITY_MISMATCH, location=location,
                           thread_id=None if invoked is None else str(invoked))
    if not lease.alive:
        raise UsageError("the context's `with Database.invocation()` block has ended and "
                         "released the thread's lock: invoke the graph inside the block",
                         location=location, thread_id=context.thread_id)
    if invoked != context.thread_id:
        raise RefusedError(f"the context is thread {context.thread_id!r}'s, not this "
                           "thread's; use Database.invocation() of the thread you invoke",
                           error_code=ErrorCode.IDENTITY_MISMATCH, location=location,
                           thread_id=None if invoked is None else str(invoked))


def _check_fork(config: Any, saver: Any, location: str | None = None) -> None:
    """Refuses a fork from a thread's input checkpoint (step -1, next `__start__`).

    That checkpoint holds only the input not yet applied: LangGraph runs nothing from
    it and writes a checkpoint without the channels every later step has, which the
    project then reads as damaged (and a second fork fails in LangGraph itself).

    Raises:
        UsageError: `config` names the input checkpoint of its thread.
    """
    configurable = _check_config(config, location)
    if configurable.get("checkpoint_id") is None:
        return
    saved = saver.get_tuple(config)
    if saved is not None and (saved.metadata or {}).get("source") == "input":
        raise UsageError("there is nothing to fork at a thread's input checkpoint (step -1): "
                         "fork from a later checkpoint, or start a new thread "
                         "(Database.run(..., task=...))", location=location,
                         thread_id=str(configurable.get("thread_id")),
                         checkpoint_id=str(configurable["checkpoint_id"]))


def _check_fork_keeps_answer(config: Any, context: StepContext, saver: Any,
                             location: str | None = None) -> None:
    """Refuses a fork of a `done` thread that has no attempt left (its answer would go).

    A fork runs from an older checkpoint, before the answer; with the ledger spent, its
    budget node can only stop it, `exhausted`, and that checkpoint becomes the thread's
    latest state: the paid answer would drop out of every report (`graph.run`, `history`'s
    header, the API), kept only in older checkpoints and the attempt log.

    Raises:
        UsageError: `config` names an older checkpoint of a `done` thread whose ledger
            has no attempt left; nothing is written.
    """
    configurable = _check_config(config, location)
    thread_id, checkpoint_id = configurable.get("thread_id"), configurable.get("checkpoint_id")
    if checkpoint_id is None or not isinstance(thread_id, str):
        return
    latest = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    if latest is None or latest.checkpoint.get("id") == checkpoint_id:
        return
    progress = latest.checkpoint.get("channel_values", {}).get("progress")
    read = getattr(context.ledger, "read", None)  # the store's ledger (graph.store.base)
    entry = read(thread_id) if read is not None else None
    if isinstance(progress, Mapping) and progress.get("status") == "done" and (
            entry is not None and entry.spent):
        raise UsageError(
            f"thread {thread_id!r} is done with no attempt left ({entry.attempts}/"
            f"{entry.max_attempts}): a fork could send no request and would only stop it "
            "(exhausted), hiding its answer from the thread's latest state; nothing was "
            "written (its answer stays; start a new thread to ask again)",
            location=location, thread_id=thread_id, checkpoint_id=str(checkpoint_id))


def _check_async(supports_async: bool, method: str, location: str | None = None) -> None:
    """Refuses an async graph method when the checkpointer has no async methods.

    Whether it has is the store's to say (`graph.store.base.Store.supports_async`):
    LangGraph's `SqliteSaver`, `PostgresSaver` and `RedisSaver` as used here are
    synchronous: their `aget_tuple`, `aput`, ... raise `NotImplementedError`.

    Raises:
        UsageError: The saver is synchronous; names the synchronous method and `db.arun`.
    """
    if not supports_async:
        raise UsageError(f"{method} needs an async checkpointer and this database's is "
                         f"synchronous: call {method[1:]} (in a worker thread if you need, "
                         "asyncio.to_thread), or Database.arun", location=location)
