"""Errors that end an invocation with a documented exit code and `error_code`."""

from __future__ import annotations

from graph.exitcodes import ErrorCode, ExitCode


class RunError(Exception):
    """An invocation refused or failed in a known way.

    Attributes:
        exit_code: The process exit code (`graph.exitcodes.ExitCode`).
        error_code: A short stable name for `--json` output (`graph.exitcodes.ErrorCode`).
        message: One line for people: names what was wrong (file, thread, field).
    """

    exit_code: ExitCode = ExitCode.UNEXPECTED
    error_code: str = ErrorCode.UNEXPECTED

    def __init__(self, message: str, *, error_code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_code is not None:
            self.error_code = ErrorCode(error_code)


class UsageError(RunError):
    """Bad arguments or configuration; raised before anything is counted (exit 2)."""

    exit_code = ExitCode.USAGE
    error_code = ErrorCode.USAGE


class RefusedError(RunError):
    """Stored data refused (exit 4); the stored data is left as it was.

    Error codes: `identity_mismatch`, `no_such_thread`, `no_such_file`, `damaged`,
    `incompatible`, `pruned`, `cancelled`, `tampered`, `conflict`, `exists`.
    """

    exit_code = ExitCode.REFUSED
    error_code = ErrorCode.DAMAGED


class BusyError(RunError):
    """Another process holds the thread's writer lock (exit 5); nothing was counted."""

    exit_code = ExitCode.BUSY
    error_code = ErrorCode.BUSY

    @classmethod
    def for_thread(cls, thread_id: str) -> BusyError:
        """The error for a thread whose writer lock another process holds."""
        return cls(f"thread {thread_id!r} is busy: another process is working on it")


class DatabaseLostError(RunError):
    """The database was lost or could not be written during a step (exit 6).

    `db_lost`: the PostgreSQL connection went away; `db_write_failed`: SQLite could not
    write (disk full, I/O error, its write lock held past the busy timeout).

    An attempt counted before the loss stays counted; nothing is sent after it, since
    the claim before a request needs the connection.
    """

    exit_code = ExitCode.REQUEST_FAILED
    error_code = ErrorCode.DB_LOST


class SecondNameError(UsageError):
    """The SQLite database file has a second name (exit 2); nothing was counted."""

    error_code = ErrorCode.DB_SECOND_NAME


class NotDurableError(RunError):
    """A claim could not be made durable in the database file (exit 6); nothing was sent.

    The attempt stays counted and claimed (spent): the budget never gains from it.
    """

    exit_code = ExitCode.REQUEST_FAILED
    error_code = ErrorCode.WAL_BUSY
