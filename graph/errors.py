"""Errors that end an invocation, and the exit codes and error codes they carry.

Exit codes and error codes of every entry point are defined here once; scripts depend
on them. The README's exit-code table is `ExitCode` and its error-code list is
`ErrorCode` (`tests/cli/test_bad_input.py` checks both directions).

An error is data: its code (`ErrorCode`), what went wrong (`detail`), and where
(`location`: the database or file; `thread_id`; `checkpoint_id`). The one line people
read is formatted once, by `RunError.message`; a layer that knows where an error
happened fills that in with `RunError.at` instead of re-wrapping its text.
"""

from __future__ import annotations

import sys
from enum import IntEnum, StrEnum
from typing import Any, Self

__all__ = [
    "BusyError", "DatabaseLostError", "ErrorCode", "ExitCode", "NotDurableError", "RefusedError",
    "RunError", "SecondNameError", "SignalledError", "UsageError", "error_line",
    "missing_dependency",
]


class ExitCode(IntEnum):
    """Process exit codes."""

    OK = 0
    """The step ran, or the task is done."""
    UNEXPECTED = 1
    """An unexpected error (a bug); the counted attempt stays counted."""
    USAGE = 2
    """Usage or configuration error; nothing was counted."""
    EXHAUSTED = 3
    """The budget is spent without an answer; no request was or will be made."""
    REFUSED = 4
    """Stored data refused: identity mismatch, no such thread or file, damaged, ..."""
    BUSY = 5
    """Another process is working on the thread; nothing was counted."""
    REQUEST_FAILED = 6
    """The step failed after counting: the model request (timeout, HTTP status, refused
    reply, ...), the database connection (`db_lost`), or the step after storing its
    output (`step_failed`); the attempt is counted."""
    AWAITING_APPROVAL = 7
    """The thread waits for a person to approve a call."""
    BATCH_CAP = 8
    """A batch's shared request cap (`--max-requests`) stopped it."""
    INTERRUPTED = 130
    """Stopped by SIGINT or SIGTERM; a counted attempt stays counted."""


class ErrorCode(StrEnum):
    """Every `error_code` an entry point can report; `exit_code` gives its exit code.

    A `StrEnum`, so a code compares equal to its plain string (`"damaged"`) and prints
    as one in JSON.
    """

    UNEXPECTED = "unexpected"
    USAGE = "usage"
    NO_SUCH_WORKSPACE = "no_such_workspace"
    DB_UNREACHABLE = "db_unreachable"
    DB_NOT_DURABLE = "db_not_durable"
    PERMISSION_DENIED = "permission_denied"
    IDENTITY_MISMATCH = "identity_mismatch"
    NO_SUCH_THREAD = "no_such_thread"
    NO_SUCH_FILE = "no_such_file"
    DAMAGED = "damaged"
    INCOMPATIBLE = "incompatible"
    PRUNED = "pruned"
    CANCELLED = "cancelled"
    TAMPERED = "tampered"
    CONFLICT = "conflict"
    EXISTS = "exists"
    NOT_REPLAYABLE = "not_replayable"
    STUDIO_DB = "studio_db"
    BUSY = "busy"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    HTTP_STATUS = "http_status"
    BAD_RESPONSE = "bad_response"
    DB_LOST = "db_lost"
    DB_WRITE_FAILED = "db_write_failed"
    STEP_FAILED = "step_failed"
    WAL_BUSY = "wal_busy"
    DB_SECOND_NAME = "db_second_name"
    BATCH_CAP = "batch_cap"
    CONTENT_FILTER = "content_filter"
    INTERRUPTED = "interrupted"

    @property
    def exit_code(self) -> ExitCode:
        """The exit code this error ends with (a failed request on the last attempt: 3)."""
        return _EXIT[self]


_EXIT = {
    ErrorCode.UNEXPECTED: ExitCode.UNEXPECTED,
    ErrorCode.USAGE: ExitCode.USAGE,
    ErrorCode.NO_SUCH_WORKSPACE: ExitCode.USAGE,
    ErrorCode.DB_UNREACHABLE: ExitCode.USAGE,
    ErrorCode.DB_NOT_DURABLE: ExitCode.USAGE,
    ErrorCode.PERMISSION_DENIED: ExitCode.USAGE,
    ErrorCode.DB_SECOND_NAME: ExitCode.USAGE,
    **{code: ExitCode.REFUSED for code in (
        ErrorCode.IDENTITY_MISMATCH, ErrorCode.NO_SUCH_THREAD, ErrorCode.NO_SUCH_FILE,
        ErrorCode.DAMAGED, ErrorCode.INCOMPATIBLE, ErrorCode.PRUNED, ErrorCode.CANCELLED,
        ErrorCode.TAMPERED, ErrorCode.CONFLICT, ErrorCode.EXISTS,
        ErrorCode.NOT_REPLAYABLE, ErrorCode.STUDIO_DB)},
    ErrorCode.BUSY: ExitCode.BUSY,
    **{code: ExitCode.REQUEST_FAILED for code in (
        ErrorCode.TIMEOUT, ErrorCode.CONNECTION, ErrorCode.HTTP_STATUS, ErrorCode.BAD_RESPONSE,
        ErrorCode.DB_LOST, ErrorCode.DB_WRITE_FAILED, ErrorCode.STEP_FAILED,
        ErrorCode.WAL_BUSY)},
    ErrorCode.BATCH_CAP: ExitCode.BATCH_CAP,
    ErrorCode.CONTENT_FILTER: ExitCode.EXHAUSTED,
    ErrorCode.INTERRUPTED: ExitCode.INTERRUPTED,
}


class RunError(Exception):
    """An invocation refused or failed in a known way.

    Attributes:
        error_code: A short stable name for `--json` output (`graph.errors.ErrorCode`);
            it decides the exit code (`exit_code`).
        detail: What was wrong, without where.
        location: The database (path or redacted URL), tasks file or queue the error is
            about, or None.
        thread_id: The thread the error is about, or None.
        checkpoint_id: The checkpoint the error is about, or None.
    """

    error_code: ErrorCode = ErrorCode.UNEXPECTED

    def __init__(self, detail: str, *, error_code: ErrorCode | None = None,
                 location: str | None = None, thread_id: str | None = None,
                 checkpoint_id: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.location = location
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        if error_code is not None:
            self.error_code = ErrorCode(error_code)

    def at(self, *, location: str | None = None, thread_id: str | None = None,
           checkpoint_id: str | None = None) -> Self:
        """Records where the error happened, keeping what is already known; returns self."""
        self.location = self.location or location
        self.thread_id = self.thread_id or thread_id
        self.checkpoint_id = self.checkpoint_id or checkpoint_id
        return self

    @property
    def exit_code(self) -> ExitCode:
        """The process exit code, from the one table in `graph.errors`."""
        return self.error_code.exit_code

    @property
    def message(self) -> str:
        """One line for people: `LOCATION: thread 'ID': checkpoint ID: DETAIL` (parts known)."""
        parts = [self.location or "",
                 f"thread {self.thread_id!r}" if self.thread_id is not None else "",
                 f"checkpoint {self.checkpoint_id}" if self.checkpoint_id is not None else ""]
        return ": ".join([*(p for p in parts if p), self.detail])

    def __str__(self) -> str:
        return self.message

    def fields(self) -> dict[str, Any]:
        """The shared JSON error fields of every entry point: `error`, `error_code`, `exit_code`."""
        return {"error": self.message, "error_code": str(self.error_code),
                "exit_code": int(self.exit_code)}


def error_line(error_code: ErrorCode | str | None, message: str | None) -> str:
    """The one stderr line of a failure: `error (CODE): MESSAGE`."""
    return f"error ({error_code}): {message}"


class UsageError(RunError):
    """Bad arguments or configuration; raised before anything is counted (exit 2)."""

    error_code = ErrorCode.USAGE


class RefusedError(RunError):
    """Stored data refused (exit 4); the stored data is left as it was.

    Error codes: `identity_mismatch`, `no_such_thread`, `no_such_file`, `damaged`,
    `incompatible`, `pruned`, `cancelled`, `tampered`, `conflict`, `exists`.
    """

    error_code = ErrorCode.DAMAGED


class BusyError(RunError):
    """Another process holds the thread's writer lock (exit 5); nothing was counted."""

    error_code = ErrorCode.BUSY

    @classmethod
    def for_thread(cls, thread_id: str) -> BusyError:
        """The error for a thread whose writer lock another process holds."""
        return cls("another process is working on it", thread_id=thread_id)


class DatabaseLostError(RunError):
    """The database was lost or could not be written during a step (exit 6).

    `db_lost`: the PostgreSQL connection went away; `db_write_failed`: SQLite could not
    write (disk full, I/O error, its write lock held past the busy timeout).

    An attempt counted before the loss stays counted; nothing is sent after it, since
    the claim before a request needs the connection.
    """

    error_code = ErrorCode.DB_LOST


class SecondNameError(UsageError):
    """The SQLite database file has a second name (exit 2); nothing was counted."""

    error_code = ErrorCode.DB_SECOND_NAME


class NotDurableError(RunError):
    """A claim could not be made durable in the database file (exit 6); nothing was sent.

    The attempt stays counted and claimed (spent): the budget never gains from it.
    """

    error_code = ErrorCode.WAL_BUSY


class SignalledError(RunError):
    """Stopped by SIGINT or SIGTERM (exit 130); a counted attempt stays counted."""

    error_code = ErrorCode.INTERRUPTED


_EXTRAS = (  # a missing module's dotted name -> the extra that installs it ("" the base install)
    ("langgraph.checkpoint.postgres", "postgres"), ("psycopg", "postgres"),
    ("psycopg_pool", "postgres"), ("procrastinate", "postgres"),
    ("langgraph.checkpoint.redis", "redis"), ("redis", "redis"), ("redisvl", "redis"),
    ("vcr", "replay"), ("langgraph_api", "studio"), ("langgraph_cli", "studio"),
)


def missing_dependency(exc: BaseException) -> UsageError | None:
    """The usage error (exit 2) for a module this Python cannot import, or None.

    A `ModuleNotFoundError` for anything but this project's own packages (`graph`,
    `nodes`, whose absence is a broken installation, reported as a bug) means the command
    runs on a Python without the project's dependencies: another interpreter than the
    virtual environment's, or an extra not installed. The message names the module, this
    Python, and the install command with the extra that brings the module.
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    name = exc.name
    if name.split(".")[0] in ("graph", "nodes"):
        return None
    extra = next((extra for prefix, extra in _EXTRAS
                  if name == prefix or name.startswith(prefix + ".")), "")
    target = f"'.[{extra}]'" if extra else "."
    return UsageError(f"this Python ({sys.executable}) cannot import {name!r}: the project's "
                      f"dependencies are not installed here; run the command with the virtual "
                      f"environment's Python (.venv/bin/python), or install them: pip install -e "
                      f"{target}" + (f" (the {extra} extra)" if extra else ""))
