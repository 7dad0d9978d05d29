"""The arguments of every `graph.api` call, checked before it does anything.

Python itself refuses an unknown keyword or a missing argument with a `TypeError`;
`checked_call` refuses it first as a `UsageError` (exit 2, `usage`) naming the keyword,
so every refusal of `graph.api` carries `error_code` and `exit_code`. The types of the
values are checked in each call with `graph.settings` (`check_flag`, ...), also
before anything is opened, counted or written.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar, cast, get_args

from graph.errors import UsageError
from graph.settings import Source, ThreadSpec, check_path, check_text, check_whole, exact, setting_name, shown

__all__ = [
    "SPEC_INTEGERS",
    "check_callable",
    "check_source",
    "checked_call",
    "thread_spec",
]

P = ParamSpec("P")
R = TypeVar("R")

SPEC_INTEGERS = ("max_attempts", "max_tokens", "context_tokens")
"""`Database.run`'s whole-number settings (`keep_checkpoints` also takes "all")."""


def checked_call(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, refusing arguments that do not fit its signature as a `UsageError`.

    Works on functions, methods and `async def` (refused when the coroutine is awaited).
    A call forwarding `**kwargs` (`arun`) is checked by the call it forwards to. Every
    argument that is a subclass of str, int or float (or a list or tuple of them) is
    passed on as the exact built-in (`graph.settings.exact`), so no call sees an
    override of `__str__`, `__eq__` or `__hash__`.

    Raises:
        UsageError: An unknown keyword (`run() has no keyword 'onse'; it takes ...`), a
            missing argument or too many positional ones (exit 2).
    """
    signature = inspect.signature(fn)

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...],
                                                                     dict[str, Any]]:
        args = tuple(exact(arg) for arg in args)
        kwargs = {key: exact(value) for key, value in kwargs.items()}
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            name = type(args[0]).__name__ if fn.__name__ == "__init__" and args else fn.__name__
            raise UsageError(_misfit(name, signature, kwargs, exc)) from None
        return args, kwargs

    if inspect.iscoroutinefunction(fn):
        async_fn = cast("Callable[..., Coroutine[Any, Any, Any]]", fn)

        @functools.wraps(fn)
        async def acall(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = check(args, kwargs)
            return await async_fn(*args, **kwargs)

        return cast("Callable[P, R]", acall)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> R:
        args, kwargs = check(args, kwargs)
        return fn(*args, **kwargs)

    return call


def _misfit(name: str, signature: inspect.Signature, kwargs: dict[str, Any],
            exc: TypeError) -> str:
    """What is wrong with a call `signature.bind` refused, naming the keyword."""
    kinds = {key: param.kind for key, param in signature.parameters.items()}
    named = [key for key, kind in kinds.items() if key != "self" and kind in _NAMED]
    unknown = [key for key in kwargs if key not in named]
    if unknown and inspect.Parameter.VAR_KEYWORD not in kinds.values():
        return (f"{name}() has no keyword {unknown[0]!r}; it takes "
                + (", ".join(named) if named else "no keywords"))
    return f"{name}(): {exc}"


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def check_source(source: object) -> Source:
    """Returns `source` if it is one of `graph.settings.Source` (`keywords`, `flags`, `line`).

    Raises:
        UsageError: Otherwise (exit 2).
    """
    if source not in get_args(Source):
        raise UsageError(f"source must be one of {', '.join(get_args(Source))}, "
                         f"not {shown(source)}")
    return cast("Source", source)


def thread_spec(source: Source, thread_id: object, **given: Any) -> ThreadSpec:
    """The `graph.settings.ThreadSpec` of a `Database` call, each setting's type checked first.

    `ThreadSpec` then checks the values (ranges, the thread id's characters). Settings
    not given are None; `workspace` and `allow_writes` may be `os.PathLike` (made str).

    Raises:
        UsageError: A setting of the wrong type, named with what it got (exit 2), or a
            value `ThreadSpec` refuses.
    """
    check_text(thread_id, setting_name("thread_id", source), optional=False)
    for key in ("task", "model"):
        check_text(given.get(key), setting_name(key, source))
    for key in SPEC_INTEGERS:
        check_whole(given.get(key), setting_name(key, source), "a positive integer")
    keep = given.get("keep_checkpoints")
    if not (isinstance(keep, str) and keep == "all"):
        check_whole(keep, setting_name("keep_checkpoints", source), "a positive integer or 'all'")
    for key in ("workspace", "allow_writes"):
        given[key] = check_path(given.get(key), setting_name(key, source), "a folder")
    return ThreadSpec(thread_id=cast("str", thread_id), **given, source=source)


def check_callable(value: object, name: str) -> None:
    """Refuses a `value` that is neither None nor callable (a factory, a clock).

    Raises:
        UsageError: Naming `name` and what it got (exit 2).
    """
    if value is not None and not callable(value):
        raise UsageError(f"{name} must be callable or None, not {shown(value)}")

