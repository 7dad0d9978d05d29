"""The open/close half of `graph.api.Database`: the store, its saver and graph, one lock.

Split from `graph.api` to keep modules small; import from `graph.api`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar, cast

from graph.api._args import check_callable, check_source, checked_call
from graph.checkpoints.load import graph_of
from graph.errors import UsageError
from graph.known_errors import known_errors
from graph.settings import Source, check_flag, setting_name, shown
from graph.step.checked_graph import CheckedGraph

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph.state import CompiledStateGraph

    from graph.settings import Settings
    from graph.store.base import Store
    from nodes.context import ChatModel

P = ParamSpec("P")
R = TypeVar("R")
ModelFactory = Callable[[str, "Settings"], "ChatModel"]


class DatabaseBase:
    """Opening, closing and the open store of a `graph.api.Database`.

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
        from graph.settings import Settings

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
        from graph.store import open_store

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
                    CheckedGraph(graph_of(self.store), self.store.location))

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
