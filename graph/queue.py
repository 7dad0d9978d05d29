"""Many workers on many machines: thread steps as jobs of procrastinate's PostgreSQL queue.

We do not write a claim loop of our own. `python -m graph.batch TASKS --enqueue` puts one
job per thread on procrastinate's queue, in the same PostgreSQL database as the
checkpoints; workers on any machine take them:

  GRAPH_DB=postgresql://... procrastinate --app=graph.queue.app worker

Each job advances its thread by one step through `graph.step.advance` (ledger, identity,
one writer per thread) and, while the thread can continue, defers the next step. Jobs
carry a procrastinate `lock` keyed by thread id, so a thread's steps run one at a time.
Procrastinate retries nothing (`retry=False`): the ledger, not the queue, is the budget.
A worker killed mid-step leaves its job `doing`, which blocks the thread's later jobs
until procrastinate's stalled-job recovery (worker heartbeats; `recover_stalled`, run
every minute as a periodic job) requeues it; the requeued step cannot send an uncounted
request, because the ledger decides. Importing this module connects to nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from procrastinate import App, PsycopgConnector

if TYPE_CHECKING:
    from graph.outcome import Outcome

HEARTBEAT_ENV, STALLED_ENV = "GRAPH_QUEUE_HEARTBEAT_S", "GRAPH_QUEUE_STALLED_S"
"""How often a worker reports it is alive (seconds, default 5), and how long a silent
worker is taken for dead before its `doing` jobs are requeued (seconds, default 30)."""


def env_seconds(name: str, default: float) -> float:
    """A positive, finite number of seconds from environment variable `name`, or `default`.

    Raises:
        UsageError: The value is not a positive finite number (exit 2).
    """
    import math

    from graph.errors import UsageError

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
_SCHEMA_LOCK = 0x6D72_7173  # advisory-lock key for applying procrastinate's schema once


def make_app(db: str | None = None) -> App:
    """A procrastinate app on database `db` (default `$GRAPH_DB`), with our two tasks."""
    app = App(connector=PsycopgConnector(conninfo=db or os.environ.get("GRAPH_DB", "")),
              worker_defaults={"update_heartbeat_interval": env_seconds(HEARTBEAT_ENV, 5),
                               "stalled_worker_timeout": env_seconds(STALLED_ENV, 30)})

    @app.task(name="graph.advance_thread", retry=False, pass_context=True)
    def advance_thread(context: Any, thread_id: str, fields: dict[str, Any], live: bool,
                       cap_id: str | None) -> dict[str, Any]:
        return _advance_one(context.app if hasattr(context, "app") else app, thread_id, fields,
                            live, cap_id)

    @app.periodic(cron="* * * * *")
    @app.task(name="graph.recover_stalled", queueing_lock="graph.recover_stalled")
    def recover_stalled_jobs(timestamp: int) -> int:
        return recover_stalled(db or os.environ.get("GRAPH_DB", ""))

    return app


def _advance_one(app: App, thread_id: str, fields: dict[str, Any], live: bool,
                 cap_id: str | None) -> dict[str, Any]:
    """One step of one thread; defers the next step while the thread can continue.

    Returns:
        The step's `graph.run --json` outcome. A known failure ends the thread's job
        chain with its code; a thread busy outside the queue is tried again in a second.
    """
    import json

    from graph.cli import known_error
    from graph.errors import BusyError
    from graph.outcome import Outcome

    again = 0.0
    try:
        outcome, cap = _step(thread_id, fields, live, cap_id)
    except BusyError as exc:  # someone outside the queue is working on it: try later
        outcome, cap, again = Outcome.from_error(thread_id, exc), None, 1.0
    except Exception as exc:  # a known failure ends the chain with its code; a bug raises
        known = known_error(exc)
        if known is None:
            raise
        outcome, cap = Outcome.from_error(thread_id, known), None
    cap_full = cap is not None and cap[0] >= cap[1]
    if again or (outcome.status == "ready" and outcome.exit_code == 0 and not cap_full):
        app.configure_task("graph.advance_thread", lock=thread_id,
                           schedule_in={"seconds": again} if again else None).defer(
            thread_id=thread_id, fields=fields, live=live, cap_id=cap_id)
    return json.loads(outcome.to_json())


def _step(thread_id: str, fields: Any, live: bool,
          cap_id: str | None) -> tuple[Outcome, tuple[int, int] | None]:
    """Checks a queued job like a tasks line, then advances its thread by one step.

    Returns:
        The outcome and the cap's `(requests, maximum)` afterwards (None without one).

    Raises:
        graph.errors.UsageError: No `GRAPH_DB`, or the job's fields are invalid.
    """
    from graph.errors import UsageError
    from graph.settings import resolve_settings
    from graph.spec import ThreadSpec
    from graph.step import StepRequest, advance
    from graph.storage import open_store

    db = os.environ.get("GRAPH_DB") or ""
    if not db:
        raise UsageError("the queue worker needs GRAPH_DB (the PostgreSQL URL)")
    settings = resolve_settings(db=db, live=live, timeout_s=None)
    if not isinstance(fields, dict):
        raise UsageError("fields must be an object", location="queued job",
                         thread_id=thread_id)
    try:
        spec = ThreadSpec.from_line({**fields, "thread_id": thread_id}, live=live)
    except UsageError as exc:
        raise exc.at(location="queued job", thread_id=thread_id) from None
    with open_store(db, create=True) as store:
        outcome = advance(store, StepRequest(spec, once=True), settings, charge=cap_id)
        return outcome, store.ledger.cap(cap_id) if cap_id else None


def recover_stalled(db: str, seconds: float | None = None) -> int:
    """Requeues the `doing` jobs of workers silent for `seconds` (procrastinate's recovery).

    Uses procrastinate's own `get_stalled_jobs` (worker heartbeats) and `retry_job`, on a
    fresh app of its own, so it runs the same from a periodic job or a script.

    Returns:
        How many jobs were requeued.
    """
    import asyncio

    async def run() -> int:
        app = make_app(db)
        async with app.open_async():
            jobs = list(await app.job_manager.get_stalled_jobs(
                seconds_since_heartbeat=seconds if seconds is not None else env_seconds(STALLED_ENV, 30)))
            for job in jobs:
                await app.job_manager.retry_job(job)
            return len(jobs)

    return asyncio.run(run())


def ensure_schema(db: str) -> None:
    """Applies procrastinate's schema once, serialized across processes by an advisory lock."""
    import psycopg

    from graph.pg_locks import advisory_lock

    with psycopg.connect(db, autocommit=True) as conn, \
            advisory_lock(conn, _SCHEMA_LOCK, what="queue schema"):
        row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        if row is None or row[0] is None:
            app = make_app(db)
            with app.open():
                app.schema_manager.apply_schema()


def enqueue(db: str, items: list[Any], *, live: bool, cap_id: str | None,
            max_requests: int | None) -> int:
    """Puts one job per unfinished thread on the queue; returns how many were deferred.

    Raises:
        graph.errors.UsageError: `db` is not a PostgreSQL URL (the queue lives there).
        graph.errors.RefusedError: `identity_mismatch` when the cap exists with another
            maximum (`graph.request_cap.open_cap`).
    """
    from graph.errors import UsageError
    from graph.request_cap import open_cap
    from graph.storage import is_postgres, open_store

    if not is_postgres(db):
        raise UsageError("--enqueue needs a PostgreSQL database (--db postgresql://...)")
    with open_store(db, create=True) as store:  # our tables, and the cap
        cap_id = open_cap(store, cap_id, max_requests)
    ensure_schema(db)
    app = make_app(db)
    with app.open():
        for item in items:
            fields = {k: v for k, v in item.spec.to_fields().items() if k != "thread_id"}
            app.configure_task("graph.advance_thread", lock=item.thread_id).defer(
                thread_id=item.thread_id, fields=fields, live=live, cap_id=cap_id)
    return len(items)


app = make_app()
"""The app for procrastinate's own worker command (`--app=graph.queue.app`)."""
