"""`graph.api.Database.graph`: the compiled graph, its invocations checked first.

A runtime context (`Database.invocation(thread_id)`) carries one thread's ledger and
attempt log. Invoking another thread with it, or invoking without one, would count
attempts against the wrong thread or none: this wrapper refuses both before LangGraph
writes anything (not even the input checkpoint), and the budget node refuses them
again for any other caller (`nodes.budget.check_invocation`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from graph.errors import RefusedError, RunError, UsageError
from graph.exitcodes import ErrorCode
from graph.state_updates import check_updates
from nodes.errors import InvocationErrorCode, InvocationRefusedError

_USAGE = ("invoke the graph with context=: the runtime context of "
          "Database.invocation(thread_id) (its ledger counts each attempt)")


def refusal(exc: InvocationRefusedError, location: str | None = None) -> RunError:
    """The `RunError` for the budget node's refusal of an invocation."""
    if exc.error_code == InvocationErrorCode.USAGE:
        return UsageError(exc.message, location=location)
    return RefusedError(exc.message, error_code=ErrorCode.IDENTITY_MISMATCH,
                        location=location, thread_id=exc.thread_id)


def check_call(config: Any, context: Any, location: str | None = None) -> None:
    """Refuses an invocation whose context is missing or is another thread's.

    Raises:
        UsageError: No context (`usage`).
        RefusedError: `identity_mismatch`: `config`'s `configurable.thread_id` is not the
            context's thread.
    """
    if context is None:
        raise UsageError(_USAGE, location=location)
    invoked = ((config or {}).get("configurable") or {}).get("thread_id")
    if invoked != getattr(context, "thread_id", None):
        raise RefusedError(f"the context is thread {context.thread_id!r}'s, not this "
                           "thread's; use Database.invocation() of the thread you invoke",
                           error_code=ErrorCode.IDENTITY_MISMATCH, location=location,
                           thread_id=None if invoked is None else str(invoked))


def _each_config(config: Any) -> list[Any]:
    """The configs of a batch: `config` itself, or each of a list of them."""
    return list(config) if isinstance(config, (list, tuple)) else [config]


class CheckedGraph:
    """The compiled graph with every invocation checked first (`check_call`).

    Checked before anything runs, and the budget node's own refusal raised as a
    `RunError`: `invoke`, `stream`, `batch`, `batch_as_completed`, `stream_events`,
    `astream_log`, `transform` and their async forms (`a...`); `with_config` and `copy`
    return a checked graph too. A batch is refused whole when any of its configs is
    refused. `update_state`, `bulk_update_state` and their async forms run no node
    (only a node's channel writers), so they send nothing and count nothing, and the
    next invocation of the thread is checked and budgeted like any other; a `messages`
    update is checked first as a load would check the result (`graph.state_updates`):
    one that would leave the thread unloadable is a `UsageError`, nothing written.
    Everything else (`get_state`, `get_graph`, ...) is the graph's own.

    Args:
        graph: The compiled graph (`graph.factory.build_graph`).
        location: The database, named in refusals.
    """

    def __init__(self, graph: Any, location: str) -> None:
        self._graph = graph
        self._location = location

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    def _check(self, config: Any, kwargs: dict[str, Any]) -> None:
        for one in _each_config(config):
            check_call(one, kwargs.get("context"), self._location)

    def _refused(self, exc: InvocationRefusedError) -> RunError:
        return refusal(exc, self._location)

    def _results(self, results: list[Any]) -> list[Any]:
        """A batch's results with the budget node's refusals (`return_exceptions`) converted."""
        return [self._refused(r) if isinstance(r, InvocationRefusedError) else r for r in results]

    def _iterate(self, parts: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from parts
        except InvocationRefusedError as exc:
            raise self._refused(exc) from None

    async def _aiterate(self, parts: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for part in parts:
                yield part
        except InvocationRefusedError as exc:
            raise self._refused(exc) from None

    def _wrapped(self, result: Any) -> Any:
        """A stream with refusals converted; another result (an events run object) as is."""
        if hasattr(result, "__anext__"):
            return self._aiterate(result)
        return self._iterate(result) if hasattr(result, "__next__") else result

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.invoke`, refused first as `check_call` says."""
        self._check(config, kwargs)
        try:
            return self._graph.invoke(input, config, **kwargs)
        except InvocationRefusedError as exc:
            raise self._refused(exc) from None

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.ainvoke`, refused first as `check_call` says."""
        self._check(config, kwargs)
        try:
            return await self._graph.ainvoke(input, config, **kwargs)
        except InvocationRefusedError as exc:
            raise self._refused(exc) from None

    def batch(self, inputs: Any, config: Any = None, **kwargs: Any) -> list[Any]:
        """`CompiledStateGraph.batch`: every config checked before any input runs."""
        self._check(config, kwargs)
        try:
            return self._results(self._graph.batch(inputs, config, **kwargs))
        except InvocationRefusedError as exc:
            raise self._refused(exc) from None

    async def abatch(self, inputs: Any, config: Any = None, **kwargs: Any) -> list[Any]:
        """`CompiledStateGraph.abatch`: every config checked before any input runs."""
        self._check(config, kwargs)
        try:
            return self._results(await self._graph.abatch(inputs, config, **kwargs))
        except InvocationRefusedError as exc:
            raise self._refused(exc) from None

    def update_state(self, config: Any, values: Any, *args: Any, **kwargs: Any) -> Any:
        """`CompiledStateGraph.update_state`, a `messages` update checked first."""
        check_updates(self._graph, config, [values])
        return self._graph.update_state(config, values, *args, **kwargs)

    async def aupdate_state(self, config: Any, values: Any, *args: Any, **kwargs: Any) -> Any:
        """`CompiledStateGraph.aupdate_state`, a `messages` update checked first."""
        check_updates(self._graph, config, [values])
        return await self._graph.aupdate_state(config, values, *args, **kwargs)

    def bulk_update_state(self, config: Any, supersteps: Any) -> Any:
        """`CompiledStateGraph.bulk_update_state`, the `messages` updates checked first."""
        check_updates(self._graph, config, _values(supersteps))
        return self._graph.bulk_update_state(config, supersteps)

    async def abulk_update_state(self, config: Any, supersteps: Any) -> Any:
        """`CompiledStateGraph.abulk_update_state`, the `messages` updates checked first."""
        check_updates(self._graph, config, _values(supersteps))
        return await self._graph.abulk_update_state(config, supersteps)

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.stream`, refused when called (not at the first part)."""
        self._check(config, kwargs)
        return self._wrapped(self._graph.stream(input, config, **kwargs))

    def astream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.astream`, refused when called (not at the first part)."""
        self._check(config, kwargs)
        return self._wrapped(self._graph.astream(input, config, **kwargs))


def _values(supersteps: Any) -> list[Any]:
    """The values of each `StateUpdate` (or `(values, as_node)` pair), in order."""
    out = []
    for step in supersteps if isinstance(supersteps, list | tuple) else ():
        for update in step if isinstance(step, list | tuple) else ():
            out.append(update[0] if isinstance(update, tuple) and update else update)
    return out


def _checked_stream(name: str) -> Any:
    """A method of `CheckedGraph` that checks, then returns the graph's stream `name`."""

    def method(self: CheckedGraph, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        self._check(config, kwargs)
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
