"""Checking a whole checkpoint database: SQLite's full integrity check, then every thread.

The function behind `python -m graph.verify` and `graph.api.verify_database`. It
opens the database itself, after the file-level check: a file that an ordinary open
would refuse is reported as problems, not as a failure to open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graph.checkpoints.load import LedgerWithoutCheckpoint, check_stored_thread, graph_of
from graph.errors import ErrorCode, RefusedError
from graph.store import integrity_problems, open_store

__all__ = ["StudioDatabaseError", "VerifyReport", "check_database"]


class StudioDatabaseError(RefusedError):
    """The database of Studio's ledger, not a checkpoint database (`studio_db`, exit 4).

    Attributes:
        threads: The threads found: each counts attempts and has no checkpoint here.
    """

    def __init__(self, location: str, threads: int) -> None:
        super().__init__(
            f"is the ledger database of LangGraph Studio (langgraph dev), not a checkpoint "
            f"database: its {threads} thread(s) count attempts but have no checkpoint here, "
            "because Studio's checkpoints are in the server's own storage (.langgraph_api/), "
            "which graph.verify cannot check; the ledger rows read back intact. If this is "
            "not Studio's database, its checkpoints were deleted",
            error_code=ErrorCode.STUDIO_DB, location=location)
        self.threads = threads


@dataclass
class VerifyReport:
    """What `check_database` found: the problems, and how much it read.

    Attributes:
        problems: One line per problem (empty when intact), in the order found: the
            file-level lines first, then each thread's, by thread id.
        threads: Live threads checked (with checkpoints or ledger rows; a pruned thread
            whose checkpoints are gone is counted in `pruned` instead); 0 when the
            file-level check found problems (threads are then not read).
        checkpoints: Checkpoints of those threads read and checked.
        pruned: Pruned threads remembered by their tombstone alone (checked too).
    """

    problems: list[str] = field(default_factory=list)
    threads: int = 0
    checkpoints: int = 0
    pruned: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing was found."""
        return not self.problems


def check_database(db: str, name: str = "--db") -> VerifyReport:
    """Checks database `db` whole, listing every problem instead of stopping at the first.

    On SQLite, `PRAGMA integrity_check` first (slow on large files, which is why an
    ordinary step does only a bounded check); when it finds problems, they are the
    report. Then every thread is read the way `graph.run` reads it (checksums, strict
    decoding, schema, ledger cross-checks), with every older checkpoint of its history.
    Reads only.

    Args:
        db: A SQLite file path or a `postgresql://` URL.
        name: How a refusal of `db` itself names it (`--db`, or `db` from `graph.api`).

    Raises:
        RefusedError: The file is missing or not a checkpoint database at all;
            `StudioDatabaseError` (`studio_db`) for the database of Studio's ledger,
            whose every thread counts attempts without a checkpoint.
        UsageError: `db` is not a usable path or URL, or may not be read by this user.
    """
    report = VerifyReport(integrity_problems(db, name))
    if report.problems:
        return report
    ledger_only = 0
    with open_store(db, create=False, read_only=True, name=name) as store:
        for thread_id in store.thread_ids():
            tombstone = None
            try:  # a tombstone graph.run would refuse to read is a problem
                tombstone = store.tombstones.get(thread_id)
                loaded = check_stored_thread(store, graph_of(store), thread_id)
                if loaded is not None and not loaded.finished and store.carries_ttl(
                        thread_id):
                    report.problems.append(
                        f"thread {thread_id!r} can continue but its keys carry a time-to-live "
                        "or an expiry mark: it would be lost when they expire; its next step "
                        "takes them off")
            except LedgerWithoutCheckpoint as exc:  # a Studio thread, or lost checkpoints
                report.problems.append(exc.message)
                ledger_only += 1
            except RefusedError as exc:
                report.problems.append(exc.message)
            checkpoints = store.count_checkpoints(thread_id)
            report.checkpoints += checkpoints
            if tombstone is not None and not checkpoints:
                report.pruned += 1
            else:
                report.threads += 1
        if report.problems and ledger_only == len(report.problems) == report.threads:
            raise StudioDatabaseError(store.location, ledger_only)
    return report
