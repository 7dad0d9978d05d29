"""What an invocation reports: one `Outcome`, shown as text or as one JSON object."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from graph.errors import ErrorCode, ExitCode, RunError, error_line
from graph.text import escape_controls
from nodes.errors import StopReason
from nodes.server_errors import stop_hint

_MODEL_ERROR_STOPS = frozenset(str(reason) for reason in StopReason)
"""Stops by a model error (`model_not_found`, `invalid_request`, `content_filter`): their
outcome carries the stored error (`progress.last_error`) on every later run too."""

__all__ = ["Figures", "Outcome", "REVIEW_REMINDER", "USAGE_KEYS"]

REVIEW_REMINDER = "Review required: a person must check this model-written answer before use."

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
"""The token counts a usage holds (tokens), in the order they are shown."""


@dataclass(frozen=True)
class Figures:
    """A thread's attempts and tokens, as every face shows them (issue 30).

    Read by `graph.store.base.Store.figures` from the durable records, never from a
    checkpoint: a fork or `update_state` from an older checkpoint brings back that
    checkpoint's own `progress.attempts` and `progress.usage`, which are lower than what
    the thread spent.

    Attributes:
        attempts: The attempt ledger's count (`attempts`): what the thread's budget has
            spent, forks included (a ledger count never goes down).
        usage: `prompt_tokens`, `completion_tokens` and `total_tokens` summed over the
            `reason` rows of the thread's whole attempt log (tokens), forks included;
            `total_tokens` is what the token cap counts (`AttemptLog.used_tokens`).
    """

    attempts: int
    usage: dict[str, int]


@dataclass
class Outcome:
    """The result of one invocation, as printed by `graph.run`.

    `to_json` gives the `--json` object; its keys are a contract for scripts:
    `thread_id`, `status`, `attempts` (the ledger's count: `Figures`), `max_attempts`,
    `model`, `answer` (null until done), `partial_answer` (the text so far of a reply
    cut off by the token limit and not finished yet, else null), `review_required`,
    `stop_reason`, `error`, `error_code`, plus `usage` (tokens summed over the whole
    attempt log: `Figures`), `max_tokens` (null without a cap), `pending_calls` (the
    write calls a thread waits on, each with `tool_call_id`, `name`, `arguments`,
    `sha256` and `decision`; null when not waiting) and `exit_code`.
    """

    thread_id: str | None
    exit_code: ExitCode = ExitCode.OK
    status: str | None = None
    attempts: int | None = None
    max_attempts: int | None = None
    model: str | None = None
    answer: str | None = None
    partial_answer: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    error_code: ErrorCode | None = None
    usage: dict[str, int] | None = None
    max_tokens: int | None = None
    pending_calls: list[dict[str, Any]] | None = None
    next_nodes: list[str] = field(default_factory=list)
    held_back: bool = False
    """The last invocation could not claim its counted attempt (a full request cap)."""
    note: str | None = None
    """A line for people under the status (text output only; `--json`'s `status` says it)."""

    @classmethod
    def from_state(cls, thread_id: str, values: dict[str, Any], next_nodes: tuple,
                   figures: Figures) -> Outcome:
        """Reads the reported fields from a thread's state values, its figures from `figures`.

        `attempts` and `usage` come from `figures` (the ledger and the attempt log), never
        from `progress`, which a fork from an older checkpoint lowers.
        """
        progress, thread = values["progress"], values["thread"]
        status = progress["status"]
        exit_code = {"exhausted": ExitCode.EXHAUSTED, "cancelled": ExitCode.REFUSED}.get(
            status, ExitCode.OK)
        error_code, error = (ErrorCode.CANCELLED, f"thread {thread_id!r} was cancelled") \
            if status == "cancelled" else (None, None)
        last = progress.get("last_error")
        if (status == "exhausted" and progress.get("stop_reason") in _MODEL_ERROR_STOPS
                and isinstance(last, dict)):  # every later run says why, not only the first
            error_code, error = ErrorCode(last["error_code"]), last["message"]
        return cls(
            thread_id=thread_id,
            exit_code=exit_code,
            error_code=error_code,
            error=error,
            status=status,
            attempts=figures.attempts,
            max_attempts=thread["max_attempts"],
            model=thread["model"],
            answer=progress.get("answer"),
            partial_answer=progress.get("partial_answer"),
            stop_reason=progress.get("stop_reason"),
            usage=dict(figures.usage),
            max_tokens=thread.get("max_tokens"),
            next_nodes=list(next_nodes),
        )

    @classmethod
    def waiting(cls, thread_id: str, values: dict[str, Any], pending: list[dict[str, Any]],
                decisions: dict[str, dict[str, Any]], figures: Figures) -> Outcome:
        """A thread paused for review: status `awaiting_approval`, exit 7, the calls in full."""
        outcome = cls.from_state(thread_id, values, ("tools",), figures)
        outcome.status, outcome.exit_code = "awaiting_approval", ExitCode.AWAITING_APPROVAL
        outcome.pending_calls = [
            {**p, "decision": (decisions.get(p["tool_call_id"]) or {}).get("decision")}
            for p in pending]
        return outcome

    @classmethod
    def after_invocation(cls, thread_id: str, values: dict[str, Any], next_nodes: tuple,
                         sent: bool, figures: Figures) -> Outcome:
        """A thread after one graph invocation that sent a request (`sent`) or not.

        A request that failed (`progress.outcome` `error`) is reported with the stored
        error and exit 6 (3 when it spent the last attempt); an attempt that could not
        be claimed (a full request cap) is `held_back`.
        """
        outcome = cls.from_state(thread_id, values, next_nodes, figures)
        progress = values["progress"]
        if not sent and progress.get("outcome") == "not_sent":
            outcome.held_back = True
        elif sent and progress.get("outcome") == "error":
            error = progress["last_error"]
            outcome.error, outcome.error_code = error["message"], ErrorCode(error["error_code"])
            if outcome.status != "exhausted":
                outcome.exit_code = ExitCode.REQUEST_FAILED
        return outcome

    @classmethod
    def step_failed(cls, thread_id: str, values: dict[str, Any], next_nodes: tuple,
                    exc: Exception, figures: Figures) -> Outcome:
        """A step that stored its output but failed before routing (exit 6, `step_failed`)."""
        outcome = cls.from_state(thread_id, values, next_nodes, figures)
        outcome.error = (f"the step failed after its output was stored ({type(exc).__name__}: "
                         f"{exc}); the output is kept and the next run continues from it")
        outcome.error_code = ErrorCode.STEP_FAILED
        if outcome.exit_code == ExitCode.OK:
            outcome.exit_code = ExitCode.REQUEST_FAILED
        return outcome

    @classmethod
    def from_error(cls, thread_id: str | None, exc: RunError) -> Outcome:
        """An outcome for an invocation refused or failed before reaching the thread."""
        return cls(thread_id if thread_id is not None else exc.thread_id, exc.exit_code,
                   error=exc.message, error_code=exc.error_code)

    def succeeded(self) -> Outcome:
        """This outcome as a success (exit 0, no error): a cancellation that took effect."""
        self.exit_code, self.error, self.error_code = ExitCode.OK, None, None
        return self

    def to_json(self) -> str:
        r"""One JSON object, on one line: exactly what `graph.run --json` prints.

        Control characters in values (C1 such as U+009B, bidirectional such as U+202E,
        which `json.dumps` leaves raw) are written as their JSON `\uXXXX` escapes
        (`graph.text.escape_controls`): the text decodes to the same values and
        never drives a terminal it is printed on.
        """
        data = asdict(self)
        data.pop("next_nodes")
        data.pop("held_back")
        data.pop("note")
        data["exit_code"] = int(self.exit_code)
        data["review_required"] = self.answer is not None
        return escape_controls(json.dumps(data, ensure_ascii=False, sort_keys=True))

    def to_text(self, *, with_error: bool = True) -> str:
        """A short status for people: thread, status, attempts; answer when done.

        Args:
            with_error: Include the `error (CODE): MESSAGE` line (`graph.run` prints it on
                stderr by itself, as every entry point prints its error line).
        """
        if self.status is None:
            return error_line(self.error_code, self.error) if with_error else ""
        tokens = ""
        if self.max_tokens is not None and self.usage is not None:
            tokens = f", tokens {self.usage.get('total_tokens', 0)}/{self.max_tokens}"
        lines = [
            f"thread {self.thread_id}: {self.status} "
            f"(attempts {self.attempts}/{self.max_attempts}{tokens}, model {self.model})"
        ]
        if self.note:
            lines.append(self.note)
        if self.stop_reason:
            hint = stop_hint(self.stop_reason)
            hint = hint if hint and hint not in (self.error or "") else None  # said once
            lines.append(f"stopped: {self.stop_reason}" + (f" ({hint})" if hint else ""))
        if self.error and with_error:
            lines.append(error_line(self.error_code, self.error))
        if self.answer is not None:
            lines += [f"answer: {self.answer}", REVIEW_REMINDER]
        elif self.partial_answer is not None:
            lines.append(f"partial answer (cut off by the token limit, not an answer): "
                         f"{self.partial_answer}")
        elif self.status == "ready" and self.next_nodes:
            lines.append(f"next: {', '.join(self.next_nodes)} (run again to continue)")
        for call in self.pending_calls or []:
            lines += [f"pending write {call['tool_call_id']} ({call['decision'] or 'undecided'}): "
                      f"{call['name']} sha256={call['sha256']}", f"  arguments: {call['arguments']}"]
        if self.pending_calls:
            lines.append("decide with --approve CALL_ID or --reject CALL_ID [--reason TEXT]")
        return "\n".join(lines)
