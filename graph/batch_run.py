"""Running a set of threads: a tasks file, subtasks of a parent, a shared request cap.

The functions behind `python -m graph.batch` (and its queue workers). Every thread goes
through `graph.step.advance`, so every rule of the single-thread command holds: the
attempt ledger, identity, one writer per thread, approvals waiting.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from graph.errors import RefusedError, RunError, UsageError
from graph.exitcodes import ErrorCode, ExitCode
from graph.outcome import Outcome
from graph.settings import DEMO_MODEL_ID, check_model_id, check_task, check_thread_id
from graph.step import StepRequest, advance

FIELDS = {"thread_id": str, "task": str, "model": str, "max_attempts": int, "max_tokens": int,
          "context_tokens": int, "workspace": str, "allow_writes": str}
"""Fields a tasks-file line may carry (as the run command's flags of the same names)."""
FINISHED = ("done", "exhausted", "cancelled")
LIMITS = {"max_attempts": 1_000_000, "max_tokens": 10**12, "context_tokens": 10_000_000}
"""Largest accepted value of each integer field."""


@dataclass(frozen=True)
class BatchItem:
    """One line of a tasks file: its line number and the thread's request fields."""

    line: int
    fields: dict[str, Any]

    @property
    def thread_id(self) -> str:
        """The thread id."""
        return str(self.fields["thread_id"])

    def request(self, once: bool) -> StepRequest:
        """The `StepRequest` for this thread."""
        f = self.fields
        return StepRequest(thread_id=self.thread_id, task=f.get("task"), model=f.get("model"),
                           once=once, max_attempts=f.get("max_attempts"),
                           max_tokens=f.get("max_tokens"), context_tokens=f.get("context_tokens"),
                           workspace=f.get("workspace"), allow_writes=f.get("allow_writes"))


def subtask_id(parent: str, index: int) -> str:
    """The thread id of a parent's subtask `index` (0-based): `PARENT:sub_INDEX`."""
    return f"{parent}:sub_{index}"


def read_tasks(path: Path, parent: str | None = None, live: bool = True) -> list[BatchItem]:
    """Reads and checks every line of a JSON-lines tasks file before anything runs.

    Args:
        path: One JSON object per line: `{"thread_id": ..., "task": ...}` plus optional
            `FIELDS`; blank lines are skipped.
        parent: With a parent id, lines carry no `thread_id`: subtask ids are derived
            (`subtask_id`), in file order.
        live: Whether paid models are allowed (a line naming one without it is invalid).

    Returns:
        The items, in file order.

    Raises:
        UsageError: Listing every invalid line by number (exit 2; nothing counted):
            invalid JSON or UTF-8, nesting, duplicate keys, a line that is not an
            object, missing or unknown fields, wrong types, out-of-range numbers.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read tasks file {path}: {exc.strerror or exc}") from None
    items: list[BatchItem] = []
    problems: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            text = line.decode("utf-8")
            if not text.strip():
                continue
            data = _parse_line(text)
            if parent is not None:
                if "thread_id" in data:
                    raise ValueError("subtask lines take no thread_id (it is derived)")
                data = {**data, "thread_id": subtask_id(parent, len(items))}
            check_fields(data, live)
            if data["thread_id"] in seen:
                raise ValueError(f"thread {data['thread_id']!r} appears twice")
            seen.add(data["thread_id"])
            items.append(BatchItem(number, data))
        except UnicodeDecodeError:
            problems.append(f"line {number}: not UTF-8 text")
        except OSError as exc:  # a folder path the system cannot even look up
            problems.append(f"line {number}: {exc.strerror or exc}")
        except (ValueError, UsageError) as exc:
            message = exc.message if isinstance(exc, UsageError) else str(exc)
            problems.append(f"line {number}: {message}")
    if problems:
        more = f"; and {len(problems) - 20} more line(s)" if len(problems) > 20 else ""
        raise UsageError(f"{path}: " + "; ".join(problems[:20]) + more)
    if not items:
        raise UsageError(f"{path} holds no task")
    return items


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"duplicate key(s) {dup}: which value was meant is ambiguous")
    return dict(pairs)


def _parse_line(text: str) -> dict[str, Any]:
    """One line as a flat JSON object with distinct keys (raises ValueError)."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError("nested too deeply: a line is one flat JSON object") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {type(data).__name__}")
    return data


def check_fields(data: dict[str, Any], live: bool) -> None:
    """Checks one thread's fields (a tasks line, a queued job): names, types, ranges, folders.

    Raises:
        ValueError: Naming the field and what is wrong.
        UsageError: An invalid thread id, task or model id.
    """
    unknown = set(data) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}")
    for key in ("thread_id", "task"):  # required: null is as missing as absent
        if key not in data:
            raise ValueError(f"{key} is missing")
        if not isinstance(data[key], str):
            raise ValueError(f"{key} must be a string, not {type(data[key]).__name__}")
    for key, kind in FIELDS.items():
        value = data.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)
                                  or (kind is int and value < 1)):
            raise ValueError(f"{key} must be a {'positive integer' if kind is int else 'string'}")
    for key, limit in LIMITS.items():
        if data.get(key) is not None and data[key] > limit:
            raise ValueError(f"{key} must be at most {limit}")
    check_thread_id(data["thread_id"])
    check_task(data["task"])
    check_model_id(data.get("model"), "model")
    if data.get("model") not in (None, DEMO_MODEL_ID) and not live:
        raise ValueError(f"model {data['model']!r} makes paid requests: add --live")
    for key in ("workspace", "allow_writes"):
        if data.get(key) is not None and not Path(data[key]).expanduser().is_dir():
            raise ValueError(f"{key} folder {data[key]} does not exist")


class Progress:
    """Progress on a terminal (one line, rewritten) or plain lines (one per thread)."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.tty = self.stream.isatty()
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.done = 0

    def update(self, outcome: Outcome) -> None:
        """Counts one thread's outcome and shows it."""
        self.done += 1
        self.statuses[outcome.status or "error"] += 1
        if outcome.error_code:
            self.errors[outcome.error_code] += 1
        text = (f"\r[{'#' * (20 * self.done // max(self.total, 1))}"
                f"{'.' * (20 - 20 * self.done // max(self.total, 1))}] {self.done}/{self.total}  "
                + " ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())) + "\x1b[K"
                + ("\n" if self.done == self.total else "")) if self.tty else (
            f"[{self.done}/{self.total}] {outcome.thread_id}: {outcome.status or 'error'}"
            + (f" ({outcome.error_code})" if outcome.error_code else "") + "\n")
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:  # nobody reads the progress any more: the batch goes on
            from graph.cli import silence

            silence(self.stream)

    def summary(self) -> str:
        """The final table: threads per status and per error."""
        rows = [f"{'status':<20} threads"] + [f"{k:<20} {v}" for k, v in sorted(self.statuses.items())]
        if self.errors:
            rows += [f"{'error':<20} threads"] + [f"{k:<20} {v}" for k, v in sorted(self.errors.items())]
        return "\n".join(rows)


@dataclass
class BatchReport:
    """What a batch run did: the outcomes (input order), why it stopped, the exit code."""

    outcomes: list[Outcome] = field(default_factory=list)
    cap_reached: bool = False
    exit_code: ExitCode = ExitCode.OK


def _cap_full(store: Any, cap_id: str | None) -> bool:
    if cap_id is None:
        return False
    requests, maximum = store.ledger.cap(cap_id) or (0, 0)
    return requests >= maximum


def _held_by_cap(store: Any, item: BatchItem, cap_id: str | None) -> Outcome:
    """A thread's outcome when the cap is full: read only, never advanced."""
    from graph.loading import load_thread

    loaded = load_thread(store.graph, item.thread_id, store.location)
    if loaded is None:
        outcome = Outcome(item.thread_id, ExitCode.BATCH_CAP, status=None)
    else:
        outcome = Outcome.from_state(item.thread_id, loaded.values, loaded.snapshot.next)
    if outcome.status not in FINISHED:
        outcome.exit_code, outcome.error_code = ExitCode.BATCH_CAP, ErrorCode.BATCH_CAP
        outcome.error = f"request cap {cap_id!r} is full; not advanced"
    return outcome


def run_batch(store: Any, items: list[BatchItem], settings: Any, *, once: bool,
              cap_id: str | None = None, max_requests: int | None = None,
              progress: Progress | None = None, **step_kwargs: Any) -> BatchReport:
    """Advances every thread of `items`, in order, under an optional shared request cap.

    A finished thread is not run again (its stored answer is reported); a thread busy in
    another process is skipped for now (`error_code` `busy`). With `max_requests`, the
    cap `cap_id` is created if new (it is never reset) and charged with every request,
    durably before the request, like the per-thread budget; the batch stops when it is
    full.

    Returns:
        The report; `exit_code` 0 when every thread advanced or finished, 8 when the cap
        stopped the batch, else the exit code of the first thread that failed (4 refused,
        6 request failed, ...; 1 only for a bug).

    Raises:
        RefusedError: `identity_mismatch` when the cap exists with another maximum.
    """
    if max_requests is not None and cap_id is not None:
        _, maximum = store.ledger.ensure_cap(cap_id, max_requests)
        if maximum != max_requests:
            raise RefusedError(f"request cap {cap_id!r} was created with --max-requests "
                               f"{maximum}; it is never reset or changed",
                               error_code=ErrorCode.IDENTITY_MISMATCH)
    elif cap_id is not None and store.ledger.cap(cap_id) is None:
        cap_id = None  # no cap was ever set for this batch
    report = BatchReport()
    for item in items:
        try:
            if _cap_full(store, cap_id):
                outcome = _held_by_cap(store, item, cap_id)
            else:
                outcome = advance(store, item.request(once), settings, charge=cap_id,
                                  **step_kwargs)
                if outcome.held_back and _cap_full(store, cap_id):
                    outcome.exit_code, outcome.error_code = ExitCode.BATCH_CAP, ErrorCode.BATCH_CAP
                    outcome.error = f"request cap {cap_id!r} is full; no request was sent"
        except RunError as exc:  # busy in another worker: skipped for now; others: reported
            outcome = Outcome.from_error(item.thread_id, exc)
        report.outcomes.append(outcome)
        if progress is not None:
            progress.update(outcome)
        if outcome.error_code == ErrorCode.BATCH_CAP:
            report.cap_reached = True
    failed = [o.exit_code for o in report.outcomes if o.exit_code not in _ADVANCED]
    report.exit_code = (failed[0] if failed else
                        ExitCode.BATCH_CAP if report.cap_reached else ExitCode.OK)
    return report


_ADVANCED = (ExitCode.OK, ExitCode.EXHAUSTED, ExitCode.AWAITING_APPROVAL, ExitCode.BUSY,
             ExitCode.BATCH_CAP)
"""Thread exit codes that leave the batch's exit code 0 (or 8 when the cap stopped it)."""


def parent_result(parent: str, outcomes: list[Outcome]) -> dict[str, Any]:
    """The parent task's result: `done` with every subtask answer in order once all finished.

    Returns:
        `{"parent", "status" ("done" or "running"), "subtasks": [{thread_id, status,
        answer}...], "answers": [...] (only when done), "review_required"}`.
    """
    subtasks = [{"thread_id": o.thread_id, "status": o.status, "answer": o.answer}
                for o in outcomes]
    finished = all(s["status"] in FINISHED for s in subtasks)
    result: dict[str, Any] = {"parent": parent, "status": "done" if finished else "running",
                              "subtasks": subtasks}
    if finished:
        result["answers"] = [s["answer"] for s in subtasks]
        result["review_required"] = any(a is not None for a in result["answers"])
    return result
