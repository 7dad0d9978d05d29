"""What `graph.api._graph.CheckedGraph` checks before the compiled graph runs or writes.

Split from `graph.api._graph` to keep modules small. Each check raises the project's
typed errors (`graph.errors`) before LangGraph reads or writes a checkpoint, so a
refused call changes nothing stored:

- the arguments' shapes: `config` a dict (a batch: a list or tuple of them) whose
  `configurable` is a dict, `context` a `nodes.context.StepContext` (`check_config`,
  `check_call`);
- the context itself: made by `Database.invocation` of this database (its lease's
  saver is the graph's checkpointer), its `with` block not yet ended (the thread's
  lock still held: INVARIANTS I8), and for the invoked thread (I1, I2);
- the checkpoint a fork starts from: never the thread's input checkpoint (`check_fork`);
- async methods on a saver that has none (`check_async`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graph.errors import ErrorCode, RefusedError, UsageError
from graph.settings import shown

_USAGE = ("invoke the graph with context=: the runtime context of "
          "Database.invocation(thread_id) (its ledger counts each attempt)")


def check_config(config: Any, location: str | None = None, *,
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
        from graph.settings import check_thread_id

        check_thread_id(configurable["thread_id"])  # letters, digits, . _ : - (as run's)
    return dict(configurable)


def check_call(config: Any, context: Any, saver: Any, location: str | None = None) -> None:
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
    from nodes.context import StepContext

    invoked = check_config(config, location).get("thread_id")
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


def check_fork(config: Any, saver: Any, location: str | None = None) -> None:
    """Refuses a fork from a thread's input checkpoint (step -1, next `__start__`).

    That checkpoint holds only the input not yet applied: LangGraph runs nothing from
    it and writes a checkpoint without the channels every later step has, which the
    project then reads as damaged (and a second fork fails in LangGraph itself).

    Raises:
        UsageError: `config` names the input checkpoint of its thread.
    """
    configurable = check_config(config, location)
    if configurable.get("checkpoint_id") is None:
        return
    saved = saver.get_tuple(config)
    if saved is not None and (saved.metadata or {}).get("source") == "input":
        raise UsageError("there is nothing to fork at a thread's input checkpoint (step -1): "
                         "fork from a later checkpoint, or start a new thread "
                         "(Database.run(..., task=...))", location=location,
                         thread_id=str(configurable.get("thread_id")),
                         checkpoint_id=str(configurable["checkpoint_id"]))


def check_async(saver: Any, method: str, location: str | None = None) -> None:
    """Refuses an async graph method when the checkpointer has no async methods.

    LangGraph's `SqliteSaver`, `PostgresSaver` and `RedisSaver` (every backend here) are
    synchronous: their `aget_tuple`, `aput`, ... raise `NotImplementedError`.

    Raises:
        UsageError: The saver is synchronous; names the synchronous method and `db.arun`.
    """
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    if isinstance(saver, SqliteSaver) or type(saver).aget_tuple is BaseCheckpointSaver.aget_tuple:
        raise UsageError(f"{method} needs an async checkpointer and this database's is "
                         f"synchronous: call {method[1:]} (in a worker thread if you need, "
                         "asyncio.to_thread), or Database.arun", location=location)
