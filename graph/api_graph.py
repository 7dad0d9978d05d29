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


class CheckedGraph:
    """The compiled graph with `invoke`, `stream` and their async forms checked first.

    Everything else (`get_state`, `update_state`, `get_graph`, ...) is the graph's own.

    Args:
        graph: The compiled graph (`graph.factory.build_graph`).
        location: The database, named in refusals.
    """

    def __init__(self, graph: Any, location: str) -> None:
        self._graph = graph
        self._location = location

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.invoke`, refused first as `check_call` says."""
        check_call(config, kwargs.get("context"), self._location)
        try:
            return self._graph.invoke(input, config, **kwargs)
        except InvocationRefusedError as exc:
            raise refusal(exc, self._location) from None

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:  # noqa: A002
        """`CompiledStateGraph.stream`, refused first as `check_call` says."""
        check_call(config, kwargs.get("context"), self._location)
        try:
            yield from self._graph.stream(input, config, **kwargs)
        except InvocationRefusedError as exc:
            raise refusal(exc, self._location) from None

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        """`CompiledStateGraph.ainvoke`, refused first as `check_call` says."""
        check_call(config, kwargs.get("context"), self._location)
        try:
            return await self._graph.ainvoke(input, config, **kwargs)
        except InvocationRefusedError as exc:
            raise refusal(exc, self._location) from None

    async def astream(self, input: Any, config: Any = None,  # noqa: A002
                      **kwargs: Any) -> AsyncIterator[Any]:
        """`CompiledStateGraph.astream`, refused first as `check_call` says."""
        check_call(config, kwargs.get("context"), self._location)
        try:
            async for part in self._graph.astream(input, config, **kwargs):
                yield part
        except InvocationRefusedError as exc:
            raise refusal(exc, self._location) from None
