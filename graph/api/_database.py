"""`graph.api.Database`: an open checkpoint database, the command line's operations as methods.

Opening and closing (the store, its saver and graph, one lock); what does not advance a
thread (`history`, `threads`, `prune`, `prune_report`, `verify`, `copy_to`: what
`graph.history`, `graph.prune`, `graph.verify` and `graph.copy` call); and what does
(`run`, `cancel`, `decide`, `batch`, `advance`, `invocation`: each builds a
`graph.step.advance.StepRequest`, or a batch, and runs the shared function behind
`graph.run` and `graph.batch`). Arguments are checked first (`graph.api._args`). Import
it from `graph.api`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar, cast

from graph.api._args import check_callable, check_source, checked_call, thread_spec
from graph.checkpoints.load import graph_of, is_finished, load_thread
from graph.errors import ErrorCode, RefusedError, UsageError
from graph.fleet.batch import Progress, run_batch
from graph.fleet.request_cap import check_cap
from graph.fleet.tasks_file import BatchItem
from graph.settings import (
    Settings,
    Source,
    check_flag,
    check_names,
    check_path,
    check_task,
    check_text,
    check_thread_id,
    check_whole,
    database_location,
    setting_name,
    shown,
)
from graph.step.advance import StepRequest, advance
from graph.step.checked_graph import CheckedGraph
from graph.step.models import make_model
from graph.store import open_store
from graph.store.ages import parse_age
from graph.store.failures import known_errors
from graph.threads.copy import check_copy_source, copy_threads
from graph.threads.history import MAX_CHECKPOINTS_PAGE, list_threads, thread_or_parent
from graph.threads.retention import retain
from graph.threads.verification import VerifyReport, check_database
from nodes.context import Lease, StepContext

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph.state import CompiledStateGraph

    from graph.fleet.batch import BatchReport
    from graph.outcome import Outcome
    from graph.store.base import Store
    from graph.threads.retention import PruneReport
    from nodes.context import ChatModel

__all__ = ["Database", "ModelFactory", "verify_database"]

P = ParamSpec("P")
R = TypeVar("R")
ModelFactory = Callable[[str, "Settings"], "ChatModel"]
"""Builds the chat model for a thread's model id and the invocation's settings."""

@checked_call
def verify_database(db: str | os.PathLike[str] | None = None, *,
                    source: Source = "keywords") -> VerifyReport:
    """SQLite's full integrity check, then every thread's checks (`graph.verify`).

    A function, not a `Database` method, because it must not open the database first:
    damage an ordinary open would refuse is listed as problems. Reads only.

    Args:
        db: A SQLite file path (a str or an `os.PathLike`) or a `postgresql://` URL;
            None: `$GRAPH_DB`, else `./checkpoints.sqlite`.
        source: How refusals name `db` (`keywords`: `db`; `flags`: `--db`).

    Returns:
        The problems (empty when everything reads back intact) and how many threads and
        checkpoints were checked (`graph.threads.verification.VerifyReport`).

    Raises:
        RefusedError: The file is missing (`no_such_file`) or no checkpoint database;
            `studio_db` for the ledger database of LangGraph Studio, whose threads keep
            their checkpoints in the server's storage
            (`graph.threads.verification.StudioDatabaseError`, with `threads`).
        UsageError: `db` is empty, not a usable path or URL, or may not be read; an
            unknown keyword or a value of the wrong type.
    """
    name = setting_name("db", check_source(source))
    path = check_path(db, name)
    with known_errors():
        return check_database(database_location(path, name), name)


class Database:
    """An open checkpoint database: the command line's operations as methods.

    Open it with `open_database`. Attributes `location` (path, or URL with its password
    redacted), `checkpointer` and `graph` are available while it is open.

    Args:
        settings: Resolved settings (`graph.settings.resolve_settings`; `Settings(db=...)`
            is enough to read, prune or copy); `open_database` resolves them for you.
        create: Allow creating a missing SQLite file (see `open_database`).
        read_only: Never write (see `open_database`).
        model_factory: Builds the chat model for a thread's model id (see `open_database`).
        source: How refusals name a setting: `keywords` (`db`, `max_attempts`, for
            Python callers) or `flags` (`--db`, `--max-attempts`: the command line).

    Raises:
        UsageError: An argument of the wrong type (`create must be True or False, not
            1`), an unknown keyword (exit 2).
    """


    @checked_call
    def __init__(self, settings: Settings, *, create: bool = False, read_only: bool = False,
                 model_factory: ModelFactory | None = None,
                 source: Source = "keywords") -> None:
        if not isinstance(settings, Settings):
            raise UsageError("settings must be a graph.settings.Settings (open_database "
                             f"resolves them), not {shown(settings)}")
        check_flag(create, "create")
        check_flag(read_only, "read_only")
        check_callable(model_factory, "model_factory")
        self.settings = settings
        self.source: Source = check_source(source)
        self._create, self._read_only = create, read_only
        self._model_factory = model_factory
        self._lock = threading.RLock()
        self._stack: ExitStack | None = None
        self._store: Store | None = None

    # -- opening and closing ------------------------------------------------------------

    def __enter__(self) -> Self:
        with self._lock, known_errors():
            stack = ExitStack()
            self._store = stack.enter_context(open_store(
                self.settings.db, create=self._create, read_only=self._read_only,
                name=setting_name("db", self.source)))
            self._stack = stack
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Commits what is kept back and closes the connections and locks (idempotent)."""
        with self._lock:
            stack, self._stack, self._store = self._stack, None, None
            if stack is not None:
                stack.close()

    @property
    def store(self) -> Store:
        """The open `graph.store.base.Store` (ledger, attempt log, locks, ...).

        Raises:
            UsageError: The database is not open, or was closed (use `with`).
        """
        if self._store is None:
            raise UsageError("the database is not open: use `with open_database(...) as db`")
        return self._store

    def _name(self, key: str) -> str:
        """How a refusal names setting `key` (`once`, or `--once` for the command line)."""
        return setting_name(key, self.source)

    @property
    def location(self) -> str:
        """The SQLite file, or the PostgreSQL URL with its password shown as `***`."""
        return self.store.location

    @property
    def checkpointer(self) -> BaseCheckpointSaver[str]:
        """LangGraph's saver on this database, with the checksummed serializer.

        Reading through it (`get_tuple`, `list`) sees exactly what the program stored;
        writing through it bypasses the ledger's cross-checks: prefer `graph`.
        """
        return self.store.checkpointer

    @property
    def graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The agent graph compiled with `checkpointer`.

        Use `get_state`, `get_state_history`, `get_graph().draw_mermaid()`,
        `update_state` and `invoke` as on any LangGraph graph.

        Invoking it needs a runtime context holding this database's ledger
        (`invocation`): every request is still counted before it is sent and refused
        at the thread's maximum, whatever checkpoint it starts from (forks, replays,
        `update_state`). An invocation without a live context of this database's
        `invocation` block, or with another thread's or another database's, is refused
        before anything is written (`graph.step.checked_graph`): `UsageError`, or `RefusedError`
        `identity_mismatch`; so are malformed configs, forks from a thread's input
        checkpoint and async methods on the synchronous savers (`UsageError`).
        """
        return cast("CompiledStateGraph[Any, Any, Any, Any]",
                    CheckedGraph(graph_of(self.store), self.store.location,
                                 supports_async=self.store.supports_async,
                                 after_update=self._settle_ttl))

    def _settle_ttl(self, config: Any) -> None:
        """After an `update_state`, gives a thread that is still finished its TTL again.

        A new checkpoint takes the TTL off a finished thread's keys first (Redis:
        `graph.store.redis.ttl.keep_alive`); when the update leaves the thread finished
        (`graph.checkpoints.load.is_finished`), its keys get the TTL of that status again,
        counted from now (`Store.expire_finished`; nothing on SQL). A thread the update
        left able to continue keeps none (INVARIANTS I10).
        """
        thread_id = config["configurable"]["thread_id"]
        latest = graph_of(self.store).get_state({"configurable": {"thread_id": thread_id}})
        status = (latest.values.get("progress") or {}).get("status")
        if is_finished(status, latest.next):
            self.store.expire_finished(str(thread_id), str(status))

    def _writable(self, call: str) -> None:
        """Refuses `call` on a database opened with `read_only=True`, before anything is read.

        Raises:
            UsageError: The database was opened read-only (exit 2, `usage`).
        """
        if self._read_only:
            raise UsageError(f"{call} writes to the database, which was opened with read_only=True: "
                             "open it without read_only to run, cancel, decide, batch, prune or "
                             "invoke threads")

    def _call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock, known_errors():
            self.store  # noqa: B018 - refuses a closed database first
            return fn(*args, **kwargs)

    # -- reading, pruning, verifying, copying ------------------------------------------


    @checked_call
    def history(self, thread_id: str, checkpoints: int = 50) -> dict[str, Any]:
        """What `graph.history --thread ID --json` prints (`graph.threads.history`).

        Args:
            thread_id: The thread, or a parent task (`graph.batch --parent ID`).
            checkpoints: How many of the latest checkpoints to list (1 to 10000).

        Returns:
            `header`, `steps`, `checkpoints`, `checkpoints_total`, `checkpoints_trimmed`,
            `decisions` and `parent_result` (None unless the thread is a parent task);
            a parent that is no thread itself gives `{"parent_result": ...}` alone.

        Raises:
            RefusedError: `no_such_thread`, or a checkpoint in the page fails its checks.
            UsageError: An invalid thread id, or `checkpoints` not an int from 1 to 10000.
        """
        check_thread_id(thread_id)
        if (not isinstance(checkpoints, int) or isinstance(checkpoints, bool)
                or not 1 <= checkpoints <= MAX_CHECKPOINTS_PAGE):
            raise UsageError(f"{setting_name('checkpoints', self.source)} must be a whole "
                             f"number from 1 to {MAX_CHECKPOINTS_PAGE}, not {checkpoints!r}")
        return self._call(thread_or_parent, self.store, thread_id, checkpoints)

    @checked_call
    def threads(self) -> list[dict[str, Any]]:
        """Every thread, by thread id, as `graph.history --list --json` lists them.

        Returns:
            Dicts with `thread_id`, `status` (or `unreadable: CODE`), `attempts`,
            `max_attempts`, `updated_at` and `task` (`graph.threads.history.list_threads`).
        """
        return self._call(list_threads, self.store)

    @checked_call
    def prune_report(self, *, completed: str | timedelta = "24h", failed: str | timedelta = "7d",
                     dry_run: bool = False) -> PruneReport:
        """Deletes finished threads older than the ages; never one that can continue.

        Every other thread is trimmed to its checkpoint window. A thread busy in another
        process, or one that cannot be read, is kept (and noted in `skipped`).

        Args:
            completed: Age of `done` threads to delete: text (`90s`, `30m`, `24h`, `7d`)
                or a `timedelta`.
            failed: Age of `exhausted` and `cancelled` threads to delete.
            dry_run: Only select (reads only): True or False.

        Returns:
            The typed report (`graph.threads.retention.PruneReport`): the candidates with their
            status and last update, what was pruned, skipped, swept, trimmed and freed.

        Raises:
            UsageError: An age not written like `24h`, negative or neither text nor a
                `timedelta`, or `dry_run` not a bool (named as the keyword); without
                `dry_run`, a database opened `read_only=True`.
        """
        check_flag(dry_run, self._name("dry_run"))
        if not dry_run:
            self._writable("prune")
        return self._call(retain, self.store, completed=self._age("completed", completed),
                          failed=self._age("failed", failed), dry_run=dry_run)

    def _age(self, key: str, age: str | timedelta) -> timedelta:
        if isinstance(age, timedelta):
            if age < timedelta(0):
                raise UsageError(f"{key} must not be negative")
            return age
        if not isinstance(age, str):
            raise UsageError(f"{self._name(key)} must be an age such as '24h' or a timedelta, "
                             f"not {shown(age)}")
        return parse_age(age, key if self.source == "keywords" else "age")

    @checked_call
    def prune(self, *, completed: str | timedelta = "24h", failed: str | timedelta = "7d",
              dry_run: bool = False) -> dict[str, Any]:
        """`prune_report` as the dict `graph.prune --json` prints (without `exit_code`).

        Returns:
            `pruned`, `skipped`, `swept`, `trimmed`, `freed_bytes`; with `dry_run`,
            `would_prune` (thread id, status, last update) and `skipped`.

        Raises:
            UsageError: As `prune_report`.
        """
        return self.prune_report(completed=completed, failed=failed, dry_run=dry_run).to_dict()

    @checked_call
    def verify(self) -> list[str]:
        """SQLite's full integrity check and every thread's checks (`graph.verify`).

        Returns:
            One line per problem; empty when everything reads back intact. For the
            counts of threads and checkpoints checked, use `verify_database`.

        Raises:
            RefusedError: As `verify_database` (`studio_db` for Studio's ledger database).
        """
        return self._call(verify_database, self.settings.db, source=self.source).problems

    @checked_call
    def copy_to(self, target: Database,
                thread_ids: Sequence[str] | None = None) -> list[str]:
        """Copies threads, whole and checked, into the open database `target` (`graph.copy`).

        Every source thread is loaded and checked first; if one already exists at the
        target, nothing is copied. A copy, not a move: this database is left as it was.

        Args:
            target: Another open `Database` (opened with `create=True` to make its file).
            thread_ids: The threads to copy, a list or tuple of str; None: every thread
                (tombstones included); an empty list copies nothing.

        Returns:
            The copied thread ids, sorted.

        Raises:
            RefusedError: `exists` at the target, `no_such_thread` here, or a thread
                fails its checks here (`graph.threads.copy.copy_threads`).
            UsageError: An invalid thread id; `target` not a `Database`, or closed;
                `thread_ids` not a list or tuple of str (a bare str is refused).
        """
        if not isinstance(target, Database):
            raise UsageError(f"target must be an open graph.api.Database, not {shown(target)}")
        given = () if thread_ids is None else check_names(thread_ids, "thread_ids", "thread ids")
        ids = [check_thread_id(t) for t in dict.fromkeys(given)]
        target.store  # noqa: B018 - refuses a closed target before anything is read
        target._writable("copy_to's target")
        if thread_ids is not None and not ids:
            return []
        with target._lock:
            return self._call(copy_threads, self.store, target.store, ids or None)

    @checked_call
    def check_copy(self, thread_ids: Sequence[str] | None = None) -> list[str]:
        """Checks here every thread `copy_to` would copy, before any target is opened.

        `graph.copy` calls it first, so a refused copy never creates its target file
        (INVARIANTS I13: a refusal changes nothing). `copy_to` checks them again with
        the target.

        Args:
            thread_ids: As `copy_to`.

        Returns:
            The thread ids a copy would take, sorted.

        Raises:
            RefusedError: `no_such_thread` here, or a thread fails its checks here.
            UsageError: As `copy_to`, for `thread_ids`.
        """
        given = () if thread_ids is None else check_names(thread_ids, "thread_ids", "thread ids")
        ids = [check_thread_id(t) for t in dict.fromkeys(given)]
        if thread_ids is not None and not ids:
            return []
        return list(self._call(check_copy_source, self.store, ids or None))

    # -- async variants: the same calls in a worker thread ------------------------------

    @checked_call
    async def ahistory(self, thread_id: str, checkpoints: int = 50) -> dict[str, Any]:
        """`history` in a worker thread."""
        return await asyncio.to_thread(self.history, thread_id, checkpoints)

    @checked_call
    async def athreads(self) -> list[dict[str, Any]]:
        """`threads` in a worker thread."""
        return await asyncio.to_thread(self.threads)

    @checked_call
    async def aprune(self, **kwargs: Any) -> dict[str, Any]:
        """`prune` in a worker thread."""
        return await asyncio.to_thread(self.prune, **kwargs)

    @checked_call
    async def aprune_report(self, **kwargs: Any) -> PruneReport:
        """`prune_report` in a worker thread."""
        return await asyncio.to_thread(self.prune_report, **kwargs)

    @checked_call
    async def averify(self) -> list[str]:
        """`verify` in a worker thread."""
        return await asyncio.to_thread(self.verify)

    @checked_call
    async def acopy_to(self, target: Database, thread_ids: Sequence[str] | None = None
                       ) -> list[str]:
        """`copy_to` in a worker thread."""
        return await asyncio.to_thread(self.copy_to, target, thread_ids)

    # -- advancing threads ----------------------------------------------------------


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
        self._writable("cancel")
        return self.advance(StepRequest(thread_spec(self.source, thread_id),
                                        cancel=True))

    @checked_call
    def reopen(self, thread_id: str) -> Outcome:
        """Puts a thread stopped by a model error back to `ready`, its attempts still counted.

        The stop reasons it undoes are `graph.step.local_steps.REOPENABLE`; nothing is
        sent (exit 0). A thread already `ready` is reported as it is.

        Raises:
            RefusedError: `no_such_thread`, or the thread fails its checks.
            UsageError: The thread was not stopped by a model error; an invalid thread id;
                a database opened `read_only=True`.
        """
        self._writable("reopen")
        return self.advance(StepRequest(thread_spec(self.source, thread_id), reopen=True))

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

    async def areopen(self, thread_id: str) -> Outcome:
        """`reopen` in a worker thread."""
        return await asyncio.to_thread(self.reopen, thread_id)

    @checked_call
    async def adecide(self, thread_id: str, **kwargs: Any) -> Outcome:
        """`decide` in a worker thread."""
        return await asyncio.to_thread(self.decide, thread_id, **kwargs)

    @checked_call
    async def abatch(self, items: Sequence[BatchItem], **kwargs: Any) -> BatchReport:
        """`batch` in a worker thread."""
        return await asyncio.to_thread(self.batch, items, **kwargs)
