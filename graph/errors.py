"""Errors that end an invocation with a documented exit code and `error_code`."""

from __future__ import annotations

from graph.exitcodes import ExitCode


class RunError(Exception):
    """An invocation refused or failed in a known way.

    Attributes:
        exit_code: The process exit code (`graph.exitcodes.ExitCode`).
        error_code: A short stable name for `--json` output.
        message: One line for people: names what was wrong (file, thread, field).
    """

    exit_code: ExitCode = ExitCode.UNEXPECTED
    error_code: str = "unexpected"

    def __init__(self, message: str, *, error_code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_code is not None:
            self.error_code = error_code


class UsageError(RunError):
    """Bad arguments or configuration; raised before anything is counted (exit 2)."""

    exit_code = ExitCode.USAGE
    error_code = "usage"


class RefusedError(RunError):
    """Stored data refused (exit 4); the stored data is left as it was.

    Error codes: `identity_mismatch`, `no_such_thread`, `no_such_file`, `damaged`,
    `incompatible`.
    """

    exit_code = ExitCode.REFUSED
    error_code = "damaged"


class BusyError(RunError):
    """Another process holds the thread's writer lock (exit 5); nothing was counted."""

    exit_code = ExitCode.BUSY
    error_code = "busy"

    @classmethod
    def for_thread(cls, thread_id: str) -> BusyError:
        """The error for a thread whose writer lock another process holds."""
        return cls(f"thread {thread_id!r} is busy: another process is working on it")


class SecondNameError(UsageError):
    """The SQLite database file has a second name (exit 2); nothing was counted."""

    error_code = "db_second_name"


class NotDurableError(RunError):
    """A claim could not be made durable in the database file (exit 6); nothing was sent.

    The attempt stays counted and claimed (spent): the budget never gains from it.
    """

    exit_code = ExitCode.REQUEST_FAILED
    error_code = "wal_busy"
