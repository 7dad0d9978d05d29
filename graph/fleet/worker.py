"""What a queue worker process keeps between jobs: open stores and the threads that run steps.

Procrastinate runs async tasks on its event loop, `--concurrency N` of them at once; a
sync task would go through asgiref's `sync_to_async(thread_sensitive=False)`, that is
the loop's default executor, which has `min(32, cores + 4)` threads (6 on 2 cores), so
a concurrency above that would quietly wait. Our task is therefore async and hands its
blocking step to `STEP_THREADS`, a thread pool of our own that starts a thread only
when every existing one is busy: as many threads as jobs ever ran at once.

A step runs on a store lent by `StorePool`: one open store (two PostgreSQL sessions and
the graph compiled once with its checkpointer) per job running at that moment, kept
for the next job instead of opened per job. A store is never shared by two running
jobs: psycopg connections are not for concurrent use, and PostgreSQL's advisory locks
are re-entrant within a session, so our one-writer-per-thread lock (INVARIANTS I8)
only excludes a second job that runs on another session.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from graph.errors import BusyError, ErrorCode, RefusedError, UsageError
from graph.fleet.request_cap import cap_full, held_by_full_cap
from graph.outcome import Outcome
from graph.settings import ThreadSpec, resolve_settings
from graph.step.advance import StepRequest, advance
from graph.step.models import make_model
from graph.store import open_store
from graph.store.failures import known_error
from nodes.demo_model import DEMO_MODEL_ID

if TYPE_CHECKING:
    from graph.settings import Settings
    from graph.store.base import Store
    from nodes.context import ChatModel

__all__ = [
    "MAX_STEP_THREADS",
    "RESULT_KEYS",
    "STEP_THREADS",
    "StepReport",
    "StorePool",
    "close_pools",
    "pool_for",
    "run_step",
    "worker_model",
]

MAX_STEP_THREADS = 256
"""Upper bound of `STEP_THREADS`; threads start on demand, one per job running at once."""
STEP_THREADS = ThreadPoolExecutor(max_workers=MAX_STEP_THREADS, thread_name_prefix="graph-step")
"""Where queued steps run (no thread starts before the first job)."""


@dataclass
class _Pooled:
    store: Store
    stack: ExitStack


class StorePool:
    """Open stores on one database, each lent to one job at a time and kept for the next.

    The pool holds as many stores as jobs ever ran at once on it (a worker's
    concurrency). A store whose job raised is closed, not kept (its sessions may be
    lost); a kept store is checked with one round trip per session before it is lent.

    Args:
        db: The checkpoint database's URL (`GRAPH_DB`: PostgreSQL or Redis).
        keep: Keep stores for later jobs; False opens and closes one per job. None (the
            default) asks each store (`graph.store.base.Store.keeps_pool`: PostgreSQL
            yes; Redis, and a SQLite file, which only tests give a worker, no).
    """

    def __init__(self, db: str, *, keep: bool | None = None) -> None:
        self.db, self.keep = db, keep
        self._free: list[_Pooled] = []
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0
        """How many stores this pool has opened (for tests and the bench)."""

    @contextmanager
    def lease(self) -> Iterator[Store]:
        """Lends a store for one job: a kept one that still answers, else a new one.

        Raises:
            graph.errors.UsageError: `db_unreachable` when a new store cannot connect.
        """
        pooled = self._take()
        try:
            yield pooled.store
        except BaseException:
            pooled.stack.close()
            raise
        with self._lock:
            wanted = pooled.store.keeps_pool if self.keep is None else self.keep
            keep = wanted and not self._closed
            if keep:
                self._free.append(pooled)
        if not keep:
            pooled.stack.close()

    def _take(self) -> _Pooled:
        while True:
            with self._lock:
                pooled = self._free.pop() if self._free else None
            if pooled is None:
                return self._open()
            if pooled.store.answers():
                return pooled
            pooled.stack.close()

    def _open(self) -> _Pooled:
        stack = ExitStack()
        try:
            store = stack.enter_context(open_store(self.db, create=True))
        except BaseException:
            stack.close()
            raise
        with self._lock:
            self.opened += 1
        return _Pooled(store, stack)

    def close(self) -> None:
        """Closes every kept store; a store lent out is closed when its job returns it."""
        with self._lock:
            kept, self._free, self._closed = self._free, [], True
        for pooled in kept:
            pooled.stack.close()


_POOLS: dict[str, StorePool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(db: str) -> StorePool:
    """The process's store pool on `db` (created on first use)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(db)
        if pool is None:
            pool = _POOLS[db] = StorePool(db)
        return pool


def close_pools() -> None:
    """Closes the kept stores of every pool (when the worker stops)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


RESULT_KEYS = ("thread_id", "status", "attempts", "max_attempts", "exit_code", "error_code")
"""The `graph.run --json` keys a job's result keeps: no answer, error text or call
arguments, since procrastinate logs the result at INFO (`graph.history` shows the rest)."""


@dataclass(frozen=True)
class StepReport:
    """What one queued step did, as the job reports and logs it (never task or answer text).

    Attributes:
        result: The job's result: the `RESULT_KEYS` of the `graph.run --json` outcome.
        again_s: Seconds after which the thread's next step is queued; None ends the
            job chain.
    """

    result: dict[str, Any]
    again_s: float | None


def run_step(db: str, thread_id: str, fields: Any, live: bool, cap_id: str | None,
             store_id: str | None = None) -> StepReport:
    """One step of one queued thread, on a store lent by the process's pool (blocking).

    The job is checked like a tasks line before any store is lent. A known failure
    ends the thread's job chain with its code; a thread busy outside the queue is tried
    again in a second.

    Args:
        db: `GRAPH_DB` of the worker (empty when unset: a `usage` failure).
        thread_id: The queued thread.
        fields: The job's tasks-line fields (all but `thread_id`).
        live: Whether paid models may be used.
        cap_id: The batch's request cap, or None.
        store_id: The id of the checkpoint database the job was enqueued for (a Redis
            database, `graph.store.base.Store.store_id`); a worker whose `GRAPH_DB` holds
            another ends the job `identity_mismatch` (exit 4) before anything is counted.

    Raises:
        Exception: A bug (an error `graph.store.failures.known_error` does not know).
    """
    again: float | None = None
    try:
        request, settings = _checked_job(db, thread_id, fields, live)
        with pool_for(db).lease() as store:
            _check_bound(store, store_id, thread_id)
            outcome = held_by_full_cap(store, advance(
                store, request, settings, model_factory=worker_model, charge=cap_id), cap_id)
            full = cap_full(store, cap_id)
        if outcome.status == "ready" and outcome.exit_code == 0 and not full:
            again = 0.0
    except BusyError as exc:  # someone outside the queue is working on it: try later
        outcome, again = Outcome.from_error(thread_id, exc), 1.0
    except Exception as exc:  # a known failure ends the chain with its code; a bug raises
        known = known_error(exc)
        if known is None:
            raise
        outcome = Outcome.from_error(thread_id, known)
    full_result = json.loads(outcome.to_json())
    return StepReport({key: full_result.get(key) for key in RESULT_KEYS}, again)


def _check_bound(store: Any, store_id: str | None, thread_id: str) -> None:
    """Refuses a job enqueued for another checkpoint database than the worker's `GRAPH_DB`.

    Raises:
        RefusedError: `identity_mismatch` (exit 4): the thread would be created, and its
            budget spent, in a database its batch never named.
    """
    if store_id is not None and store.store_id != store_id:
        raise RefusedError(f"this job was enqueued for another checkpoint database than this "
                           f"worker's GRAPH_DB ({store.location}); nothing was counted",
                           error_code=ErrorCode.IDENTITY_MISMATCH, thread_id=thread_id)


@functools.lru_cache(maxsize=1)
def _tls_context() -> Any:
    """The TLS context httpx makes by default, made once per worker process.

    Loading the CA bundle costs about 100 ms of CPU, which every step's new client
    would pay again.
    """
    return httpx.create_ssl_context()


def worker_model(model_id: str, settings: Settings) -> ChatModel:
    """`graph.step.models.make_model`, its HTTP transport built on the worker's one TLS context.

    Each step still gets a new transport, so a request never reuses a connection an
    earlier step left open, as with `graph.run`: only the loaded CA bundle is shared.

    Raises:
        graph.errors.UsageError: As `make_model` (a paid model without `--live`).
    """
    if model_id == DEMO_MODEL_ID:
        return make_model(model_id, settings)
    return make_model(model_id, settings,
                      transport=httpx.HTTPTransport(retries=0, verify=_tls_context()))


def _checked_job(db: str, thread_id: str, fields: Any, live: bool) -> tuple[Any, Any]:
    """A queued job checked like a tasks line: its step request and the resolved settings.

    Raises:
        graph.errors.UsageError: No `GRAPH_DB`, invalid fields or settings (exit 2).
    """
    if not db:
        raise UsageError("the queue worker needs GRAPH_DB (the checkpoint database's URL)")
    settings = resolve_settings(db=db, live=live, timeout_s=None)
    if not isinstance(fields, dict):
        raise UsageError("fields must be an object", location="queued job", thread_id=thread_id)
    try:
        spec = ThreadSpec.from_line({**fields, "thread_id": thread_id}, live=live)
    except UsageError as exc:
        raise exc.at(location="queued job", thread_id=thread_id) from None
    return StepRequest(spec, once=True), settings
