"""Checks of one setting's value, shared by the flags, a tasks line and the Python API.

Split from `graph.spec` (which re-exports them) to keep modules small. Each refusal is a
`UsageError` (exit 2) naming the setting as its caller spelled it.
"""

from __future__ import annotations

import re
from pathlib import Path

from graph.errors import UsageError
from graph.exitcodes import ErrorCode
from nodes.demo_model import DEMO_MODEL_ID

THREAD_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MODEL_ID_RE = re.compile(r"[\x21-\x7e]{1,200}")
"""API keys and model ids: 1-200 printable ASCII characters, no spaces."""


def check_thread_id(thread_id: str) -> str:
    """Returns `thread_id` if it is 1-128 of letters, digits, `.`, `_`, `:`, `-`.

    Raises:
        UsageError: Otherwise (exit 2).
    """
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
            the folder on the machine that runs it.
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
    return str(path)
