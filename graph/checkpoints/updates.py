"""Checks a `messages` update before `update_state` stores it, so no edit damages a thread.

LangGraph's `update_state` runs no node: it applies the reducers and writes a new
checkpoint. Our `messages` are OpenAI wire dicts, checked on every load
(`graph.checkpoints.integrity.check_messages`); an update in another shape (LangGraph's usual
`("user", "text")` tuple, a dict with a `name` key) would be stored as given and make
every later load refuse the thread as `damaged`. This module applies our reducer to the
stored messages and the update, checks the result as a load would, and refuses the
update first (`UsageError`, nothing written).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from langgraph.errors import InvalidUpdateError

from graph.checkpoints.integrity import check_messages
from graph.errors import ErrorCode, RefusedError, RunError, UsageError
from nodes.pairing import UnsafeHistoryError, open_calls
from nodes.state import append_messages

__all__ = ["LIBRARY_ERRORS", "check_edited", "check_updates", "update_pairs"]

_SHAPE = ("append OpenAI wire dicts such as {'role': 'user', 'content': '...'}; LangChain "
          "message objects and (role, text) tuples are not stored")


UPDATABLE_NODES = (None, "reason", "tools")
"""`as_node` values an update may name: the nodes that write `messages` (None: LangGraph's
choice, the last node that ran). `budget` and the input/create steps write `progress` and
`thread`; `__input__`, `__end__` or an unknown name would leave a thread no step can resume."""

LIBRARY_ERRORS = (InvalidUpdateError, TypeError, ValueError)
"""What LangGraph's `update_state` raises for an update it cannot apply (turned into `UsageError`)."""


def _messages(values: Any) -> Any:
    return values.get("messages") if isinstance(values, dict) else None


def _check_update_shape(values: Any, as_node: Any) -> None:
    """Refuses an update that is no `{"messages": ...}` dict or names a node that writes no messages.

    `thread` is fixed when the thread is created (I7) and `progress` (the budget's mirror and
    the status) belongs to the nodes, so only `messages` may be updated.

    Raises:
        UsageError: Another key, a value that is no dict, or an `as_node` outside
            `UPDATABLE_NODES`; nothing was written.
    """
    if not isinstance(values, dict):
        raise UsageError(f"update_state: values must be a dict such as {{'messages': [...]}}, "
                         f"not {type(values).__name__}; nothing was written")
    others = sorted(str(key) for key in values if key != "messages")
    if others:
        raise UsageError(f"update_state may change only 'messages', not {', '.join(others)} "
                         "(a thread's settings are fixed at creation and its progress belongs "
                         "to the nodes); nothing was written")
    if as_node not in UPDATABLE_NODES:
        raise UsageError(f"update_state: as_node must be None, 'reason' or 'tools', not "
                         f"{as_node!r}; nothing was written")


def update_pairs(supersteps: Any) -> list[tuple[Any, Any]]:
    """Each `StateUpdate` of `bulk_update_state`'s supersteps as `(values, as_node)`, in order.

    Raises:
        UsageError: `supersteps` is no list of lists of `StateUpdate`s (or
            `(values, as_node)` pairs); nothing was written.
    """
    out: list[tuple[Any, Any]] = []
    for step in supersteps if isinstance(supersteps, list | tuple) else [None]:
        for update in step if isinstance(step, list | tuple) else [None]:
            if not isinstance(update, tuple) or not 1 <= len(update) <= 3:
                raise UsageError("bulk_update_state: supersteps must be a list of lists of "
                                 "StateUpdate(values, as_node); nothing was written")
            out.append((update[0], update[1] if len(update) > 1 else None))
    return out


def _replies(messages: list[Any]) -> int:
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def _merged_messages(stored: list[Any], update: Any) -> list[Any]:
    """The messages the reducer would store: `stored` with `update` applied.

    Raises:
        UsageError: The update is no list (nor a replace or edit) or names a slice
            the stored list does not have.
    """
    if not isinstance(update, list | dict):
        raise UsageError(f"update_state: messages must be a list of messages ({_SHAPE}), "
                         f"not {type(update).__name__}; nothing was written")
    if isinstance(update, list):  # appended as they are: `check_messages` names what is wrong
        return [*stored, *update]
    try:
        return append_messages(list(stored), update)
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"update_state: {exc}; nothing was written") from None


def check_updates(graph: Any, config: Any, updates: Iterable[tuple[Any, Any]]) -> None:
    """Refuses `messages` updates to `config`'s thread that a later load would refuse.

    Args:
        graph: The compiled graph (its `get_state` reads the checkpoint `config` names).
        config: The thread (and checkpoint) the updates apply to.
        updates: Each update's `(values, as_node)`, in the order they apply.

    Raises:
        UsageError: An update `_check_update_shape` refuses; the resulting messages
            would not load (`graph.checkpoints.integrity`) or leave a tool call unanswered that
            was answered or absent before (`nodes.pairing`), with
            what is wrong and the shape to use, or hold more assistant messages than
            before (each reply must be a counted request: `graph.store.checks`);
            nothing was written.
    """
    pending = list(updates)
    for values, as_node in pending:
        _check_update_shape(values, as_node)
    values = graph.get_state(config).values
    if not values or "thread" not in values:  # no such thread, or an unknown checkpoint id
        conf = dict(config.get("configurable") or {})
        checkpoint_id = conf.pop("checkpoint_id", None)
        if checkpoint_id and graph.get_state({**config, "configurable": conf}).values:
            raise UsageError(f"update_state: checkpoint {checkpoint_id!s:.60} is not stored for "
                             f"thread {conf.get('thread_id')!s:.128}: the thread keeps its "
                             "latest checkpoints only (keep_checkpoints, default 10), so older "
                             "ones are trimmed; fork from one that get_state_history (or "
                             "graph.history --thread) lists; nothing was written")
        raise UsageError("update_state needs an existing thread and checkpoint: a new thread "
                         "starts with run(thread_id, task=...); nothing was written")
    messages = list(values.get("messages") or [])
    replies, open_before = _replies(messages), _open(messages)
    for update, _ in pending:
        if "messages" in update:
            messages = _merged_messages(messages, update["messages"])
    _check_no_key(messages)
    if _replies(messages) > replies:
        raise UsageError("update_state would add an assistant message: a reply comes only from a "
                         "counted model request (the ledger would no longer cover the thread); "
                         "edit an existing one or add a user message; nothing was written")
    try:
        check_messages(messages, values["thread"]["task"])
    except RunError as exc:
        why = exc.detail.removeprefix("stored state is damaged: ")
        raise UsageError(f"update_state would store messages the thread cannot load ({why}): "
                         f"{_SHAPE}; nothing was written") from None
    after = _open(messages)
    left_open = ["(pairing broken)"] if after is None else sorted(set(after) - set(open_before or []))
    if left_open:
        raise UsageError(f"update_state would leave tool call(s) {left_open} unanswered (every "
                         "call needs its tool result before the next request); nothing was "
                         "written")


def _open(messages: list[Any]) -> list[str] | None:
    """The latest assistant message's unanswered call ids, or None for a broken pairing."""
    try:
        return open_calls(messages)
    except (UnsafeHistoryError, KeyError, TypeError, AttributeError):
        return None


def check_edited(messages: Any, task: str, thread_id: str) -> None:
    """Refuses a state whose messages are not the wire dicts the nodes read.

    The server's `update_state` (Studio's state editor, `POST /threads/{id}/state`)
    bypasses `check_updates`, so each node of the Studio graph (`graph.studio`) checks
    what it loads with this, before anything is counted or sent.

    Args:
        messages: The loaded `messages` channel.
        task: The thread's task (its first message).
        thread_id: The thread, named in the error.

    Raises:
        RefusedError: `damaged`, naming what is wrong and how to restore the thread.
    """
    try:
        check_messages(messages, task)
    except RefusedError as exc:
        why = exc.detail.removeprefix("stored state is damaged: ")
        raise RefusedError("the thread's messages were edited into a shape this graph "
                           f"cannot use ({why}); restore them with update_state using "
                           "OpenAI wire dicts, or start a new thread",
                           error_code=ErrorCode.DAMAGED, thread_id=thread_id) from None


def _check_no_key(messages: list[Any]) -> None:
    """Refuses messages that spell `MANDAPI_API_KEY` (INVARIANTS I9: never stored)."""
    key = os.environ.get("MANDAPI_API_KEY")
    if key and key in json.dumps(messages, ensure_ascii=False, default=str):
        raise UsageError("update_state: a message contains the API key (MANDAPI_API_KEY); "
                         "nothing was written")
