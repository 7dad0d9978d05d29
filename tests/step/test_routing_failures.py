"""A step that stored its output but failed before routing never leaves a thread stuck.

LangGraph runs a router after its node's writes, in the same task; an exception there
stores the output with the error and no next node. The invocation reports it at once
(exit 6, `step_failed`) and the thread resumes at the node its state calls for; a
thread left without a next step is routed when its state proves the next node, and
refused (exit 4, `damaged`) only when it does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import graph.agent
from tests.conftest import run_cli
from tests.fakes import ScriptedModel, answer_reply, timeout_error, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def _flaky(original: Callable[..., Any], failures: int = 1, returns: Any = None):
    """A router that raises (or returns `returns`) on its first `failures` calls."""
    calls = {"n": 0}

    def router(state: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= failures:
            if returns is not None:
                return returns
            raise RuntimeError("router failed (injected)")
        return original(state)

    return router


def _model(*script: Any):
    model = ScriptedModel(list(script))
    return model, (lambda model_id, settings: model)


# (router patched, first reply, next node once routed, status after the failing step)
CASES = {
    "reason router, tool-call reply": ("route_after_reason", tool_call_reply("call_a"), "tools", "ready"),
    "reason router, failed request": ("route_after_reason", timeout_error(), "budget", "ready"),
    "reason router, answer": ("route_after_reason", answer_reply("3 to 5 days [ship-01]"), None, "done"),
    "budget router": ("route_after_budget", tool_call_reply("call_a"), "reason", "ready"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_router_failure_is_reported_at_once_and_the_thread_resumes(backend, monkeypatch,
                                                                   case: str) -> None:
    router, first, next_node, status = CASES[case]
    monkeypatch.setattr(graph.agent, router, _flaky(getattr(graph.agent, router)))
    model, factory = _model(first, answer_reply("3 to 5 days [ship-01]"))
    argv = ["--thread", "t1", "--once", "--db", backend.db]
    out = run_cli([*argv, "--task", TASK], model_factory=factory)
    assert (out["exit_code"], out["error_code"], out["status"]) == (6, "step_failed", status)
    assert "router failed (injected)" in out["error"]
    assert out["_next"] == ([next_node] if next_node else [])
    if router == "route_after_budget":
        assert len(model.requests) == 0 and backend.ledger_row("t1") == (1, 0, 4)
    else:
        assert len(model.requests) == 1 and backend.ledger_row("t1") == (1, 1, 4)
        if case.endswith("tool-call reply"):
            assert out["usage"]["total_tokens"] == 15, "the paid reply was kept"
    if status == "done":
        assert run_cli(argv, model_factory=factory)["status"] == "done"
        return
    for _ in range(3):
        out = run_cli(argv, model_factory=factory)
        if out["status"] == "done":
            break
    assert (out["exit_code"], out["status"]) == (0, "done")
    assert len(model.requests) == 2, "no request was lost or repeated"


def test_thread_left_unrouted_by_an_earlier_process_resumes_at_tools(backend, monkeypatch) -> None:
    # The router fails again while the failure is being repaired (a second fault): that
    # process fails, and the next one finds the stored output and routes it.
    monkeypatch.setattr(graph.agent, "route_after_reason",
                        _flaky(graph.agent.route_after_reason, failures=2))
    model, factory = _model(tool_call_reply("call_a"), answer_reply("3 to 5 days [ship-01]"))
    argv = ["--thread", "t1", "--once", "--db", backend.db]
    with pytest.raises(RuntimeError):
        run_cli([*argv, "--task", TASK], model_factory=factory)
    out = run_cli(argv, model_factory=factory)
    assert (out["exit_code"], out["status"], out["attempts"]) == (0, "done", 2)
    assert len(model.requests) == 2 and backend.ledger_row("t1") == (2, 2, 4)


# Healthy states left with no next step (a router that sent a ready thread to END),
# and the node each proves: (router, first reply, proven node, ledger once done).
NO_NEXT = {
    "assistant tool calls last": ("route_after_reason", tool_call_reply("call_a"), "tools", (2, 2, 4)),
    "failed request, task last": ("route_after_reason", timeout_error(), "budget", (2, 2, 4)),
    "counted but unsent": ("route_after_budget", None, "budget", (1, 1, 4)),
}


@pytest.mark.parametrize("case", sorted(NO_NEXT))
def test_thread_without_next_step_is_routed_when_its_state_proves_the_node(
        backend, monkeypatch, case: str) -> None:
    router, first, node, ledger = NO_NEXT[case]
    monkeypatch.setattr(graph.agent, router, _flaky(getattr(graph.agent, router),
                                                      returns="__end__"))
    script = [first] if first is not None else []
    model, factory = _model(*script, answer_reply("3 to 5 days [ship-01]"))
    argv = ["--thread", "t1", "--once", "--db", backend.db]
    out = run_cli([*argv, "--task", TASK], model_factory=factory)
    assert (out["status"], out["_next"]) == ("ready", [node]), "routed by the state it left"
    out = run_cli(argv, model_factory=factory)
    while out["status"] == "ready" and out["exit_code"] == 0 and len(model.requests) < 3:
        out = run_cli(argv, model_factory=factory)
    assert (out["exit_code"], out["status"]) == (0, "done")
    assert backend.ledger_row("t1") == ledger


def test_thread_without_next_step_whose_state_proves_nothing_stays_refused(backend) -> None:
    model, factory = _model(answer_reply("3 to 5 days [ship-01]"))
    argv = ["--thread", "t1", "--once", "--db", backend.db]
    assert run_cli([*argv, "--task", TASK], model_factory=factory)["status"] == "done"

    def reopen(values: dict[str, Any]) -> None:  # an answer last, yet "ready": no proof
        values["progress"].update(status="ready", answer=None, outcome=None)

    backend.edit_values("t1", reopen)
    before = backend.fingerprint()
    out = run_cli(argv, model_factory=factory)
    assert (out["exit_code"], out["error_code"]) == (4, "damaged")
    assert "no next step" in out["error"]
    assert backend.fingerprint() == before and len(model.requests) == 1
