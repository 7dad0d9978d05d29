"""Exit codes and error codes of every entry point, defined once. Scripts depend on them.

The README's exit-code table is `ExitCode` and its error-code list is `ErrorCode`
(`tests/test_bad_input.py` checks both directions).
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


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
        ErrorCode.NOT_REPLAYABLE)},
    ErrorCode.BUSY: ExitCode.BUSY,
    **{code: ExitCode.REQUEST_FAILED for code in (
        ErrorCode.TIMEOUT, ErrorCode.CONNECTION, ErrorCode.HTTP_STATUS, ErrorCode.BAD_RESPONSE,
        ErrorCode.DB_LOST, ErrorCode.DB_WRITE_FAILED, ErrorCode.STEP_FAILED,
        ErrorCode.WAL_BUSY)},
    ErrorCode.BATCH_CAP: ExitCode.BATCH_CAP,
    ErrorCode.INTERRUPTED: ExitCode.INTERRUPTED,
}
