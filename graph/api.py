"""The public Python API: what the command line does, as typed functions.

    from graph.api import open_database

    with open_database("checkpoints.sqlite", create=True) as db:
        outcome = db.run("task_abc", task="How long does shipping take at the demo shop?")
        print(outcome.status, outcome.attempts, outcome.answer)
        print(db.history("task_abc")["steps"])

Each method runs the shared function behind `graph.run`, `graph.history`, `graph.prune`
or `graph.verify` (every promise of the README holds), returns what the command prints
and raises a `RunError` subclass, with `error_code` and `exit_code`, for every refusal.

Calls on one `Database` run one at a time (a lock): it holds one connection. The
`a…` variants (`arun`, `ahistory`, ...) are for async callers (FastAPI, notebooks);
they run the same synchronous call in a worker thread (`asyncio.to_thread`) over the
synchronous savers, so they do not block the event loop but are not natively async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from graph.api_base import DatabaseBase, ModelFactory, known_errors
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

if TYPE_CHECKING:
    from graph.step import StepRequest
    from nodes.context import StepContext

__all__ = [
    "BusyError",
    "Database",
    "DatabaseLostError",
    "ErrorCode",
    "ExitCode",
    "Outcome",
    "RefusedError",
    "RunError",
    "SecondNameError",
    "UsageError",
    "open_database",
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
        UsageError: A bad setting (checked now, before anything is opened).
    """
    from graph.settings import resolve_settings

    settings = resolve_settings(db=db, live=live, timeout_s=timeout_s)
    return Database(settings, create=create, read_only=read_only, model_factory=model_factory)


class Database(DatabaseBase):
    """An open checkpoint database: the command line's operations as methods.

    Open it with `open_database`. Attributes `location` (path, or URL with its password
    redacted), `checkpointer` and `graph` are available while it is open.
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

        Returns and raises as `advance`.
        """
        from graph.spec import ThreadSpec
        from graph.step import StepRequest

        spec = ThreadSpec(thread_id=thread_id, task=task, model=model, max_attempts=max_attempts,
                          max_tokens=max_tokens, context_tokens=context_tokens,
                          workspace=workspace, allow_writes=allow_writes,
                          keep_checkpoints=keep_checkpoints)
        return self.advance(StepRequest(spec, once=once, restart_pruned=restart_pruned))

    def cancel(self, thread_id: str) -> Outcome:
        """Marks the thread `cancelled`: no request is ever made for it again (exit 0).

        Raises:
            RefusedError: `no_such_thread`, or the thread fails its checks.
        """
        from graph.spec import ThreadSpec
        from graph.step import StepRequest

        return self.advance(StepRequest(ThreadSpec(thread_id=thread_id), cancel=True))

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
        return self.advance(StepRequest(ThreadSpec(thread_id=thread_id), approve=tuple(approve),
                                        reject=tuple(reject), reason=reason))

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

    # -- reading and retention (graph.history, graph.prune, graph.verify) ----------------

    def history(self, thread_id: str, checkpoints: int = 50) -> dict[str, Any]:
        """What `graph.history --thread ID --json` prints (`graph.thread_history`).

        Raises:
            RefusedError: `no_such_thread`, or a checkpoint in the page fails its checks.
        """
        from graph.spec import check_thread_id
        from graph.thread_history import thread_history

        check_thread_id(thread_id)
        return self._call(thread_history, self.store, thread_id, checkpoints)

    def threads(self) -> list[dict[str, Any]]:
        """Every thread, as `graph.history --list --json` lists them."""
        from graph.thread_history import list_threads

        return self._call(list_threads, self.store)

    def prune(self, *, completed: str = "24h", failed: str = "7d",
              dry_run: bool = False) -> dict[str, Any]:
        """Deletes finished threads older than the ages; never one that can continue.

        Args:
            completed: Age of `done` threads to delete (`90s`, `30m`, `24h`, `7d`).
            failed: Age of `exhausted` and `cancelled` threads to delete.
            dry_run: Only select: returns `would_prune` and `skipped`.

        Returns:
            `pruned`, `skipped`, `swept`, `trimmed`, `freed_bytes` (as `--json`).
        """
        from graph.retention import parse_age, prune, select

        completed_age, failed_age = parse_age(completed), parse_age(failed)

        def body() -> dict[str, Any]:
            candidates, notes = select(self.store, completed=completed_age, failed=failed_age)
            if dry_run:
                return {"would_prune": [c.__dict__ for c in candidates], "skipped": notes}
            report = prune(self.store, candidates)
            report["skipped"] = notes + report["skipped"]
            return report

        return self._call(body)

    def verify(self) -> list[str]:
        """SQLite's full integrity check and every thread's checks (`graph.verify`).

        Returns:
            One line per problem; empty when everything reads back intact.
        """
        from graph.verify import verify

        return self._call(verify, self.settings.db)

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

    async def ahistory(self, thread_id: str, checkpoints: int = 50) -> dict[str, Any]:
        """`history` in a worker thread."""
        return await asyncio.to_thread(self.history, thread_id, checkpoints)

    async def athreads(self) -> list[dict[str, Any]]:
        """`threads` in a worker thread."""
        return await asyncio.to_thread(self.threads)

    async def aprune(self, **kwargs: Any) -> dict[str, Any]:
        """`prune` in a worker thread."""
        return await asyncio.to_thread(self.prune, **kwargs)

    async def averify(self) -> list[str]:
        """`verify` in a worker thread."""
        return await asyncio.to_thread(self.verify)
