"""Thread steps as jobs of procrastinate's PostgreSQL queue: the app, its two tasks, enqueueing.

`graph.queue` is the face (`procrastinate --app=graph.queue.app worker`); this is what it
runs. `python -m graph.batch TASKS --enqueue` puts one job per thread on the queue
(`enqueue`), by default in the same PostgreSQL database as the checkpoints; checkpoints in
Redis keep their queue in a PostgreSQL database of its own (`graph.fleet.queue_db`). The
queue only schedules: every promise (ledger, one writer per thread, fail-closed loading) is
kept by the checkpoint database, whichever it is.

Each job advances its thread by one step through `graph.step.advance` (ledger, identity,
one writer per thread) and, while the thread can continue, defers the next step. The
task is async: the blocking step runs in a thread of our own on a store kept for the
worker's next jobs (`graph.fleet.worker`), so steps waiting on the model overlap. Jobs
carry a procrastinate `lock` keyed by thread id, so a thread's steps run one at a time,
and a `queueing_lock`, so at most one step of a thread waits in the queue (enqueueing a
thread twice makes one job chain). Procrastinate retries nothing (`retry=False`): the
ledger, not the queue, is the budget. A worker killed mid-step leaves its job `doing`,
which blocks the thread's later jobs until procrastinate's stalled-job recovery (worker
heartbeats; `graph.recover_stalled`, run every minute as a periodic job) requeues it; the
requeued step cannot send an uncounted request, because the ledger decides. The task
names (`graph.advance_thread`, `graph.recover_stalled`) sit in existing queue rows: they
never change. Job logs never show task text (`graph.fleet.queue_logs`). Importing this
module connects to nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

from procrastinate import App, PsycopgConnector, exceptions
from procrastinate.app import WorkerOptions
from procrastinate.jobs import Status
from typing_extensions import Unpack

from graph.checkpoints.load import graph_of, load_thread
from graph.errors import ErrorCode, RefusedError
from graph.fleet.queue_db import QUEUE_DB_ENV, check_worker, env_seconds, queue_db
from graph.fleet.queue_logs import ADVANCE_TASK, log_step, redact_procrastinate
from graph.fleet.request_cap import open_cap
from graph.fleet.worker import STEP_THREADS, close_pools, run_step
from graph.store import open_queue_db, open_store, queue_lock

__all__ = [
    "DEFAULT_QUEUE",
    "Enqueued",
    "HEARTBEAT_ENV",
    "POLL_ENV",
    "QueueApp",
    "STALLED_ENV",
    "enqueue",
    "ensure_schema",
    "make_app",
    "recover_stalled",
]

HEARTBEAT_ENV, STALLED_ENV = "GRAPH_QUEUE_HEARTBEAT_S", "GRAPH_QUEUE_STALLED_S"
"""How often a worker reports it is alive (seconds, default 5), and how long a silent
worker is taken for dead before its `doing` jobs are requeued (seconds, default 30)."""
POLL_ENV = "GRAPH_QUEUE_POLL_S"
"""How often a worker with a free slot looks for a job it was not notified of (seconds,
default 0.5; procrastinate's own default is 5). A thread's next step is queued while
its step job still holds the thread's lock, so its notification finds it locked, and
a worker with free slots would otherwise wait up to this long to take it."""


DEFAULT_QUEUE = "default"
"""Procrastinate's queue for jobs deferred without one."""
_SCHEMA_LOCK = 0x6D72_7173  # advisory-lock key for applying procrastinate's schema once


class QueueApp(App):
    """Procrastinate's `App`, redacting the worker's own logger and closing our stores on stop."""

    queue_url = ""
    """The queue's PostgreSQL URL (`make_app`)."""

    def open_async(self, pool: Any = None) -> Any:
        """`App.open_async`, refusing a queue URL that is not PostgreSQL, or not reached.

        Procrastinate's command opens the app before it runs the worker; a Redis URL in
        `GRAPH_DB` with no `GRAPH_QUEUE_DB` would otherwise retry the connection forever,
        and an unreachable queue end in exit 1 after the pool's timeout (`check_worker`).
        """
        if pool is None:
            check_worker(self.queue_url, checkpoints=False)
        return super().open_async(pool)

    async def run_worker_async(self, **kwargs: Unpack[WorkerOptions]) -> None:
        """Runs a worker (`App.run_worker_async`); see `graph.fleet.queue_logs` and `graph.fleet.worker`."""
        check_worker(self.queue_url)  # before any job is taken
        name = kwargs["name"] if "name" in kwargs else self.worker_defaults.get("name", "worker")
        redact_procrastinate(name)
        try:
            await super().run_worker_async(**kwargs)
        finally:
            close_pools()


def make_app(db: str | None = None) -> QueueApp:
    """A procrastinate app on queue database `db`, with our two tasks.

    `db` defaults to `$GRAPH_QUEUE_DB`, else `$GRAPH_DB` (the checkpoints' database).

    Also keeps task text out of procrastinate's job records from here on
    (`graph.fleet.queue_logs.redact_procrastinate`).
    """
    redact_procrastinate()
    url = db or os.environ.get(QUEUE_DB_ENV) or os.environ.get("GRAPH_DB", "")
    app = QueueApp(connector=PsycopgConnector(conninfo=url),
                   worker_defaults={"update_heartbeat_interval": env_seconds(HEARTBEAT_ENV, 5),
                                    "stalled_worker_timeout": env_seconds(STALLED_ENV, 30),
                                    "fetch_job_polling_interval": env_seconds(POLL_ENV, 0.5)})
    app.queue_url = url

    @app.task(name=ADVANCE_TASK, retry=False, pass_context=True)
    async def advance_thread(context: Any, thread_id: str, fields: dict[str, Any], live: bool,
                             cap_id: str | None, store_id: str | None = None) -> dict[str, Any]:
        # Shielded: a job cancelled while its step runs still queues the thread's next step.
        return await asyncio.shield(_advance(context, thread_id, fields, live, cap_id,
                                             store_id))

    @app.periodic(cron="* * * * *")
    @app.task(name="graph.recover_stalled", queueing_lock="graph.recover_stalled",
              pass_context=True)
    async def recover_stalled_jobs(context: Any, timestamp: int) -> int:
        return await _recover(context.app, env_seconds(STALLED_ENV, 30))

    return app


async def _advance(context: Any, thread_id: str, fields: dict[str, Any], live: bool,
                   cap_id: str | None, store_id: str | None) -> dict[str, Any]:
    """One step of one thread in a step thread (`graph.fleet.worker`); queues the next step.

    Returns:
        The job's result (`graph.fleet.worker.RESULT_KEYS` of the step's outcome).
    """
    start = time.monotonic()
    report = await asyncio.get_running_loop().run_in_executor(
        STEP_THREADS, run_step, os.environ.get("GRAPH_DB") or "", thread_id, fields, live, cap_id,
        store_id)
    if report.again_s is not None:
        try:
            await _next_step(context.app, thread_id, context.job.queue, report.again_s).defer_async(
                thread_id=thread_id, fields=fields, live=live, cap_id=cap_id,
                **({"store_id": store_id} if store_id else {}))
        except exceptions.AlreadyEnqueued:  # enqueued again meanwhile: that job continues
            pass
    log_step(context.job.id, report.result, report.again_s, time.monotonic() - start)
    return report.result


def _next_step(app: App, thread_id: str, queue: str, delay_s: float = 0.0) -> Any:
    """The thread's step job on `queue`, configured (a `JobDeferrer`).

    `lock` keeps two steps of a thread from running together; `queueing_lock` keeps a
    second job of the thread out of the queue while one waits (deferring it raises
    `AlreadyEnqueued`), so enqueueing a thread twice never makes two job chains.
    """
    return app.configure_task(ADVANCE_TASK, lock=thread_id, queueing_lock=f"thread:{thread_id}",
                              queue=queue, schedule_in={"seconds": delay_s} if delay_s else None)


async def _recover(app: App, seconds: float) -> int:
    """Requeues the `doing` jobs of workers silent for `seconds`; returns how many.

    A stalled step whose thread has another step waiting already (enqueued again
    meanwhile) is marked failed instead: requeueing it would break the one-waiting-job
    rule of the queueing lock, and the waiting step continues the thread. A job that
    left `doing` between the listing and its retry (a slow worker's heartbeat was late,
    then it finished; another recovery requeued it first) is left as it is, whether
    the retry or the marking failed finds it gone (`_NOT_DOING`): no failure of the
    recovery.
    """
    requeued = 0
    for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=seconds):
        try:
            await app.job_manager.retry_job(job)
            requeued += 1
        except exceptions.UniqueViolation:
            await _left_doing(app.job_manager.finish_job(job, status=Status.FAILED,
                                                         delete_job=False))
        except exceptions.ConnectorException as exc:
            if _NOT_DOING not in str(exc.__cause__):
                raise
    return requeued


async def _left_doing(finishing: Any) -> None:
    """Awaits `finishing` (a `finish_job`); a job that left `doing` meanwhile is left as it is."""
    try:
        await finishing
    except exceptions.ConnectorException as exc:
        if _NOT_DOING not in str(exc.__cause__):
            raise


_NOT_DOING = "Job was not found or "
"""How procrastinate's SQL functions refuse a job no longer `doing` (`procrastinate_retry_job_v2`:
"... has an invalid status to retry"; `procrastinate_finish_job_v1`: '... not in "doing" or
"todo" status'): it finished or was recovered meanwhile."""


def recover_stalled(db: str, seconds: float | None = None) -> int:
    """Requeues the `doing` jobs of workers silent for `seconds` (procrastinate's recovery).

    Uses procrastinate's own `get_stalled_jobs` (worker heartbeats) and `retry_job`, on a
    fresh app of its own, so it runs the same from a periodic job or a script.

    Returns:
        How many jobs were requeued.
    """
    async def run() -> int:
        app = make_app(db)
        async with app.open_async():
            return await _recover(app, seconds if seconds is not None
                                  else env_seconds(STALLED_ENV, 30))

    return asyncio.run(run())


def ensure_schema(db: str) -> None:
    """Applies procrastinate's schema once, serialized across processes by an advisory lock.

    Raises:
        UsageError: `db_unreachable` (exit 2): the queue's database cannot be reached, or
            its URL is not one psycopg can use.
    """
    with open_queue_db(db) as conn, queue_lock(conn, _SCHEMA_LOCK, what="queue schema"):
        row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        if row is None or row[0] is None:
            app = make_app(db)
            with app.open():
                app.schema_manager.apply_schema()


@dataclass(frozen=True)
class Enqueued:
    """What `enqueue` did.

    Attributes:
        queued: How many threads got a step job.
        already_queued: Threads left as they were: a step of theirs already waits.
    """

    queued: int
    already_queued: list[str]


def _check_identities(store: Any, items: list[Any]) -> None:
    """Refuses lines whose thread exists with another task or fixed setting, before any job.

    A worker would refuse each such job (`identity_mismatch`, exit 4) and end its chain,
    seen only in the worker's log, after `--enqueue` had said it queued them; as a plain
    batch does, the person hears it at once. The model is compared where a line names one
    (a worker's `MANDAPI_MODEL_ID` is its own). One read of each existing thread.

    Raises:
        graph.errors.RefusedError: `identity_mismatch` naming every such thread (exit 4);
            nothing was queued.
    """
    graph = graph_of(store)
    refused = []
    for item in items:
        loaded = load_thread(graph, item.thread_id, store.location)
        if loaded is None:
            continue
        try:
            item.spec.check_against(loaded.values["thread"], env_model=None)
        except RefusedError as exc:
            refused.append(f"{item.thread_id!r}: {exc.message}")
    if refused:
        raise RefusedError("not queued: " + "; ".join(refused[:5])
                           + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
                           + "; nothing was queued", error_code=ErrorCode.IDENTITY_MISMATCH,
                           location=store.location)


def enqueue(db: str, items: list[Any], *, live: bool, cap_id: str | None,
            max_requests: int | None, queue: str = DEFAULT_QUEUE,
            queue_url: str | None = None) -> Enqueued:
    """Puts one step job per thread on the queue, unless one of the thread's already waits.

    Idempotent: enqueueing a thread whose step job waits leaves it as it was (reported
    in `already_queued`), so a thread never gets two job chains. A thread's later steps
    go to the same procrastinate `queue` (workers take every queue unless started with
    `--queues`).

    Args:
        db: The checkpoint database (PostgreSQL or Redis).
        items: The checked tasks lines (`graph.fleet.tasks_file.read_tasks`), one job each.
        live: Whether the jobs may send paid requests (`--live`).
        cap_id: The batch's request cap (`--batch-id`), or None.
        max_requests: The cap's maximum (`--max-requests`), or None.
        queue: The procrastinate queue the jobs go to.
        queue_url: The queue's PostgreSQL database (`--queue-db`); see `queue_db`.

    Raises:
        graph.errors.UsageError: No PostgreSQL queue, or a SQLite `db` (`queue_db`).
        graph.errors.RefusedError: `identity_mismatch` when the cap exists with another
            maximum (`graph.fleet.request_cap.open_cap`), or a line's thread exists with
            another task or fixed setting (`_check_identities`); nothing is queued.
    """
    url = queue_db(db, queue_url)
    open_queue_db(url).close()  # reachable, before anything is written anywhere
    with open_store(db, create=True) as store:  # our tables, and the cap
        _check_identities(store, items)
        cap_id = open_cap(store, cap_id, max_requests)
        bound = {"store_id": store.store_id} if store.store_id else {}
    ensure_schema(url)
    app = make_app(url)
    queued, already = 0, []
    with app.open():
        for item in items:
            fields = {k: v for k, v in item.spec.to_fields().items() if k != "thread_id"}
            try:
                _next_step(app, item.thread_id, queue).defer(
                    thread_id=item.thread_id, fields=fields, live=live, cap_id=cap_id, **bound)
            except exceptions.AlreadyEnqueued:
                already.append(item.thread_id)
            else:
                queued += 1
    return Enqueued(queued, already)
