"""Checks of one setting's value, shared by the flags, a tasks line and the Python API.

Split from `graph.settings_spec` (which re-exports them) to keep modules small. Each refusal is a
`UsageError` (exit 2) naming the setting as its caller spelled it.

The type checks (`check_flag`, `check_whole`, `check_text`, `check_seconds`,
`check_path`, `check_names`) are for Python callers (`graph.api`), whose values arrive
with any type: each refusal names the keyword and shows what it got (`once must be True
or False, not 'yes'`). They are strict on purpose: a flag takes only a bool (not 1 or
"yes"), a whole number only an int (not True, 2.0 or "5"), a number of seconds an int or
a float (not "5"); only a path also takes an `os.PathLike` (a `pathlib.Path`).

Each value they return is of the exact built-in type: a subclass (`numpy.str_`, a
`str` whose `__str__` says something else, an `int` with its own `__index__`) is
converted with the built-in's own method (`str.__str__`, `int.__int__`,
`float.__float__`), which copies the value as stored and ignores any override. So a
thread id is the same text whether it is hashed, formatted or compared.
"""

from __future__ import annotations

import os
import re
import reprlib
from pathlib import Path

from graph.errors import UsageError
from graph.exitcodes import ErrorCode
from nodes.demo_model import DEMO_MODEL_ID

THREAD_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MODEL_ID_RE = re.compile(r"[\x21-\x7e]{1,200}")
"""API keys and model ids: 1-200 printable ASCII characters, no spaces."""


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 40


def shown(value: object) -> str:
    """`value` as a refusal shows it: its repr, cut to about 40 characters.

    `reprlib` also stands in for an object whose own `repr` raises.
    """
    return _SHOWN.repr(value)


def exact(value: object) -> object:
    """`value` as its exact built-in type, when it is a subclass of str, int or float.

    A list or tuple has its items converted the same way (a new list or tuple when one
    changed); anything else is returned as it is. bool cannot be subclassed.

    Returns:
        `str.__str__(value)`, `int.__int__(value)` or `float.__float__(value)` for a
        subclass: the stored value, whatever the subclass's `__str__`, `__index__`,
        `__eq__` or `__hash__` say (an attacker's `str` splitting one thread in two).
    """
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, list | tuple):
        items = [exact(item) for item in value]
        if any(a is not b for a, b in zip(items, value, strict=True)):
            return items if isinstance(value, list) else tuple(items)
    return value


def _refuse(name: str, what: str, value: object) -> UsageError:
    return UsageError(f"{name} must be {what}, not {shown(value)}")


def check_flag(value: object, name: str) -> bool:
    """Returns `value` if it is True or False (not 1, not "yes").

    Raises:
        UsageError: Otherwise (exit 2): `once must be True or False, not 'yes'`.
    """
    if not isinstance(value, bool):
        raise _refuse(name, "True or False", value)
    return value


def check_whole(value: object, name: str, what: str = "a whole number") -> int | None:
    """Returns `value` if it is an int (not a bool, float or text; None passes).

    The range is the caller's to check (`check_limit`).

    Raises:
        UsageError: Otherwise (exit 2), saying `name` must be `what`.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _refuse(name, what, value)
    return int.__int__(value)


def check_text(value: object, name: str, *, optional: bool = True) -> str | None:
    """Returns `value` if it is a str (None passes when `optional`).

    Raises:
        UsageError: Otherwise (exit 2).
    """
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _refuse(name, "text (a str)", value)
    return str.__str__(value)


def check_seconds(value: object, name: str) -> float | None:
    """Returns `value` if it is an int or a float (not a bool or text; None passes).

    The range is the caller's to check (`graph.settings.resolve_settings`).

    Raises:
        UsageError: Otherwise (exit 2).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(name, "a number of seconds (an int or a float)", value)
    return int.__int__(value) if isinstance(value, int) else float.__float__(value)


def check_path(value: object, name: str,
               what: str = "a path or a postgresql:// URL") -> str | None:
    """`value` as text: a str, or an `os.PathLike` (`pathlib.Path`) converted with `os.fspath`.

    None passes. A path of bytes is refused: paths and URLs are text here.

    Raises:
        UsageError: Otherwise (exit 2), saying `name` must be `what`.
    """
    if value is None or isinstance(value, str):
        return None if value is None else str.__str__(value)
    if isinstance(value, os.PathLike):
        try:
            path = os.fspath(value)
        except TypeError:  # __fspath__ returned neither str nor bytes
            path = None
        if isinstance(path, str):
            return str.__str__(path)
    raise _refuse(name, f"{what} (a str or os.PathLike)", value)


def check_names(value: object, name: str, what: str = "call ids") -> tuple[str, ...]:
    """`value` as a tuple, if it is a list or tuple of str (a bare str is refused).

    Raises:
        UsageError: Otherwise (exit 2).
    """
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return tuple(str.__str__(item) for item in value)
    raise _refuse(name, f"a list or tuple of {what} (str)", value)


def check_thread_id(thread_id: str, name: str = "thread_id") -> str:
    """Returns `thread_id` if it is 1-128 of letters, digits, `.`, `_`, `:`, `-`.

    Raises:
        UsageError: Otherwise (exit 2); a value that is no str is named as `name`.
    """
    thread_id = check_text(thread_id, name, optional=False)  # type: ignore[assignment]
    if not THREAD_ID_RE.fullmatch(thread_id):
        raise UsageError(
            f"invalid thread id {thread_id[:40]!r}: use 1-128 letters, digits, '.', '_', ':' or '-'"
        )
    return thread_id


def check_task(task: str | None, name: str = "--task") -> str | None:
    """Returns `task` if it is non-blank, valid Unicode text (None passes).

    Raises:
        UsageError: Blank, or holding lone surrogates that are not UTF-8 (exit 2).
    """
    if task is None:
        return None
    try:
        task.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{name} must be valid UTF-8 text") from None
    if not task.strip():
        raise UsageError(f"{name} must not be blank")
    return task


def check_model_id(model: str | None, source: str) -> str | None:
    """Returns `model` if it is 1-200 printable ASCII characters without spaces (None passes).

    A near miss of the demo model (`offline_demo`, `Offline-Demo`) is a typo, not a
    paid model: it is refused with the right spelling.

    Raises:
        UsageError: Otherwise (exit 2), naming `source` (a flag, field or variable).
    """
    if model is not None and not MODEL_ID_RE.fullmatch(model):
        raise UsageError(f"{source} must be 1-200 printable ASCII characters without spaces")
    if model is not None and model != DEMO_MODEL_ID and _folded(model) == _folded(DEMO_MODEL_ID):
        raise UsageError(f"{source} {model!r} is not a model: did you mean {DEMO_MODEL_ID}?")
    return model


def _folded(name: str) -> str:
    return re.sub(r"[\W_]", "", name).lower()


def check_limit(value: int | None, limit: int, name: str) -> None:
    """Checks an integer setting: from 1 to `limit` (None passes).

    Raises:
        UsageError: Naming the setting `name` and the bound (exit 2).
    """
    if value is not None and value < 1:
        raise UsageError(f"{name} must be a positive integer")
    if value is not None and value > limit:
        raise UsageError(f"{name} must be at most {limit}")


def resolve_folder(folder: str | None, name: str = "workspace") -> str | None:
    """The absolute path of an existing folder (`--workspace`, `--allow-writes`), or None.

    Raises:
        UsageError: `no_such_workspace` when the folder is missing here, or the path
            names something that is not a folder (exit 2, nothing counted): a step reads
            the folder on the machine that runs it; `usage` when its path is not valid
            UTF-8 (a stored path must name the same folder when read back).
    """
    if folder is None:
        return None
    try:
        path = Path(folder).expanduser().resolve()
        found, exists = path.is_dir(), path.exists()
    except (OSError, ValueError, RuntimeError):  # too long, a NUL byte, a symlink loop
        found = exists = False
    if not found:
        raise UsageError(f"{name} {folder} exists but is not a folder"
                         if exists else f"{name} folder {folder} does not exist on this machine",
                         error_code=ErrorCode.NO_SUCH_WORKSPACE)
    try:  # stored as text (PostgreSQL and JSON hold no undecodable bytes): refuse, not mangle
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{name} folder {folder!r} has a name that is not valid UTF-8: rename it "
                         "or give another folder") from None
    return str(path)
