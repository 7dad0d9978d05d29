"""What `graph.api.Database` does to advance threads: run, cancel, decide, batch, invoke.

Split from `graph.api` to keep modules small; import from `graph.api`. Each method
builds a `graph.step.advance.StepRequest` (or a batch) and runs the shared function behind
`graph.run` and `graph.batch`; arguments are checked first (`graph.api._args`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from graph.api._args import check_callable, checked_call, thread_spec
from graph.api._store import StoreOperations
from graph.errors import ErrorCode, RefusedError, UsageError
from graph.known_errors import known_errors
from graph.settings import check_flag, check_names, check_task, check_text, check_whole, shown

if TYPE_CHECKING:
    from graph.fleet.batch import BatchReport, Progress
    from graph.fleet.tasks_file import BatchItem
    from graph.outcome import Outcome
    from graph.step.advance import StepRequest
    from nodes.context import StepContext


class ThreadOperations(StoreOperations):
    """Creating, advancing, cancelling and deciding threads of a `graph.api.Database`."""

    @checked_call
    def advance(self, request: StepRequest, *, now: Callable[[], str] | None = None,
                charge: str | None = None) -> Outcome:
        """Runs one `graph.step.advance.StepRequest` (what every other method here builds).

        Args:
            request: The thread, its settings and what to do (`graph.step.advance.StepRequest`).
            now: Returns the current UTC time as ISO 8601 text (tests fix it).
            charge: A shared request cap charged with every request (`graph.step.advance`).

        Returns:
            The outcome `graph.run` prints: `exit_code` 0 (ran or done), 3 (exhausted),
            6 (the request failed; the attempt stays counted), 7 (awaiting approval) or
            4 with `error_code` `cancelled` (a cancelled thread): a thread's own state
            is returned, never raised.

        Raises:
            BusyError: Another process holds the thread (exit 5).
            RefusedError: Stored data refused, identity mismatch, no such thread (exit 4).
            UsageError: A database opened `read_only=True` (refused before anything is
                read), a bad setting, a paid model without `live`, or an argument of
                the wrong type (exit 2).
            DatabaseLostError: The database was lost or could not be written (exit 6).
        """
        from graph.step.advance import StepRequest, advance
        from graph.step.models import make_model

        self._writable("advance")
        if not isinstance(request, StepRequest):
            raise UsageError(f"request must be a graph.step.advance.StepRequest, not {shown(request)}")
        check_callable(now, "now")
        step_kwargs: dict[str, Any] = {"charge": check_text(charge, "charge")}
        if now is not None:
            step_kwargs["now"] = now
        factory = self._model_factory or make_model
        return self._call(advance, self.store, request, self.settings, model_factory=factory,
                          **step_kwargs)

    @checked_call
    def run(self, thread_id: str, *, task: str | None = None, model: str | None = None,
            once: bool = True, max_attempts: int | None = None, max_tokens: int | None = None,
            context_tokens: int | None = None,
            workspace: str | os.PathLike[str] | None = None,
            allow_writes: str | os.PathLike[str] | None = None,
            keep_checkpoints: int | str | None = None, restart_pruned: bool = False) -> Outcome:
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
            workspace: Folder of the read-only tools (a str or an `os.PathLike`).
            allow_writes: Folder of the write tools (each write waits for `decide`).
            keep_checkpoints: Checkpoints the thread keeps (default 10), or "all".
            restart_pruned: Start a pruned thread anew, with a fresh budget (needs `task`).

        Returns and raises as `advance`; an invalid setting is refused (`UsageError`)
        naming its keyword and what it got (`max_attempts must be a positive integer,
        not '5'`, `once must be True or False, not 'yes'`).
        """
        from graph.step.advance import StepRequest

        self._writable("run")
        check_flag(once, self._name("once"))
        check_flag(restart_pruned, self._name("restart_pruned"))
        spec = thread_spec(self.source, thread_id, task=task, model=model,
                           max_attempts=max_attempts, max_tokens=max_tokens,
                           context_tokens=context_tokens, workspace=workspace,
                           allow_writes=allow_writes, keep_checkpoints=keep_checkpoints)
        return self.advance(StepRequest(spec, once=once, restart_pruned=restart_pruned))

    @checked_call
    def cancel(self, thread_id: str) -> Outcome:
        """Marks the thread `cancelled`: no request is ever made for it again (exit 0).

        Raises:
            RefusedError: `no_such_thread`, or the thread fails its checks.
            UsageError: An invalid thread id, or one that is no str; a database opened
                `read_only=True`.
        """
        from graph.step.advance import StepRequest

        self._writable("cancel")
        return self.advance(StepRequest(thread_spec(self.source, thread_id),
                                        cancel=True))

    @checked_call
    def decide(self, thread_id: str, *, approve: tuple[str, ...] | list[str] = (),
               reject: tuple[str, ...] | list[str] = (), reason: str | None = None) -> Outcome:
        """Approves or rejects write calls paused for review (`--approve`, `--reject`).

        Returns:
            `awaiting_approval` (exit 7) while a call is undecided, else the thread after
            the decisions were applied (no model request).

        Raises:
            UsageError: A database opened `read_only=True`; an unknown or already decided
                call, or a thread not waiting;
                `approve` or `reject` not a list or tuple of str, `reason` not a str.
            RefusedError: `tampered`, `conflict` (see the README's error codes).
        """
        from graph.step.advance import StepRequest

        self._writable("decide")
        approved = check_names(approve, self._name("approve"))
        rejected = check_names(reject, self._name("reject"))
        if check_text(reason, self._name("reason")) is not None and not rejected:
            raise UsageError("reason explains a rejection: give the calls it rejects")
        if reason is not None:
            check_task(reason, self._name("reason"))  # valid UTF-8, not blank (it is stored)
        spec = thread_spec(self.source, thread_id)
        return self.advance(StepRequest(spec, approve=approved, reject=rejected, reason=reason))

    @checked_call
    def batch(self, items: Sequence[BatchItem], *, once: bool = True, cap_id: str | None = None,
              max_requests: int | None = None, progress: Progress | None = None) -> BatchReport:
        """Advances each thread of `items`, in order, as `graph.batch` does (`graph.fleet.batch`).

        A finished thread is not run again; a thread busy in another process is skipped
        for now. Each thread's refusal is its outcome, never raised.

        Args:
            items: The threads, a list or tuple of `graph.fleet.tasks_file.BatchItem`:
                `graph.fleet.tasks_file.read_tasks(path)` reads and checks a tasks file
                (`BatchItem(line, ThreadSpec(...))` builds one by hand).
            once: One graph invocation per thread; False: each until it stops.
            cap_id: A shared request cap, charged durably before each request.
            max_requests: The cap's maximum (1 to 10^9): creates `cap_id` if new; it is
                never reset or changed. None: an existing cap of that name is charged.
            progress: Shows each thread's outcome: a `graph.fleet.batch.Progress`.

        Returns:
            `graph.fleet.batch.BatchReport`: the outcomes in input order, `cap_reached`,
            `exit_code` (0, 8 when the cap stopped the batch, else the first failure's).

        Raises:
            UsageError: `cap_id` or `max_requests` out of range (named as keywords), or
                an argument of the wrong type (checked before any thread is advanced).
            RefusedError: `identity_mismatch` when the cap exists with another maximum.
        """
        from graph.fleet.batch import Progress, run_batch
        from graph.fleet.request_cap import check_cap
        from graph.fleet.tasks_file import BatchItem
        from graph.step.models import make_model

        self._writable("batch")
        if not (isinstance(items, list | tuple) and all(isinstance(i, BatchItem) for i in items)):
            raise UsageError(f"items must be a list or tuple of graph.fleet.tasks_file.BatchItem, "
                             f"not {shown(items)}")
        check_flag(once, self._name("once"))
        check_text(cap_id, self._name("cap_id"))
        check_whole(max_requests, self._name("max_requests"), "a positive integer")
        if progress is not None and not isinstance(progress, Progress):
            raise UsageError(f"progress must be a graph.fleet.batch.Progress, not {shown(progress)}")
        check_cap(cap_id, max_requests, self.source)
        return self._call(run_batch, self.store, list(items), self.settings, once=once,
                          cap_id=cap_id, max_requests=max_requests, progress=progress,
                          model_factory=self._model_factory or make_model)

    @checked_call
    @contextmanager
    def invocation(self, thread_id: str) -> Iterator[StepContext]:
        """The runtime context for invoking `graph` yourself, holding the thread's lock.

        The context carries this database's ledger and attempt log and the thread's
        own model, so a fork or an `update_state` followed by `invoke` still counts
        each attempt before its request and stops at the thread's maximum. Invoke with
        `durability="sync"`; what is kept back is committed when the block ends.
        The context is bound to this database and to the block: `graph` and the budget
        node refuse it on another database's graph (`identity_mismatch`) or after the
        block ended and released the lock (`usage`).

        Raises:
            BusyError: Another process holds the thread.
            RefusedError: `no_such_thread`, or the thread fails its checks.
            UsageError: A database opened `read_only=True`, a paid model without `live`,
                an invalid thread id (when the `with` block is entered).
        """
        from graph.checkpoints.load import load_thread
        from graph.settings import check_thread_id
        from graph.step.models import make_model
        from nodes.context import Lease, StepContext

        self._writable("invocation")
        check_thread_id(thread_id)
        with self._lock, known_errors(), self.store.locks.hold(thread_id):
            loaded = load_thread(self.graph, thread_id, self.location)
            if loaded is None:
                raise RefusedError("no such thread", error_code=ErrorCode.NO_SUCH_THREAD,
                                   location=self.location, thread_id=thread_id)
            model = (self._model_factory or make_model)(loaded.values["thread"]["model"],
                                                        self.settings)
            lease = Lease(self.store.checkpointer, self.store.ledger, thread_id)
            try:
                yield StepContext(thread_id, self.store.ledger, model, self.store.log,
                                  lease=lease)
            finally:
                lease.end()  # dead before the lock is released (I8)
                self.store.commit()
                close = getattr(model, "close", None)
                if close is not None:
                    close()

    # -- async variants: the same calls in a worker thread ------------------------------
    # (their arguments are refused as the synchronous call's, when awaited)

    @checked_call
    async def arun(self, thread_id: str, **kwargs: Any) -> Outcome:
        """`run` in a worker thread."""
        return await asyncio.to_thread(self.run, thread_id, **kwargs)

    @checked_call
    async def acancel(self, thread_id: str) -> Outcome:
        """`cancel` in a worker thread."""
        return await asyncio.to_thread(self.cancel, thread_id)

    @checked_call
    async def adecide(self, thread_id: str, **kwargs: Any) -> Outcome:
        """`decide` in a worker thread."""
        return await asyncio.to_thread(self.decide, thread_id, **kwargs)

    @checked_call
    async def abatch(self, items: Sequence[BatchItem], **kwargs: Any) -> BatchReport:
        """`batch` in a worker thread."""
        return await asyncio.to_thread(self.batch, items, **kwargs)
