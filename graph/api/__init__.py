"""The public Python API: what the command line does, as typed functions.

    from graph.api import open_database

    with open_database("checkpoints.sqlite", create=True) as db:
        outcome = db.run("task_abc", task="How long does shipping take at the demo shop?")
        print(outcome.status, outcome.attempts, outcome.answer)
        print(db.history("task_abc")["steps"])

Each method runs the shared function behind `graph.run`, `graph.history`, `graph.prune`,
`graph.verify`, `graph.copy` or `graph.batch` (every promise of the README holds; those
commands are thin layers over these calls), returns what the command prints and raises
a `RunError` subclass, with `error_code` and `exit_code`, for every refusal. A refusal
of a setting names it as you spelled it (`max_attempts`, `db`, `live=True`), where the
command names its flag (`--max-attempts`).

Arguments are checked before anything is opened, counted or written (`graph.api._args`):
an unknown keyword, a missing argument or a value of the wrong type is a `UsageError`
(exit 2, `usage`) naming the keyword and what it got, never a `TypeError`. Types are
strict: a flag (`once`, `create`, ...) takes only True or False, a whole number only an
int (not True or "5"), a timeout an int or a float; a path (`db`, `workspace`) may be a
str or an `os.PathLike` such as `pathlib.Path`.

Calls on one `Database` run one at a time (a lock): it holds one connection. The
`a…` variants (`arun`, `ahistory`, ...) are for async callers (FastAPI, notebooks);
they run the same synchronous call in a worker thread (`asyncio.to_thread`) over the
synchronous savers, so they do not block the event loop but are not natively async.
"""

from __future__ import annotations

import os

from graph.api._args import check_callable, checked_call
from graph.api._database import Database, ModelFactory, verify_database
from graph.errors import (
    BusyError,
    DatabaseLostError,
    ErrorCode,
    ExitCode,
    RefusedError,
    RunError,
    SecondNameError,
    UsageError,
)
from graph.outcome import Outcome
from graph.settings import check_flag, check_path, check_seconds, resolve_settings
from graph.threads.retention import Candidate, PruneReport
from graph.threads.verification import VerifyReport

__all__ = [
    "BusyError",
    "Candidate",
    "Database",
    "DatabaseLostError",
    "ErrorCode",
    "ExitCode",
    "Outcome",
    "PruneReport",
    "RefusedError",
    "RunError",
    "SecondNameError",
    "UsageError",
    "VerifyReport",
    "open_database",
    "verify_database",
]


@checked_call
def open_database(db: str | os.PathLike[str] | None = None, *, create: bool = False,
                  read_only: bool = False, live: bool = False, timeout_s: float | None = None,
                  model_factory: ModelFactory | None = None) -> Database:
    """A checkpoint database to open with `with` (or `async with`).

    Args:
        db: A SQLite file path (a str or an `os.PathLike` such as `pathlib.Path`) or a
            `postgresql://` URL; None: `$GRAPH_DB`, else `./checkpoints.sqlite` (as `--db`).
        create: Allow creating a missing SQLite file (only to create threads); resuming
            never needs it, and a missing file is refused (`no_such_file`).
        read_only: Never write (history, listing, verify): read access is enough.
        live: Allow paid MandAPI requests (`--live`; needs `MANDAPI_API_KEY`).
        timeout_s: MandAPI request timeout (default `$MANDAPI_TIMEOUT`, else 60).
        model_factory: Builds the chat model for a thread's model id (tests inject a
            fake); default `graph.step.models.make_model`.

    Returns:
        An unopened `Database`; `with` opens it and closes it on exit.

    Raises:
        UsageError: A bad setting (checked now, before anything is opened), named as
            the keyword (`db is empty`, `live=True needs MANDAPI_API_KEY`); an unknown
            keyword, or a value of the wrong type (`create must be True or False, not
            'yes'`, `timeout_s` given as text).
    """
    path = check_path(db, "db")
    for key, flag in (("create", create), ("read_only", read_only), ("live", live)):
        check_flag(flag, key)
    check_seconds(timeout_s, "timeout_s")
    check_callable(model_factory, "model_factory")
    settings = resolve_settings(db=path, live=live, timeout_s=timeout_s, source="keywords")
    return Database(settings, create=create, read_only=read_only, model_factory=model_factory)
