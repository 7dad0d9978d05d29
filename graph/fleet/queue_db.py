"""The queue's database and settings: which PostgreSQL database holds it, checked first.

The queue is in the checkpoint database when that is PostgreSQL; checkpoints in Redis
keep their queue in a PostgreSQL database of its own (`--queue-db` when enqueueing,
`GRAPH_QUEUE_DB` for workers; procrastinate runs on PostgreSQL only). Importing this
module imports neither procrastinate nor a database driver, so a refusal here needs
neither installed.
"""

from __future__ import annotations

import math
import os
import sys

from graph.errors import RunError, UsageError, error_line
from graph.store import holds_queue, open_queue_db, open_store, reached_by_workers

__all__ = [
    "QUEUE_DB_ENV",
    "check_worker",
    "env_seconds",
    "queue_db",
]

QUEUE_DB_ENV = "GRAPH_QUEUE_DB"
"""The PostgreSQL URL of the queue when it is not the checkpoint database `GRAPH_DB`."""


def queue_db(db: str, flag: str | None = None) -> str:
    """The queue's database: `flag` (`--queue-db`), else `$GRAPH_QUEUE_DB`, else `db`.

    Args:
        db: The checkpoint database (`--db`).
        flag: `--queue-db` as given, or None.

    Raises:
        UsageError: `flag` is empty, the queue would not be PostgreSQL, the checkpoints
            are in a SQLite file (one machine's: workers elsewhere could not reach it),
            or procrastinate is not installed (the postgres extra) (exit 2).
    """
    if flag is not None and not flag.strip():
        raise UsageError("--queue-db is empty: give the queue's postgresql:// URL, or leave "
                         f"it out to use ${QUEUE_DB_ENV}, else --db")
    if not reached_by_workers(db):
        raise UsageError("--enqueue needs a PostgreSQL or Redis --db that every worker reaches; "
                         "a SQLite file is one machine's: run the batch without --enqueue")
    url = flag or os.environ.get(QUEUE_DB_ENV) or db
    if not holds_queue(url):
        raise UsageError("the queue lives in PostgreSQL (procrastinate): give --queue-db "
                         f"postgresql://... or {QUEUE_DB_ENV} beside a Redis --db")
    try:
        import procrastinate  # noqa: PLC0415, F401 (procrastinate: the postgres extra)
    except ImportError:
        raise UsageError("--enqueue needs the postgres extra (procrastinate, psycopg): "
                         "pip install -e '.[postgres]'") from None
    return url


def check_worker(queue_url: str, *, checkpoints: bool = True) -> None:
    """Ends a worker process that could only fail: exit 2 with one `error (CODE)` line.

    Called before procrastinate connects (`graph.fleet.jobs.QueueApp.open_async`: the queue
    URL, and the queue reached once) and before the first job is taken
    (`run_worker_async`: also `GRAPH_DB`, opened once as a step would), so a
    misconfigured worker neither retries a connection forever, nor exits 1 when
    procrastinate's pool gives up, nor takes jobs it can only end.

    Args:
        queue_url: The app's queue URL (`GRAPH_QUEUE_DB`, else `GRAPH_DB`).
        checkpoints: Also check `GRAPH_DB`, the checkpoint database.

    Raises:
        SystemExit: The refusal's exit code (2), after its error line on stderr.
    """
    try:
        if not holds_queue(queue_url):
            raise UsageError(f"the queue worker's queue is procrastinate's, in PostgreSQL: set "
                             f"{QUEUE_DB_ENV}=postgresql://... (or GRAPH_DB, when the "
                             "checkpoints are there too)")
        if not checkpoints:
            open_queue_db(queue_url).close()
            return
        db = os.environ.get("GRAPH_DB", "")
        if not db.strip():
            raise UsageError("the queue worker needs GRAPH_DB (the checkpoint database's URL)")
        with open_store(db, create=True):  # as the first step would: refused now, not per job
            pass
    except RunError as exc:
        print(error_line(exc.error_code, f"the queue worker cannot start: {exc.message}"),
              file=sys.stderr, flush=True)
        raise SystemExit(int(exc.exit_code)) from None


def env_seconds(name: str, default: float) -> float:
    """A positive, finite number of seconds from environment variable `name`, or `default`.

    Raises:
        UsageError: The value is not a positive finite number (exit 2).
    """
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be a positive number of seconds, not {raw[:40]!r}")
    return value
