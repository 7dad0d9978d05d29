"""The project's entry points the benchmarks drive, all in this one module.

Two ways to advance a thread by one step (at most one model request):

- `OurStore`: `graph.step.advance` on a store from `graph.store.open_store`, the path
  `graph.run`, `graph.batch` and the queue take (lock, load-time checks, ledger,
  attempt log, `durability="sync"`), with the thread's defaults unless told otherwise.
- `BareThreads`: the same compiled graph (`graph.agent.build_graph`) invoked on a
  LangGraph checkpointer with an in-memory ledger: no lock, no checks, no attempt log.

If the project's modules move, this module is the one to change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from bench.common import prose
from graph.checkpoints.load import graph_of

MAX_ATTEMPTS = 10**6
"""The maximum of a benchmark thread that must never stop on its budget."""
CREATED_AT = "2026-01-01T00:00:00+00:00"


def default_context_tokens() -> int:
    """The `--context-tokens` a new thread gets when none is given (estimated tokens)."""
    from nodes.state import DEFAULT_CONTEXT_TOKENS

    return int(DEFAULT_CONTEXT_TOKENS)


class ToolLoopModel:
    """Asks for a tool on every request, with ~2 KB of assistant text each time."""

    def __init__(self) -> None:
        self.n = 0

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        """Returns the next scripted reply (a `nodes.context.ModelReply`, never a final answer)."""
        from nodes.context import ModelReply

        self.n += 1
        call = {"id": f"call_{self.n}", "type": "function",
                "function": {"name": "search_references",
                             "arguments": json.dumps({"query": "shipping " + "x" * 40})}}
        return ModelReply({"role": "assistant", "content": prose(self.n), "tool_calls": [call]},
                          {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20})


def demo_model() -> Any:
    """The offline demo model (answers after one tool round: a thread is done in 2 steps)."""
    from nodes.demo_model import OfflineDemoModel

    return OfflineDemoModel()


@contextmanager
def _without_claim_checkpoint() -> Iterator[None]:
    """Opens SQLite stores whose ledger leaves each claim in the `-wal` (before issue 12)."""
    from unittest import mock

    import graph.store.sqlite.open
    from graph.store.sql.ledger import SqlLedger

    with mock.patch.object(graph.store.sqlite.open, "SqliteLedger", SqlLedger):
        yield


class OurStore:
    """An open store of ours; `step` advances one of its threads through `advance`.

    Args:
        db: A SQLite path or a PostgreSQL URL (created when missing).
        model: The model every thread of this store talks to.
        claim_checkpoint: False opens a SQLite store without the claim checkpoint.
        max_attempts: The maximum of new threads (None: the project's default).
        context_tokens: `--context-tokens` of new threads (None: the default).
    """

    def __init__(self, db: str, model: Any, *, claim_checkpoint: bool = True,
                 max_attempts: int | None = MAX_ATTEMPTS, context_tokens: int | None = None) -> None:
        from graph.settings import Settings
        from graph.store import open_store

        self._stack = ExitStack()
        with ExitStack() as opening:
            if not claim_checkpoint:
                opening.enter_context(_without_claim_checkpoint())
            self.store = self._stack.enter_context(open_store(db, create=True))
        self.settings = Settings(db=db)
        self.model, self.max_attempts, self.context_tokens = model, max_attempts, context_tokens
        self._started: set[str] = set()

    def step(self, thread_id: str = "t", task: str = "bench") -> None:
        """Advances `thread_id` by one graph invocation (creating it on first use)."""
        from graph.settings import ThreadSpec
        from graph.step.advance import StepRequest, advance

        new = thread_id not in self._started
        self._started.add(thread_id)
        request = StepRequest(ThreadSpec(thread_id, task=task if new else None,
                                         max_attempts=self.max_attempts, context_tokens=self.context_tokens))
        advance(self.store, request, self.settings, model_factory=lambda m, s: self.model)

    def graph(self) -> Any:
        """The store's compiled graph (for `get_state`, history)."""
        return graph_of(self.store)

    def close(self) -> None:
        """Closes the store."""
        self._stack.close()


class BareThreads:
    """Our compiled graph on a LangGraph checkpointer, with an in-memory ledger.

    Args:
        checkpointer: Any LangGraph checkpointer.
        model: The model every thread talks to.
        durability: LangGraph's `durability` for every invocation.
        context_tokens: The threads' context limit (None: the project's default).
        max_attempts: The threads' maximum.
    """

    def __init__(self, checkpointer: Any, model: Any, *, durability: str = "sync",
                 context_tokens: int | None = None, max_attempts: int = MAX_ATTEMPTS) -> None:
        from graph.agent import build_graph
        from tests.memory_ledger import MemoryLedger

        self.compiled = build_graph(checkpointer)
        self.ledger = MemoryLedger()
        self.model, self.durability = model, durability
        self.context_tokens = context_tokens or default_context_tokens()
        self.max_attempts = max_attempts
        self._started: set[str] = set()

    def step(self, thread_id: str = "t", task: str = "bench") -> bool:
        """Invokes the graph once on `thread_id`; returns False (invoking nothing) when done."""
        from graph.agent import initial_state
        from nodes.context import StepContext

        config = {"configurable": {"thread_id": thread_id}}
        graph_input: Any = None
        if thread_id not in self._started:
            self._started.add(thread_id)
            self.ledger.create(thread_id, self.max_attempts)
            graph_input = initial_state(thread_id=thread_id, task=task, model="offline-demo",
                                        max_attempts=self.max_attempts, created_at=CREATED_AT,
                                        context_tokens=self.context_tokens)
        elif not self.compiled.get_state(config).next:
            return False
        self.compiled.invoke(graph_input, config, context=StepContext(thread_id, self.ledger, self.model),
                             durability=self.durability)
        return True

    def graph(self) -> Any:
        """The compiled graph (for `get_state`, history)."""
        return self.compiled


def memory_saver() -> Any:
    """LangGraph's `InMemorySaver`."""
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


@contextmanager
def sqlite_saver(path: str) -> Iterator[Any]:
    """LangGraph's own `SqliteSaver` on a new connection to `path` (closed on exit)."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


@contextmanager
def postgres_saver(url: str) -> Iterator[Any]:
    """LangGraph's own `PostgresSaver` on `url`, its tables set up."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver


@contextmanager
def redis_saver(url: str) -> Iterator[Any]:
    """LangGraph's own `RedisSaver` on `url`, its indexes set up."""
    from langgraph.checkpoint.redis import RedisSaver

    with RedisSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver
