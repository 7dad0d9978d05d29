"""`graph.api.Database.graph`: the compiled graph, its invocations checked first.

A runtime context (`Database.invocation(thread_id)`) carries one thread's ledger and
attempt log, bound to that database and to its `with` block (`nodes.context.Lease`).
Invoking another thread or database with it, after its block, or invoking without one,
would count attempts against the wrong thread or none, or without the thread's lock:
this wrapper refuses each before LangGraph writes anything (not even the input
checkpoint; `graph.api._graph_checks`), and the budget node refuses them again for any
other caller (`nodes.budget.check_invocation`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from langgraph.errors import EmptyInputError

from graph.api._graph_checks import check_async, check_call, check_config, check_fork
from graph.checkpoints.updates import LIBRARY_ERRORS, check_updates, update_pairs
from graph.errors import ErrorCode, RefusedError, RunError, UsageError
from nodes.errors import InvocationErrorCode, InvocationRefusedError


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
    """The compiled graph with every invocation checked first (`graph.api._graph_checks`).

    Checked before anything runs, and the budget node's own refusal raised as a
    `RunError`: `invoke`, `stream`, `batch`, `batch_as_completed`, `stream_events`,
    `astream_log`, `transform` and their async forms (`a...`); `with_config` and `copy`
    return a checked graph too. A batch is refused whole when any of its configs is
    refused. A fork from a thread's input checkpoint is refused (`check_fork`).
    `update_state`, `bulk_update_state` and their async forms are the graph's own,
    their configs checked first: they run no node (only a node's channel writers), so
    they send nothing and count nothing, and the next invocation of the thread is
    checked and budgeted like any other; a `messages` update is checked first as a
    load would check the result (`graph.checkpoints.updates`): one that would leave the
    thread unloadable is a `UsageError`, nothing written. On a synchronous checkpointer (every backend
    here) each async method is refused (`check_async`). Everything else (`get_state`,
    `get_graph`, ...) is the graph's own.

    Args:
        graph: The compiled graph (`graph.agent.build_graph`).
        location: The database, named in refusals.
    """

    def __init__(self, graph: Any, location: str) -> None:
        self._graph = graph
        self._location = location

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._graph, name)
        if name not in ("aget_state", "aget_state_history"):
            return found

        def checked(*args: Any, **kwargs: Any) -> Any:
            check_async(self._graph.checkpointer, name, self._location)
            return found(*args, **kwargs)

        return checked

    def _check(self, config: Any, kwargs: dict[str, Any], method: str = "") -> None:
        saver = self._graph.checkpointer
        for one in _each_config(config):
            check_call(one, kwargs.get("context"), saver, self._location)
        if method.startswith("a"):
            check_async(saver, method, self._location)
        for one in _each_config(config):
            check_fork(one, saver, self._location)

    def _check_single(self, config: Any, kwargs: dict[str, Any], method: str) -> None:
        """`_check` for a method taking one config (a list is refused, not batched)."""
        check_config(config, self._location)
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
        """`CompiledStateGraph.invoke`, refused first as `check_call` says."""
        self._check_single(config, kwargs, "invoke")
        try:
            return self._graph.invoke(input, config, **kwargs)
        except _REFUSALS as exc:
            raise self._refused(exc) from None

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.ainvoke`, refused first as `check_call` says."""
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
        check_config(config, self._location, thread_needed=True)
        check_fork(config, self._graph.checkpointer, self._location)
        check_updates(self._graph, config, [(values, as_node)])
        try:
            return self._graph.update_state(config, values, as_node, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise UsageError(f"update_state: {exc}; nothing was written") from None

    async def aupdate_state(self, config: Any, values: Any, as_node: Any = None,
                            **kwargs: Any) -> Any:
        """`CompiledStateGraph.aupdate_state`, checked as `update_state`."""
        check_config(config, self._location, thread_needed=True)
        check_async(self._graph.checkpointer, "aupdate_state", self._location)
        check_fork(config, self._graph.checkpointer, self._location)
        check_updates(self._graph, config, [(values, as_node)])
        try:
            return await self._graph.aupdate_state(config, values, as_node, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise UsageError(f"aupdate_state: {exc}; nothing was written") from None

    def bulk_update_state(self, config: Any, supersteps: Any, **kwargs: Any) -> Any:
        """`CompiledStateGraph.bulk_update_state`: its config checked as `update_state`."""
        check_config(config, self._location, thread_needed=True)
        check_fork(config, self._graph.checkpointer, self._location)
        check_updates(self._graph, config, update_pairs(supersteps))
        try:
            return self._graph.bulk_update_state(config, supersteps, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise UsageError(f"bulk_update_state: {exc}; nothing was written") from None

    async def abulk_update_state(self, config: Any, supersteps: Any, **kwargs: Any) -> Any:
        """`CompiledStateGraph.abulk_update_state`: checked as `aupdate_state`."""
        check_config(config, self._location, thread_needed=True)
        check_async(self._graph.checkpointer, "abulk_update_state", self._location)
        check_fork(config, self._graph.checkpointer, self._location)
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
    method.__doc__ = f"`CompiledStateGraph.{name}`, refused first as `check_call` says."
    return method


def _checked_copy(name: str) -> Any:
    """A method of `CheckedGraph` returning the graph's `name(...)` (a copy), checked too."""

    def method(self: CheckedGraph, *args: Any, **kwargs: Any) -> CheckedGraph:
        return CheckedGraph(getattr(self._graph, name)(*args, **kwargs), self._location)

    method.__name__ = name
    method.__doc__ = f"`CompiledStateGraph.{name}`, the copy checked like this graph."
    return method


for _name in ("batch_as_completed", "abatch_as_completed", "stream_events", "astream_events",
              "astream_log", "transform", "atransform"):
    setattr(CheckedGraph, _name, _checked_stream(_name))
for _name in ("with_config", "copy"):
    setattr(CheckedGraph, _name, _checked_copy(_name))
