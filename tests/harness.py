"""Fast graph tests: the project's graph on LangGraph's `InMemorySaver`, no database.

`GraphHarness` compiles the graph with the project's factory (`build_graph`) and runs
one thread with the project's runtime context (`StepContext`), an in-memory ledger
and a scripted model client (a queue of replies and a record of requests; a request
beyond the script fails the test). Every request is checked against the ledger as it
is made: it must carry its own claimed attempt (INVARIANTS I1, I3).

It drives the graph directly, the way `graph.step.advance` does (`durability="sync"`, input
only when the thread is created, `None` to continue), without the step's locks,
load-time checks or attempt log. Use the CLI tests for those.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from graph.agent import build_graph, initial_state
from nodes.context import ChatModel, ModelReply, NoModel, StepContext
from tests.fakes import RecordingLog, ScriptedModel
from tests.memory_ledger import MemoryLedger

TASK = "How long does shipping take at the demo shop?"
CREATED_AT = "2026-01-01T00:00:00+00:00"


def new_state(task: str = TASK, *, thread_id: str = "t1", max_attempts: int = 4,
              **limits: Any) -> dict[str, Any]:
    """A new thread's state, as the graph's first input holds it (`initial_state`).

    Args:
        task: The task text.
        thread_id: The thread.
        max_attempts: The thread's fixed maximum of attempts.
        **limits: More fields of `initial_state` (`max_tokens`, `context_tokens`, ...).
    """
    return dict(initial_state(thread_id=thread_id, task=task, model="scripted",
                              max_attempts=max_attempts, created_at=CREATED_AT, **limits))


def node_runtime(ledger: MemoryLedger, model: ChatModel | None = None, log: RecordingLog | None = None,
                 *, thread_id: str = "t1", charge: str | None = None) -> Runtime[StepContext]:
    """The `Runtime` a node receives from the graph, built from fakes, for calling a node directly.

    Args:
        ledger: The attempt ledger.
        model: The model client; by default one that fails on any request.
        log: Where the node records attempts and tool results; by default a new `RecordingLog`.
        thread_id: The thread.
        charge: The request cap charged with each request, or None.
    """
    context = StepContext(thread_id, ledger, model or NoModel(), log or RecordingLog(), charge)
    return Runtime(context=context)


class _ClaimChecked:
    """Passes each request to the scripted model after checking the ledger claimed it."""

    def __init__(self, harness: GraphHarness) -> None:
        self._harness = harness

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        harness = self._harness
        entry = harness.ledger.read(harness.thread_id)
        sent = len(harness.model.requests)
        assert entry is not None and entry.claimed == sent + 1, (
            f"request {sent + 1} leaves without its own claimed attempt (ledger: {entry})")
        return harness.model.complete(messages, tools)


class GraphHarness:
    """One thread on the compiled graph, with an in-memory checkpointer and ledger.

    Attributes:
        thread_id: The thread the harness runs.
        saver: LangGraph's `InMemorySaver` holding the thread's checkpoints.
        ledger: The in-memory attempt ledger.
        model: The scripted model client; add replies with `script`.
        log: The attempt log rows the nodes recorded.
        graph: The compiled graph (`graph.agent.build_graph`).
    """

    def __init__(self, thread_id: str = "t1") -> None:
        self.thread_id = thread_id
        self.saver = InMemorySaver()
        self.ledger = MemoryLedger()
        self.model = ScriptedModel([])
        self.log = RecordingLog()
        self.graph = build_graph(self.saver)
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        self.context = StepContext(thread_id, self.ledger, _ClaimChecked(self), self.log)

    def script(self, *replies: Any) -> GraphHarness:
        """Queues model replies (see `tests.fakes.ScriptedModel` for what an item may be)."""
        self.model.script.extend(replies)
        return self

    def start(self, task: str = TASK, *, max_attempts: int = 4, **limits: Any) -> dict[str, Any]:
        """Creates the thread (ledger row, then the first invocation); returns its values.

        Args:
            task: The task text.
            max_attempts: The thread's fixed maximum of attempts.
            **limits: More fields of `initial_state` (`max_tokens`, `context_tokens`, ...).
        """
        self.ledger.create(self.thread_id, max_attempts)
        return self._invoke(new_state(task, thread_id=self.thread_id, max_attempts=max_attempts,
                                      **limits))

    def step(self) -> dict[str, Any]:
        """Continues the thread by one invocation (at most one request); returns its values."""
        return self._invoke(None)

    def run(self, task: str = TASK, *, max_steps: int = 20, **limits: Any) -> dict[str, Any]:
        """Starts the thread and steps it until the graph ends; returns the final values.

        Raises:
            AssertionError: The graph has not ended after `max_steps` invocations.
        """
        values = self.start(task, **limits)
        for _ in range(max_steps):
            if not self.next:
                return values
            values = self.step()
        raise AssertionError(f"the thread did not end in {max_steps} steps (next: {self.next})")

    @property
    def values(self) -> dict[str, Any]:
        """The thread's latest checkpointed values."""
        return dict(self.graph.get_state(self.config).values)

    @property
    def next(self) -> tuple[str, ...]:
        """The nodes the thread runs next; `()` once the graph has ended."""
        return tuple(self.graph.get_state(self.config).next)

    def _invoke(self, graph_input: Any) -> dict[str, Any]:
        self.graph.invoke(graph_input, self.config, context=self.context, durability="sync")
        return self.values
