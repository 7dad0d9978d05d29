"""State types live on the node side; a step prepares its request (compaction included) once."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest
from langgraph.checkpoint.memory import InMemorySaver

import nodes.request
from graph.agent import build_graph, initial_state
from nodes.budget import budget_node
from nodes.context import LedgerEntry, StepContext
from nodes.reason import reason_node
from nodes.request import PreparedRequests, prepare_request
from nodes.state import REPLACE, append_messages
from tests.conftest import ROOT
from tests.fakes import ScriptedModel, answer_reply, tool_call_reply


class MemoryLedger:
    """The ledger protocol in memory."""

    def __init__(self, max_attempts: int = 4) -> None:
        self.attempts = self.claimed = 0
        self.max_attempts = max_attempts

    def count(self, thread_id: str) -> LedgerEntry:
        if self.attempts == self.claimed and self.attempts < self.max_attempts:
            self.attempts += 1
        return LedgerEntry(self.attempts, self.claimed, self.max_attempts)

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        if attempt == self.claimed + 1 <= self.attempts:
            self.claimed = attempt
            return True
        return False


def _state(context_tokens: int = 16_000):
    return initial_state(thread_id="t", task="How long does shipping take?", model="offline-demo",
                         max_attempts=4, created_at="2026-01-01T00:00:00+00:00",
                         context_tokens=context_tokens)


def test_nodes_never_import_graph() -> None:
    for path in sorted((ROOT / "nodes").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "graph" or n.startswith("graph.") for n in names), path


def test_a_replace_update_replaces_the_stored_messages() -> None:
    stored = [{"role": "user", "content": "q"}]
    assert append_messages(stored, {REPLACE: [{"role": "user", "content": "x"}]}) == [
        {"role": "user", "content": "x"}]
    assert append_messages(stored, [{"role": "user", "content": "y"}])[-1]["content"] == "y"


def test_each_step_compacts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = nodes.request.compact
    monkeypatch.setattr(nodes.request, "compact", lambda *a: calls.append(1) or real(*a))
    graph = build_graph(InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    ledger = MemoryLedger()
    model = ScriptedModel([tool_call_reply("c1"), answer_reply("3 to 5 days [ship-01]")])
    graph_input = _state()
    for expected in (1, 2):  # step 1: budget + reason; step 2: tools + budget + reason
        graph.invoke(graph_input, config, context=StepContext("t", ledger, model), durability="sync")
        graph_input = None
        assert len(calls) == expected
    assert len(model.requests) == 2


def test_a_reason_run_without_its_budget_run_prepares_the_same_request() -> None:
    state = _state()
    ledger, model = MemoryLedger(), ScriptedModel([answer_reply("a"), answer_reply("a")])
    shared = StepContext("t", ledger, model)
    update = budget_node(state, SimpleNamespace(context=shared))  # type: ignore[arg-type]
    state = {**state, "progress": {**state["progress"], **update["progress"]}}
    reason_node(state, SimpleNamespace(context=shared))  # type: ignore[arg-type]
    ledger.attempts += 1  # a second counted attempt, sent by a fresh context (a resume)
    state = {**state, "progress": {**state["progress"], "attempts": 2}}
    reason_node(state, SimpleNamespace(context=StepContext("t", ledger, model)))  # type: ignore[arg-type]
    assert model.requests[0] == model.requests[1]


def test_a_kept_request_is_reused_only_for_an_equal_conversation() -> None:
    state = _state()
    memo = PreparedRequests()
    first = memo.prepare(state["thread"], state["messages"])
    assert memo.prepare(state["thread"], [dict(m) for m in state["messages"]]) is first
    longer = [*state["messages"], {"role": "assistant", "content": "more"}]
    assert memo.prepare(state["thread"], longer) == prepare_request(state["thread"], longer)
    assert memo.prepare(state["thread"], longer) is not first
