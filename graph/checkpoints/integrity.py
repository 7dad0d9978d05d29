"""Checks that stored state is exactly what this program writes, before anything uses it.

Refusals raise `RefusedError` with `damaged` (wrong shape, types, roles, pairing) or
`incompatible` (another graph); nothing is defaulted, dropped or repaired here
(INVARIANTS I4, I5, I6).
"""

from __future__ import annotations

from typing import Any

from graph.agent import graph_signature
from graph.errors import ErrorCode, RefusedError
from nodes.pairing import UnsafeHistoryError, open_calls
from nodes.state import STATUSES

__all__ = ["check_messages", "validate_state"]

_THREAD_KEYS: dict[str, tuple[type, ...]] = {
    "schema_version": (int,), "thread_id": (str,), "task": (str,), "model": (str,), "max_attempts": (int,),
    "created_at": (str,), "graph": (str,), "workspace": (str, type(None)),
    "max_tokens": (int, type(None)), "context_tokens": (int,), "allow_writes": (str, type(None)),
    "keep_checkpoints": (int, type(None))}
_PROGRESS_KEYS: dict[str, tuple[type, ...]] = {
    "status": (str,), "attempts": (int,), "outcome": (str, type(None)),
    "answer": (str, type(None)), "partial_answer": (str, type(None)), "stop_reason": (str, type(None)),
    "last_error": (dict, type(None)), "usage": (dict,),
}
_OUTCOMES = (None, "tool_calls", "answer", "truncated", "error", "not_sent")
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
GRAPH_NODES = frozenset({"__start__", "budget", "reason", "tools"})


class PairingBrokenError(RefusedError):
    """A stored conversation that breaks the tool-call pairing rule (`nodes.pairing`): `damaged`.

    Its own class so a reader can name the checkpoint to fork from
    (`graph.checkpoints.load.load_thread`).
    """


def _bad(why: str) -> RefusedError:
    return RefusedError(f"stored state is damaged: {why}", error_code=ErrorCode.DAMAGED)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_keys(name: str, value: Any, allowed: set[str], required: set[str]) -> None:
    if not isinstance(value, dict):
        raise _bad(f"{name} is {type(value).__name__}, not an object")
    extra, missing = set(value) - allowed, required - set(value)
    if extra:
        raise _bad(f"{name} has unknown key(s) {sorted(extra)}")
    if missing:
        raise _bad(f"{name} lacks key(s) {sorted(missing)}")


def _check_thread(thread: Any) -> None:
    _check_keys("thread", thread, set(_THREAD_KEYS), set(_THREAD_KEYS))
    for key, kinds in _THREAD_KEYS.items():
        value = thread[key]
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise _bad(f"thread.{key} has type {type(value).__name__}")
    if thread["max_attempts"] < 1:
        raise _bad("thread.max_attempts is below 1")
    if thread["context_tokens"] < 1 or (thread["max_tokens"] is not None and thread["max_tokens"] < 1):
        raise _bad("thread token limits must be positive")
    if thread["keep_checkpoints"] is not None and thread["keep_checkpoints"] < 1:
        raise _bad("thread.keep_checkpoints is below 1")
    expected = graph_signature(thread["workspace"] is not None, thread["allow_writes"] is not None)
    if thread["graph"] != expected:
        raise RefusedError(
            f"written by another graph ({thread['graph']}); this program runs "
            f"{expected} and has no migration between them", error_code=ErrorCode.INCOMPATIBLE)


def _check_progress(progress: Any, max_attempts: int) -> None:
    _check_keys("progress", progress, set(_PROGRESS_KEYS), set(_PROGRESS_KEYS))
    for key, kinds in _PROGRESS_KEYS.items():
        value = progress[key]
        if not isinstance(value, kinds) or (kinds == (int,) and not _is_int(value)):
            raise _bad(f"progress.{key} has type {type(value).__name__}")
    if progress["status"] not in STATUSES:
        raise _bad(f"progress.status {progress['status']!r} is not a known status")
    if progress["outcome"] not in _OUTCOMES:
        raise _bad(f"progress.outcome {progress['outcome']!r} is not a known outcome")
    if not 0 <= progress["attempts"] <= max_attempts:
        raise _bad(f"progress.attempts {progress['attempts']} is outside 0..{max_attempts}")
    usage = progress["usage"]
    if set(usage) != set(_USAGE_KEYS) or not all(_is_int(usage[k]) and usage[k] >= 0
                                                 for k in _USAGE_KEYS):
        raise _bad("progress.usage is not three non-negative token counts")
    error = progress["last_error"]
    if error is not None and set(error) != {"attempt", "error_code", "message"}:
        raise _bad("progress.last_error has the wrong keys")
    if progress["status"] == "done" and not isinstance(progress["answer"], str):
        raise _bad("a done thread has no answer")


def _check_tool_call(call: Any, where: str) -> str:
    if not isinstance(call, dict) or set(call) != {"id", "type", "function"}:
        raise _bad(f"{where} is not a tool call")
    function = call["function"]
    if (not isinstance(call["id"], str) or not call["id"] or call["type"] != "function"
            or not isinstance(function, dict) or set(function) != {"name", "arguments"}
            or not isinstance(function["name"], str)
            or not isinstance(function["arguments"], str)):
        raise _bad(f"{where} is malformed")
    return call["id"]


def check_messages(messages: Any, task: str) -> None:
    """Checks roles, keys and tool-call pairing of a stored conversation.

    The first message is the task as a `user` message. Pairing is the one rule of
    `nodes.pairing.open_calls`: after an assistant message with calls, only their
    results may follow until all are answered (the latest one may still be waiting
    for its results: the tools node runs next).

    Raises:
        RefusedError: `damaged`, naming the message index and what is wrong; a
            `system` message is always refused (INVARIANTS I5). A broken pairing is a
            `PairingBrokenError`.
    """
    if not isinstance(messages, list) or not messages:
        raise _bad("messages is not a non-empty list")
    if messages[0] != {"role": "user", "content": task}:
        raise _bad("the first message is not the thread's task")
    for index, msg in enumerate(messages):
        where = f"message {index}"
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "system":
            raise _bad(f"{where} has the system role; system instructions come only from code")
        if role == "user":
            _check_keys(where, msg, {"role", "content"}, {"role", "content"})
            if not isinstance(msg["content"], str):
                raise _bad(f"{where} content is not text")
        elif role == "assistant":
            _check_keys(where, msg, {"role", "content", "tool_calls"}, {"role", "content"})
            if msg["content"] is not None and not isinstance(msg["content"], str):
                raise _bad(f"{where} content is not text")
            calls = msg.get("tool_calls", [])
            if not isinstance(calls, list):
                raise _bad(f"{where} tool_calls is not a list")
            for n, call in enumerate(calls):
                _check_tool_call(call, f"{where} tool call {n}")
        elif role == "tool":
            _check_keys(where, msg, {"role", "content", "tool_call_id"},
                        {"role", "content", "tool_call_id"})
            if not isinstance(msg["content"], str) or not isinstance(msg["tool_call_id"], str):
                raise _bad(f"{where} content or tool_call_id is not text")
        else:
            raise _bad(f"{where} has unknown role {role!r}")
    try:
        open_calls(messages)
    except UnsafeHistoryError as exc:
        raise PairingBrokenError(f"stored state is damaged: {exc}",
                                 error_code=ErrorCode.DAMAGED) from None


def validate_state(values: Any, next_nodes: tuple[str, ...] = (), thread_id: str | None = None
                   ) -> None:
    """Checks migrated state values, the thread they belong to and the next nodes.

    Raises:
        RefusedError: `damaged` or `incompatible` (see module doc).
    """
    _check_keys("state", values, {"thread", "messages", "progress"},
                {"thread", "messages", "progress"})
    _check_thread(values["thread"])
    if thread_id is not None and values["thread"]["thread_id"] != thread_id:
        raise _bad(f"the stored state belongs to thread {values['thread']['thread_id']!r}")
    _check_progress(values["progress"], values["thread"]["max_attempts"])
    check_messages(values["messages"], values["thread"]["task"])
    unknown = set(next_nodes) - GRAPH_NODES
    if unknown:
        raise RefusedError(f"the checkpoint continues at unknown node(s) {sorted(unknown)}",
                           error_code=ErrorCode.INCOMPATIBLE)
