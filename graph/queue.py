"""Many workers on many machines: thread steps as jobs of procrastinate's PostgreSQL queue.

We do not write a claim loop of our own. `python -m graph.batch TASKS --enqueue` puts one
job per thread on procrastinate's queue, by default in the same PostgreSQL database as the
checkpoints; workers on any machine take them, each running up to N steps at once:

  GRAPH_DB=postgresql://... procrastinate --app=graph.queue.app worker --concurrency 8

Checkpoints in Redis keep their queue in a PostgreSQL database of its own (procrastinate
runs on PostgreSQL only): `--queue-db postgresql://...` on `graph.batch --enqueue`, and
`GRAPH_QUEUE_DB` for the workers (`GRAPH_DB=redis://... GRAPH_QUEUE_DB=postgresql://...
procrastinate --app=graph.queue.app worker`). The queue only schedules: every promise
(ledger, one writer per thread, fail-closed loading) is kept by the checkpoint database,
whichever it is. A SQLite file is one machine's, so it takes no queue: run the batch there.

The app, its tasks (`graph.advance_thread`, `graph.recover_stalled`) and enqueueing are
`graph.fleet.jobs`; this module is the name procrastinate's command is given. Importing it
connects to nothing.
"""

from __future__ import annotations

import sys

from graph.cli import emit, report_error, version_line
from graph.errors import UsageError
from graph.fleet.jobs import QueueApp, make_app

__all__ = ["app", "main"]

app: QueueApp = make_app()
"""The app for procrastinate's own worker command (`--app=graph.queue.app`)."""


def main(argv: list[str] | None = None) -> int:
    """`python -m graph.queue`: this module is procrastinate's app, not a command.

    `--help` prints how workers are started and `--version` the version (exit 0);
    anything else is a usage error naming the worker command (exit 2), in the one error
    shape (JSON with `--json`). It printed nothing and exited 0.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        emit((__doc__ or "").strip())
        return 0
    if argv[:1] == ["--version"]:
        emit(version_line())
        return 0
    return report_error(UsageError(
        "graph.queue is the queue's app, not a command: start a worker with "
        "GRAPH_DB=postgresql://... procrastinate --app=graph.queue.app worker, and enqueue "
        "with python -m graph.batch TASKS --enqueue (see python -m graph.queue --help)"),
        "--json" in argv)


if __name__ == "__main__":
    sys.exit(main())
