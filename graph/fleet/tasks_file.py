"""Reading a tasks file: one thread per JSON line, every line checked before anything runs.

Each line is one flat JSON object whose fields are a thread's settings
(`graph.settings.FIELDS`, named as `graph.run`'s flags); `graph.settings.ThreadSpec.from_line`
checks them, so a line accepts exactly what the flags accept.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph.errors import ErrorCode, UsageError
from graph.settings import ThreadSpec
from graph.step.advance import StepRequest

__all__ = [
    "BatchItem",
    "MAX_PROBLEMS_SHOWN",
    "read_tasks",
    "subtask_id",
]

MAX_PROBLEMS_SHOWN = 20
"""Invalid lines listed in the one error message; the rest are counted."""


@dataclass(frozen=True)
class BatchItem:
    """One line of a tasks file: its line number and the thread's checked settings."""

    line: int
    spec: ThreadSpec

    @property
    def thread_id(self) -> str:
        """The thread id."""
        return self.spec.thread_id

    def request(self, once: bool) -> StepRequest:
        """The `StepRequest` that advances this thread (`once`: one invocation)."""
        return StepRequest(self.spec, once=once)


def subtask_id(parent: str, index: int) -> str:
    """The thread id of a parent's subtask `index` (0-based): `PARENT:sub_INDEX`."""
    return f"{parent}:sub_{index}"


def read_tasks(path: str | os.PathLike[str], parent: str | None = None, live: bool = True
               ) -> list[BatchItem]:
    """Reads and checks every line of a JSON-lines tasks file before anything runs.

    Args:
        path: The file (a str or an `os.PathLike` such as `pathlib.Path`): one JSON
            object per line, `{"thread_id": ..., "task": ...}` plus optional
            settings (`graph.settings.FIELDS`); blank lines are skipped.
        parent: With a parent id, lines carry no `thread_id`: subtask ids are derived
            (`subtask_id`), in file order.
        live: Whether paid models are allowed (a line naming one without it is invalid).

    Returns:
        The items, in file order.

    Raises:
        UsageError: Listing every invalid line by number (exit 2; nothing counted):
            invalid JSON or UTF-8, nesting, duplicate keys, a line that is not an
            object, missing or unknown fields, wrong types, out-of-range numbers, a
            paid model without `live`, a missing folder, a thread id given twice.
    """
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read tasks file: {exc.strerror or exc}",
                         location=str(file)) from None
    items: list[BatchItem] = []
    problems: list[str] = []
    codes: set[ErrorCode] = set()
    seen: set[str] = set()
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            text = line.decode("utf-8")
            if not text.strip():
                continue
            spec = _line_spec(_parse_line(text), parent, len(items), live)
            if spec.thread_id in seen:
                raise UsageError(f"thread {spec.thread_id!r} appears twice")
            seen.add(spec.thread_id)
            items.append(BatchItem(number, spec))
        except UnicodeDecodeError:
            problems.append(f"line {number}: not UTF-8 text")
            codes.add(ErrorCode.USAGE)
        except UsageError as exc:
            problems.append(f"line {number}: {exc.message}")
            codes.add(exc.error_code)
    if problems:
        more = (f"; and {len(problems) - MAX_PROBLEMS_SHOWN} more line(s)"
                if len(problems) > MAX_PROBLEMS_SHOWN else "")
        # One kind of problem keeps its own code (a missing folder is `no_such_workspace`
        # as for `graph.run`); a mix is `usage`. Both exit 2.
        code = codes.pop() if len(codes) == 1 else ErrorCode.USAGE
        raise UsageError("; ".join(problems[:MAX_PROBLEMS_SHOWN]) + more, location=str(file),
                         error_code=code)
    if not items:
        raise UsageError("holds no task", location=str(file))
    return items


def _line_spec(data: dict[str, Any], parent: str | None, index: int, live: bool) -> ThreadSpec:
    """The spec of one parsed line; a subtask line gets its derived thread id."""
    if parent is not None:
        if "thread_id" in data:
            raise UsageError("subtask lines take no thread_id (it is derived)")
        data = {**data, "thread_id": subtask_id(parent, index)}
    return ThreadSpec.from_line(data, live=live)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise UsageError(f"duplicate key(s) {dup}: which value was meant is ambiguous")
    return dict(pairs)


def _parse_line(text: str) -> dict[str, Any]:
    """One line as a flat JSON object with distinct keys.

    Raises:
        UsageError: Invalid JSON, nested too deeply, duplicate keys, not an object.
    """
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise UsageError("nested too deeply: a line is one flat JSON object") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # an integer too long to convert (Python's digit limit)
        raise UsageError(f"not usable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"not a JSON object but {type(data).__name__}")
    return data
