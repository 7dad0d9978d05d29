"""Running a set of threads: a tasks file, subtasks of a parent, a shared request cap.

The functions behind `python -m graph.batch` (the tasks file is read by
`graph.fleet.tasks_file`). Every thread goes through `graph.step.advance`, so every rule of
the single-thread command holds: the attempt ledger, identity, one writer per thread,
approvals waiting.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from graph.checkpoints.load import graph_of, load_thread
from graph.errors import ErrorCode, ExitCode, RunError
from graph.fleet.request_cap import cap_full, held_by_full_cap, open_cap
from graph.fleet.tasks_file import BatchItem
from graph.outcome import Outcome
from graph.step.advance import advance
from graph.step.local_steps import REOPENABLE
from graph.text import silence, without_key
from nodes.server_errors import stop_hint
from nodes.state import FINAL_STATUSES

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = [
    "NO_STATUS",
    "BatchReport",
    "Progress",
    "run_batch",
]

NO_STATUS = "error"
"""The status a batch shows for an invocation that ended without an outcome (no thread
status was read after it: `Outcome.from_error`); its `error_code` says why and its
`exit_code` is that code's (the README's batch status table)."""


class Progress:
    """A batch's progress: a bar with rate and time left on a terminal, else plain lines.

    The bar is tqdm's, imported only when there is a terminal to draw it on. Otherwise
    (a file, a pipe, `--json`) each thread gets one plain line, `[3/10] ID: STATUS (CODE)`,
    which a log or a script can read line by line; no escape codes, no rewritten line.
    CODE is the thread's `error_code`, or `ok` when it has none: every line has the
    same shape (`grep '(ok)$'`, `grep -v '(ok)$'`). STATUS is the thread's status, or
    `NO_STATUS` (`error`) for an invocation that ended without an outcome
    (`Outcome.from_error`: busy, refused, failed mid-step; or a thread the full cap kept
    from being created), its CODE saying why (the README's batch status table).

    Args:
        total: How many threads the batch has.
        stream: Where progress goes (stderr by default, never stdout).
        bar: Allow the bar on a terminal (False: plain lines whatever the stream).
    """

    def __init__(self, total: int, stream: TextIO | None = None, *, bar: bool = True) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.done = 0
        self._bar: Any = None
        if bar and _is_terminal(self.stream):
            from tqdm import tqdm  # noqa: PLC0415 - tqdm: only a batch on a terminal draws a bar

            self._bar = tqdm(total=total, file=self.stream, unit="thread", dynamic_ncols=True,
                             mininterval=0.2)

    def update(self, outcome: Outcome) -> None:
        """Counts one thread's outcome and shows it."""
        self.done += 1
        self.statuses[outcome.status or NO_STATUS] += 1
        if outcome.error_code:
            self.errors[outcome.error_code] += 1
        try:
            if self._bar is not None:
                self._bar.set_postfix_str(" ".join(f"{k} {v}" for k, v in
                                                   sorted(self.statuses.items())), refresh=False)
                self._bar.update(1)
                if self.done == self.total:
                    self.close()
                return
            self.stream.write(without_key(f"[{self.done}/{self.total}] {outcome.thread_id}: "
                                          f"{outcome.status or NO_STATUS} "
                                          f"({outcome.error_code or 'ok'})\n"))
            self.stream.flush()
        except BrokenPipeError:  # nobody reads the progress any more: the batch goes on
            self._bar = None
            silence(self.stream)

    def close(self) -> None:
        """Ends the bar's line (a batch stopped early too), so later output starts afresh."""
        bar, self._bar = self._bar, None
        if bar is not None:
            try:
                bar.close()
            except BrokenPipeError:
                    silence(self.stream)

    def summary(self) -> str:
        """The final table: threads per status and per error."""
        rows = [f"{'status':<20} threads"] + [f"{k:<20} {v}" for k, v in sorted(self.statuses.items())]
        if self.errors:
            rows += [f"{'error':<20} threads"] + [f"{k:<20} {v}" for k, v in sorted(self.errors.items())]
        return "\n".join(rows)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@dataclass
class BatchReport:
    """What a batch run did: the outcomes (input order), why it stopped, the exit code.

    `failure` is the outcome that decided a non-zero exit code (the first thread that
    failed, else the first one the cap held), or None.
    """

    outcomes: list[Outcome] = field(default_factory=list)
    cap_reached: bool = False
    exit_code: ExitCode = ExitCode.OK
    failure: Outcome | None = None

    def error_fields(self) -> dict[str, Any]:
        """The shared error fields (`graph.cli`) of the batch: null when it succeeded."""
        failure = self.failure
        error, code = (failure.error, failure.error_code) if failure else (None, None)
        if failure is not None and error is None and failure.stop_reason in REOPENABLE:
            # A thread stopped earlier reports its state only: say why it fails the batch.
            error = (f"thread {failure.thread_id!r} was stopped by a model error "
                     f"({failure.stop_reason}): {stop_hint(failure.stop_reason)}; after "
                     "fixing the cause, python -m graph.run --thread ID --reopen")
            code = (ErrorCode.CONTENT_FILTER if failure.stop_reason == "content_filter"
                    else ErrorCode.HTTP_STATUS)
        return {"error": error, "error_code": code, "exit_code": int(self.exit_code)}


def _held_by_cap(store: Store, item: BatchItem, cap_id: str | None) -> Outcome:
    """A thread's outcome when the cap is full: read only, never advanced."""
    loaded = load_thread(graph_of(store), item.thread_id, store.location)
    if loaded is None:
        outcome = Outcome(item.thread_id, ExitCode.BATCH_CAP, status=None)
    else:
        outcome = Outcome.from_state(item.thread_id, loaded.values, loaded.snapshot.next,
                                     store.figures(item.thread_id))
    if outcome.status not in FINAL_STATUSES:
        outcome.exit_code, outcome.error_code = ExitCode.BATCH_CAP, ErrorCode.BATCH_CAP
        outcome.error = f"request cap {cap_id!r} is full; not advanced"
    return outcome


def _advance_item(store: Store, item: BatchItem, settings: Any, once: bool, cap_id: str | None,
                  step_kwargs: dict[str, Any]) -> Outcome:
    """One thread's outcome: advanced, held by a full cap, or refused (never raises RunError)."""
    try:
        if cap_full(store, cap_id):
            return _held_by_cap(store, item, cap_id)
        return held_by_full_cap(store, advance(store, item.request(once), settings,
                                               charge=cap_id, **step_kwargs), cap_id)
    except RunError as exc:  # busy in another worker: skipped for now; others: reported
        return Outcome.from_error(item.thread_id, exc)


def run_batch(store: Store, items: list[BatchItem], settings: Any, *, once: bool,
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
        stopped the batch, else the exit code of the first thread that failed (3 stopped
        by a model error, 4 refused, 6 request failed, ...; 1 only for a bug).

    Raises:
        RefusedError: `identity_mismatch` when the cap exists with another maximum.
    """
    cap_id = open_cap(store, cap_id, max_requests)
    report = BatchReport()
    for item in items:
        outcome = _advance_item(store, item, settings, once, cap_id, step_kwargs)
        report.outcomes.append(outcome)
        if progress is not None:
            progress.update(outcome)
        if outcome.error_code == ErrorCode.BATCH_CAP:
            report.cap_reached = True
    failed = [o for o in report.outcomes if _failed(o)]
    held = [o for o in report.outcomes if o.error_code == ErrorCode.BATCH_CAP]
    report.failure = next(iter(failed or held), None)
    report.exit_code = (failed[0].exit_code if failed else
                        ExitCode.BATCH_CAP if report.cap_reached else ExitCode.OK)
    return report


def _failed(outcome: Outcome) -> bool:
    """Whether a thread's outcome fails the batch (its exit code decides the batch's).

    Its exit code says so, or a model error no rerun can fix stopped it: exit 3 like a
    spent budget, but only a person's `--reopen` after fixing the cause lets it go on,
    so a scheduler must see it.
    """
    return outcome.exit_code not in _ADVANCED or outcome.stop_reason in REOPENABLE


_ADVANCED = (ExitCode.OK, ExitCode.EXHAUSTED, ExitCode.AWAITING_APPROVAL, ExitCode.BUSY,
             ExitCode.BATCH_CAP)
"""Thread exit codes that leave the batch's exit code 0 (or 8 when the cap stopped it)."""
