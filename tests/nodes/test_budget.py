"""The budget node, called directly with a state dict and fakes (no graph, no database)."""

from __future__ import annotations

from nodes.budget import budget_node
from nodes.context import LedgerEntry
from tests.fakes import tool_call_reply
from tests.harness import new_state, node_runtime
from tests.memory_ledger import MemoryLedger


def _ledger(max_attempts: int = 4, *, claimed: int = 0) -> MemoryLedger:
    """A ledger whose thread `t1` has `claimed` attempts counted and sent."""
    ledger = MemoryLedger()
    ledger.create("t1", max_attempts)
    for attempt in range(1, claimed + 1):
        ledger.count("t1")
        assert ledger.claim("t1", attempt)
    return ledger


def test_budget_counts_the_attempt_in_the_ledger_before_reason_can_send() -> None:
    ledger = _ledger()
    update = budget_node(new_state(), node_runtime(ledger))
    assert update == {"progress": {"status": "ready", "attempts": 1, "outcome": None}}
    assert ledger.read("t1") == LedgerEntry(1, 0, 4)  # counted, not yet claimed


def test_budget_reuses_a_counted_attempt_whose_request_was_never_sent() -> None:
    ledger = _ledger()
    budget_node(new_state(), node_runtime(ledger))
    update = budget_node(new_state(), node_runtime(ledger))  # a crash before the claim
    assert update["progress"]["attempts"] == 1
    assert ledger.read("t1") == LedgerEntry(1, 0, 4)


def test_budget_counts_the_next_attempt_once_the_last_one_was_sent() -> None:
    ledger = _ledger(claimed=1)
    update = budget_node(new_state(), node_runtime(ledger))
    assert update["progress"] == {"status": "ready", "attempts": 2, "outcome": None}


def test_budget_stops_the_thread_at_its_maximum_without_counting_more() -> None:
    ledger = _ledger(max_attempts=2, claimed=2)
    update = budget_node(new_state(max_attempts=2), node_runtime(ledger))
    assert update["progress"] == {"status": "exhausted", "stop_reason": "budget", "attempts": 2,
                                  "outcome": None}
    assert ledger.read("t1") == LedgerEntry(2, 2, 2)


def test_budget_stops_at_the_token_cap_before_counting() -> None:
    ledger = _ledger()
    state = new_state(max_tokens=100)
    state["progress"] = {**state["progress"],
                         "usage": {"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100}}
    update = budget_node(state, node_runtime(ledger))
    assert update["progress"]["stop_reason"] == "token_cap"
    assert update["progress"]["status"] == "exhausted"
    assert ledger.read("t1") == LedgerEntry(0, 0, 4)


def test_budget_stops_a_conversation_that_cannot_fit_the_context_limit_before_counting() -> None:
    ledger = _ledger()
    update = budget_node(new_state("x" * 4_000, context_tokens=100), node_runtime(ledger))
    assert update["progress"]["stop_reason"] == "context_limit"
    assert ledger.read("t1") == LedgerEntry(0, 0, 4)


def test_budget_never_counts_for_a_cancelled_thread() -> None:
    ledger = _ledger()
    state = new_state()
    state["progress"] = {**state["progress"], "status": "cancelled"}
    assert budget_node(state, node_runtime(ledger)) == {}
    assert ledger.read("t1") == LedgerEntry(0, 0, 4)


def test_budget_answers_a_tool_call_a_crash_left_open_before_counting() -> None:
    ledger = _ledger(claimed=1)
    state = new_state()
    state["messages"] = [*state["messages"], tool_call_reply("call_7").message]
    update = budget_node(state, node_runtime(ledger))
    (result,) = update["messages"]
    assert (result["role"], result["tool_call_id"]) == ("tool", "call_7")
    assert update["progress"]["attempts"] == 2


def test_budget_stops_at_the_token_cap_the_log_recorded_though_the_state_says_less() -> None:
    from tests.fakes import RecordingLog

    ledger, log = _ledger(claimed=2), RecordingLog()
    for attempt in (1, 2):  # 2 x 15 tokens recorded; a fork's state shows none of them
        log.record("t1", attempt, "reason", {"outcome": "tool_calls", "usage": {"total_tokens": 15}})
    state = new_state()
    state["thread"]["max_tokens"] = 20
    update = budget_node(state, node_runtime(ledger, log=log))
    assert update == {"progress": {"status": "exhausted", "stop_reason": "token_cap", "outcome": None}}
    assert ledger.read("t1") == LedgerEntry(2, 2, 4)  # nothing counted


def test_budget_refuses_an_invocation_without_a_runtime_context() -> None:
    from types import SimpleNamespace

    import pytest

    from nodes.errors import InvocationErrorCode, InvocationRefusedError

    with pytest.raises(InvocationRefusedError) as refused:
        budget_node(new_state(), SimpleNamespace(context=None))  # type: ignore[arg-type]
    assert refused.value.error_code == InvocationErrorCode.USAGE
