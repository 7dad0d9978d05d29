"""Run a set of tasks: each line of a JSON-lines file is a thread, advanced like graph.run.

  python -m graph.batch TASKS.jsonl [--db PATH_OR_URL] [--once] [--live] [--out RESULTS.jsonl]
                        [--max-requests N] [--batch-id NAME] [--parent ID]
                        [--enqueue [--queue-db URL]]

Each line: {"thread_id": ..., "task": ...} plus optional model, max_attempts,
max_tokens, context_tokens, keep_checkpoints (a number or "all"), workspace,
allow_writes. With --parent ID, lines carry only the task and the subtasks become
threads ID:sub_0, ID:sub_1, ...; the parent's result lists their answers in order once
all are finished. Finished threads are not run again; a thread busy in another process
is skipped for now. --max-requests caps the model requests of the whole batch (cap named
by --batch-id, default the tasks file's name; with --parent, parent:ID), counted durably
before each request and never reset. --enqueue puts one job per thread on the
procrastinate queue for workers instead of running here (a thread whose step job
already waits is left as it is, so enqueueing twice is harmless); the queue is in the
PostgreSQL --db, or with a Redis --db in the PostgreSQL database of --queue-db (or
$GRAPH_QUEUE_DB).

exit codes: 0 every thread advanced or finished; 2 usage error, every bad line listed
(nothing counted); 8 the request cap stopped the batch; otherwise the exit code of the
first thread that failed (3 stopped by a model error such as model_not_found, 4 refused,
6 request failed, ...; see the results).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from graph.api import Database
from graph.cli import Parser, emit, guard, resolve_db, whole_number
from graph.errors import UsageError, error_line
from graph.fleet.batch import Progress
from graph.fleet.queue_db import queue_db
from graph.fleet.request_cap import check_cap_id, check_max_requests
from graph.fleet.tasks_file import read_tasks
from graph.output_file import check_output_path, write_atomic
from graph.settings import check_thread_id, resolve_settings, scrub_key
from graph.step.tracing import flush_traces, watch_uploads
from graph.text import without_key
from graph.threads.subtasks import parent_result, render_parent

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Runs (or enqueues) the batch and prints progress and a summary; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser("python -m graph.batch", __doc__)
    parser.add_argument("tasks", type=Path, help="JSON-lines tasks file")
    parser.add_db()
    parser.add_argument("--once", action="store_true", help="one step per thread")
    parser.add_argument("--live", action="store_true", help="allow real, paid MandAPI requests")
    parser.add_argument("--out", type=Path, help="write one JSON line per thread here")
    parser.add_argument("--max-requests", type=whole_number, metavar="N", help="cap on the batch's requests")
    parser.add_argument("--batch-id", help="name of the request cap (default: tasks file name)")
    parser.add_argument("--parent", metavar="ID", help="run the lines as subtasks of thread ID")
    parser.add_argument("--enqueue", action="store_true",
                        help="put one job per thread on the PostgreSQL queue for workers")
    parser.add_argument("--queue-db", metavar="URL",
                        help="the queue's PostgreSQL database, when --db is Redis "
                             "(default: $GRAPH_QUEUE_DB, else --db)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_trace()
    as_json = "--json" in argv
    if "--trace" in argv:  # LangSmith's upload failures: one line at the end (graph.step.tracing)
        watch_uploads()
    try:
        return guard(lambda: _run(parser, argv, as_json), as_json)
    finally:
        if "--trace" in argv:
            flush_traces()


def _run(parser: Parser, argv: list[str], as_json: bool) -> int:
    args = parser.parse_args(argv)
    if args.parent is not None:
        check_thread_id(args.parent)
    if args.out is not None:
        check_output_path(args.out, "--out")
    check_max_requests(args.max_requests)
    items = read_tasks(args.tasks, args.parent, live=args.live)
    settings = resolve_settings(db=resolve_db(args.db), live=args.live, timeout_s=None,
                                trace=args.trace)
    cap_id = args.batch_id if args.batch_id is not None else (
        f"parent:{args.parent}" if args.parent else args.tasks.name)
    check_cap_id(cap_id)
    _check_no_key(cap_id, scrub_key(settings))
    if args.queue_db is not None and not args.enqueue:
        raise UsageError("--queue-db goes with --enqueue (the queue's database)")
    if args.enqueue:
        return _enqueue(args, items, settings, cap_id, as_json)
    progress = Progress(len(items), bar=not as_json)  # --json: plain lines on stderr at most
    try:
        with Database(settings, create=True, source="flags") as db:
            report = db.batch(items, once=args.once, cap_id=cap_id,
                              max_requests=args.max_requests, progress=progress)
    finally:
        progress.close()
    parent = parent_result(args.parent, _subtasks(report.outcomes)) if args.parent else None
    if args.out:
        lines = [o.to_json() for o in report.outcomes]
        if parent is not None:  # the last line: the parent's result
            lines.append(json.dumps({**parent, "thread_id": args.parent},
                                    ensure_ascii=False, sort_keys=True))
        try:
            write_atomic(args.out, without_key("".join(line + "\n" for line in lines)), "--out",
                         private=False)
        except UsageError as exc:  # the batch ran: its threads' state is in the database
            raise UsageError(f"cannot write the results: {exc.detail}; the threads' state is "
                             "stored, see graph.history", location=str(args.out)) from None
    _summary(report, progress, cap_id, parent, as_json)
    return int(report.exit_code)


def _subtasks(outcomes: list[Any]) -> list[dict[str, Any]]:
    return [{"thread_id": o.thread_id, "status": o.status, "answer": o.answer} for o in outcomes]


def _summary(report: Any, progress: Any, cap_id: str, parent: dict[str, Any] | None,
             as_json: bool) -> None:
    if as_json:
        emit(json.dumps({"threads": len(report.outcomes), "statuses": dict(progress.statuses),
                         "errors": dict(progress.errors), "cap_reached": report.cap_reached,
                         "parent": parent, **report.error_fields()}))
        return
    emit(progress.summary())
    if report.cap_reached:
        emit(f"stopped: request cap {cap_id!r} is full")
    if parent is not None:
        emit("\n".join(["", *render_parent(parent)]))
    if report.failure is not None and report.exit_code != 0:  # as graph.run: one line on stderr
        fields = report.error_fields()
        emit(error_line(fields["error_code"], fields["error"]), sys.stderr)


def _enqueue(args: Any, items: list[Any], settings: Any, cap_id: str, as_json: bool) -> int:
    """`--enqueue`: one step job per thread on the queue (`graph.fleet.jobs.enqueue`); exit 0."""
    queue_url = queue_db(settings.db, args.queue_db)  # refused before anything is opened
    from graph.fleet.jobs import enqueue  # noqa: PLC0415 - procrastinate: the postgres extra

    for item in items:  # a queued job stores its task: refuse the key before any is queued
        item.spec.check_no_key(settings)
    done = enqueue(settings.db, items, live=args.live, cap_id=cap_id,
                   max_requests=args.max_requests, queue_url=queue_url)
    already = len(done.already_queued)
    emit(json.dumps({"enqueued": done.queued, "already_queued": already, "exit_code": 0})
         if as_json else f"enqueued {done.queued} thread(s)"
         + (f"; {already} already had a step waiting, left as they were" if already else ""))
    return 0


def _check_no_key(cap_id: str, key: str | None) -> None:
    """Refuses a request cap id holding the API key: it is stored, and queued with each job (I9).

    Raises:
        UsageError: Naming where the id came from, never the key (exit 2).
    """
    if key and key in cap_id:
        raise UsageError("the request cap's id (--batch-id, --parent or the tasks file's name) "
                         "contains the API key (MANDAPI_API_KEY): name the batch with --batch-id")


if __name__ == "__main__":
    sys.exit(main())
