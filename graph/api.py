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

Calls on one `Database` run one at a time (a lock): it holds one connection. The
`a…` variants (`arun`, `ahistory`, ...) are for async callers (FastAPI, notebooks);
they run the same synchronous call in a worker thread (`asyncio.to_thread`) over the
synchronous savers, so they do not block the event loop but are not natively async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from graph.api_base import ModelFactory, known_errors
from graph.api_store import StoreOperations, verify_database
from graph.errors import (
    BusyError,
    DatabaseLostError,
    RefusedError,
    RunError,
    SecondNameError,
    UsageError,
)
from graph.exitcodes import ErrorCode, ExitCode
from graph.outcome import Outcome
from graph.retention import Candidate, PruneReport
from graph.verification import VerifyReport

if TYPE_CHECKING:
    from graph.batch_run import BatchReport, Progress
    from graph.step import StepRequest
    from graph.tasks_file import BatchItem
    from nodes.context import StepContext

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


def open_database(db: str | None = None, *, create: bool = False, read_only: bool = False,
                  live: bool = False, timeout_s: float | None = None,
                  model_factory: ModelFactory | None = None) -> Database:
    """A checkpoint database to open with `with` (or `async with`).

    Args:
        db: A SQLite file path or a `postgresql://` URL; None: `$GRAPH_DB`, else
            `./checkpoints.sqlite` (as `--db`).
        create: Allow creating a missing SQLite file (only to create threads); resuming
            never needs it, and a missing file is refused (`no_such_file`).
        read_only: Never write (history, listing, verify): read access is enough.
        live: Allow paid MandAPI requests (`--live`; needs `MANDAPI_API_KEY`).
        timeout_s: MandAPI request timeout (default `$MANDAPI_TIMEOUT`, else 60).
        model_factory: Builds the chat model for a thread's model id (tests inject a
            fake); default `graph.models.make_model`.

    Returns:
        An unopened `Database`; `with` opens it and closes it on exit.

    Raises:
        UsageError: A bad setting (checked now, before anything is opened), named as
            the keyword (`db is empty`, `live=True needs MANDAPI_API_KEY`).
    """
    from graph.settings import resolve_settings

    settings = resolve_settings(db=db, live=live, timeout_s=timeout_s, source="keywords")
    return Database(settings, create=create, read_only=read_only, model_factory=model_factory)


class Database(StoreOperations):
    """An open checkpoint database: the command line's operations as methods.

    Open it with `open_database`. Attributes `location` (path, or URL with its password
    redacted), `checkpointer` and `graph` are available while it is open. What does not
    advance a thread (`history`, `threads`, `prune`, `prune_report`, `verify`,
    `copy_to`) is documented on `graph.api_store.StoreOperations`.
    """

    # -- advancing threads (graph.run) --------------------------------------------------

    def advance(self, request: StepRequest, **step_kwargs: Any) -> Outcome:
        """Runs one `graph.step.StepRequest` (what every other method here builds).

        `step_kwargs` go to `graph.step.advance` (`now`, `charge`: a shared request cap).

        Returns:
            The outcome `graph.run` prints: `exit_code` 0 (ran or done), 3 (exhausted),
            6 (the request failed; the attempt stays counted), 7 (awaiting approval) or
            4 with `error_code` `cancelled` (a cancelled thread): a thread's own state
            is returned, never raised.

        Raises:
            BusyError: Another process holds the thread (exit 5).
            RefusedError: Stored data refused, identity mismatch, no such thread (exit 4).
            UsageError: A bad setting, a paid model without `live` (exit 2).
            DatabaseLostError: The database was lost or could not be written (exit 6).
        """
        from graph.models import make_model
        from graph.step import advance

        factory = self._model_factory or make_model
        return self._call(advance, self.store, request, self.settings, model_factory=factory,
                          **step_kwargs)

    def run(self, thread_id: str, *, task: str | None = None, model: str | None = None,
            once: bool = True, max_attempts: int | None = None, max_tokens: int | None = None,
            context_tokens: int | None = None, workspace: str | None = None,
            allow_writes: str | None = None, keep_checkpoints: int | str | None = None,
            restart_pruned: bool = False) -> Outcome:
        """Creates (with `task`) or resumes a thread and advances it (`graph.run`).

        Args:
            thread_id: 1-128 of letters, digits, `.`, `_`, `:`, `-`.
            task: Creates the thread; on an existing one it must equal the stored task.
            model: The model of a new thread; must match on resume.
            once: One graph invocation (at most one model request); False: until the
                thread stops (done, exhausted, a failed request, a review pause).
            max_attempts: Requests allowed (default 4); fixed at creation, like
                `max_tokens`, `context_tokens`, `workspace`, `allow_writes` and
                `keep_checkpoints` (a number, or "all").
            max_tokens: Cap on the tokens the thread may use.
            context_tokens: Context limit per request (estimated tokens).
            workspace: Folder of the read-only tools.
            allow_writes: Folder of the write tools (each write waits for `decide`).
            keep_checkpoints: Checkpoints the thread keeps (default 10), or "all".
            restart_pruned: Start a pruned thread anew, with a fresh budget (needs `task`).

        Returns and raises as `advance`; an invalid setting is refused (`UsageError`)
        naming its keyword (`max_attempts must be a positive integer`).
        """
        from graph.spec import ThreadSpec
        from graph.step import StepRequest

        spec = ThreadSpec(thread_id=thread_id, task=task, model=model, max_attempts=max_attempts,
                          max_tokens=max_tokens, context_tokens=context_tokens,
                          workspace=workspace, allow_writes=allow_writes,
                          keep_checkpoints=keep_checkpoints, source=self.source)
        return self.advance(StepRequest(spec, once=once, restart_pruned=restart_pruned))

    def cancel(self, thread_id: str) -> Outcome:
        """Marks the thread `cancelled`: no request is ever made for it again (exit 0).

        Raises:
            RefusedError: `no_such_thread`, or the thread fails its checks.
        """
        from graph.spec import ThreadSpec
        from graph.step import StepRequest

        return self.advance(StepRequest(ThreadSpec(thread_id=thread_id, source=self.source),
                                        cancel=True))

    def decide(self, thread_id: str, *, approve: tuple[str, ...] | list[str] = (),
               reject: tuple[str, ...] | list[str] = (), reason: str | None = None) -> Outcome:
        """Approves or rejects write calls paused for review (`--approve`, `--reject`).

        Returns:
            `awaiting_approval` (exit 7) while a call is undecided, else the thread after
            the decisions were applied (no model request).

        Raises:
            UsageError: An unknown or already decided call, or a thread not waiting.
            RefusedError: `tampered`, `conflict` (see the README's error codes).
        """
        from graph.spec import ThreadSpec
        from graph.step import StepRequest

        if reason is not None and not reject:
            raise UsageError("reason explains a rejection: give the calls it rejects")
        spec = ThreadSpec(thread_id=thread_id, source=self.source)
        return self.advance(StepRequest(spec, approve=tuple(approve), reject=tuple(reject),
                                        reason=reason))

    def batch(self, items: Sequence[BatchItem], *, once: bool = True, cap_id: str | None = None,
              max_requests: int | None = None, progress: Progress | None = None) -> BatchReport:
        """Advances each thread of `items`, in order, as `graph.batch` does (`graph.batch_run`).

        A finished thread is not run again; a thread busy in another process is skipped
        for now. Each thread's refusal is its outcome, never raised.

        Args:
            items: The threads: `graph.tasks_file.read_tasks(path)` reads and checks a
                tasks file (`BatchItem(line, ThreadSpec(...))` builds one by hand).
            once: One graph invocation per thread; False: each until it stops.
            cap_id: A shared request cap, charged durably before each request.
            max_requests: The cap's maximum (1 to 10^9): creates `cap_id` if new; it is
                never reset or changed. None: an existing cap of that name is charged.
            progress: Shows each thread's outcome (`graph.batch_run.Progress`).

        Returns:
            `graph.batch_run.BatchReport`: the outcomes in input order, `cap_reached`,
            `exit_code` (0, 8 when the cap stopped the batch, else the first failure's).

        Raises:
            UsageError: `cap_id` or `max_requests` out of range (named as keywords).
            RefusedError: `identity_mismatch` when the cap exists with another maximum.
        """
        from graph.batch_run import run_batch
        from graph.models import make_model
        from graph.request_cap import check_cap

        check_cap(cap_id, max_requests, self.source)
        return self._call(run_batch, self.store, list(items), self.settings, once=once,
                          cap_id=cap_id, max_requests=max_requests, progress=progress,
                          model_factory=self._model_factory or make_model)

    @contextmanager
    def invocation(self, thread_id: str) -> Iterator[StepContext]:
        """The runtime context for invoking `graph` yourself, holding the thread's lock.

        The context carries this database's ledger and attempt log and the thread's
        own model, so a fork or an `update_state` followed by `invoke` still counts
        each attempt before its request and stops at the thread's maximum. Invoke with
        `durability="sync"`; what is kept back is committed when the block ends.

        Raises:
            BusyError: Another process holds the thread.
            RefusedError: `no_such_thread`, or the thread fails its checks.
            UsageError: A paid model without `live`.
        """
        from graph.loading import load_thread
        from graph.models import make_model
        from nodes.context import StepContext

        with self._lock, known_errors(), self.store.locks.hold(thread_id):
            loaded = load_thread(self.graph, thread_id, self.location)
            if loaded is None:
                raise RefusedError("no such thread", error_code=ErrorCode.NO_SUCH_THREAD,
                                   location=self.location, thread_id=thread_id)
            model = (self._model_factory or make_model)(loaded.values["thread"]["model"],
                                                        self.settings)
            try:
                yield StepContext(thread_id, self.store.ledger, model, self.store.log)
            finally:
                self.store.commit()
                close = getattr(model, "close", None)
                if close is not None:
                    close()

    # -- async variants: the same calls in a worker thread ------------------------------

    async def arun(self, thread_id: str, **kwargs: Any) -> Outcome:
        """`run` in a worker thread."""
        return await asyncio.to_thread(self.run, thread_id, **kwargs)

    async def acancel(self, thread_id: str) -> Outcome:
        """`cancel` in a worker thread."""
        return await asyncio.to_thread(self.cancel, thread_id)

    async def adecide(self, thread_id: str, **kwargs: Any) -> Outcome:
        """`decide` in a worker thread."""
        return await asyncio.to_thread(self.decide, thread_id, **kwargs)

    async def abatch(self, items: Sequence[BatchItem], **kwargs: Any) -> BatchReport:
        """`batch` in a worker thread."""
        return await asyncio.to_thread(self.batch, items, **kwargs)
