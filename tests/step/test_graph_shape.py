"""The graph's shape is pinned, and its routers are pure functions of state."""

from __future__ import annotations

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END

from graph.agent import build_graph, route_after_budget, route_after_reason
from tests.conftest import ROOT


def test_graph_matches_the_checked_in_diagram() -> None:
    mermaid = build_graph(InMemorySaver()).get_graph().draw_mermaid()
    assert mermaid == (ROOT / "tests/fixtures/graph.mmd").read_text()


def test_readme_shows_the_same_diagram() -> None:
    diagram = (ROOT / "tests/fixtures/graph.mmd").read_text()
    body = "\n".join(line for line in diagram.splitlines() if "-->" in line or "-.->" in line)
    assert body in (ROOT / "README.md").read_text()


def test_graph_has_no_retry_policy_and_interrupts_after_reason() -> None:
    graph = build_graph(InMemorySaver())
    assert graph.interrupt_after_nodes == ["reason"]
    for name, node in graph.builder.nodes.items():
        assert not node.retry_policy, name


def test_budget_router() -> None:
    assert route_after_budget({"progress": {"status": "ready"}}) == "reason"
    assert route_after_budget({"progress": {"status": "exhausted"}}) == END


def test_reason_router() -> None:
    def p(**kw):
        return {"progress": {"status": "ready", **kw}}

    assert route_after_reason(p(outcome="tool_calls")) == "tools"
    assert route_after_reason(p(outcome="error")) == "budget"
    assert route_after_reason(p(outcome="not_sent")) == "budget"
    assert route_after_reason({"progress": {"status": "done", "outcome": "answer"}}) == END
    assert route_after_reason({"progress": {"status": "exhausted", "outcome": "tool_calls"}}) == END
