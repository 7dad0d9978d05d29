"""Exit codes of every entry point, defined once. Scripts and schedulers depend on them.

The README's exit-code table is this table.
"""

from __future__ import annotations

from enum import IntEnum


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
    """The model request failed (timeout, HTTP status, refused reply, ...), or the step
    failed after storing its output (`step_failed`); the attempt is counted."""
    AWAITING_APPROVAL = 7
    """The thread waits for a person to approve a call."""
    BATCH_CAP = 8
    """A batch's shared request cap (`--max-requests`) stopped it."""
    INTERRUPTED = 130
    """Stopped by SIGINT or SIGTERM; a counted attempt stays counted."""
