"""Whole threads on the compiled graph, fast: InMemorySaver, in-memory ledger, scripted model.

The harness (`tests.harness`) also checks, at every request, that the request carries
its own claimed attempt (INVARIANTS I1).
"""

from __future__ import annotations

from typing import Any

from nodes.context import LedgerEntry, ModelReply
from nodes.demo_model import OfflineDemoModel
from nodes.prompts import SYSTEM_PROMPT
from tests.fakes import answer_reply, timeout_error, tool_call_reply


def _demo_turn(messages: list[dict[str, Any]]) -> ModelReply:
    return OfflineDemoModel().complete(messages, [])


def test_demo_thread_is_done_after_two_invocations_of_one_request_each(graph_harness) -> None:
    harness = graph_harness.script(_demo_turn, _demo_turn)
    first = harness.start()
    assert (first["progress"]["status"], first["progress"]["attempts"]) == ("ready", 1)
    assert harness.next == ("tools",) and len(harness.model.requests) == 1
    second = harness.step()
    assert (second["progress"]["status"], second["progress"]["attempts"]) == ("done", 2)
    assert "[ship-01]" in second["progress"]["answer"]
    assert harness.next == () and harness.ledger.read("t1") == LedgerEntry(2, 2, 4)


def test_every_request_starts_with_the_system_prompt_and_state_stores_none(graph_harness) -> None:
    values = graph_harness.script(_demo_turn, _demo_turn).run()
    for request in graph_harness.model.requests:
        assert request[0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert [m["role"] for m in request].count("system") == 1
    assert "system" not in {m["role"] for m in values["messages"]}


def test_a_model_that_never_answers_is_exhausted_at_the_maximum_and_asked_no_more(
        graph_harness) -> None:
    harness = graph_harness.script(*(tool_call_reply(f"call_{n}") for n in range(3)))
    values = harness.run(max_attempts=3)
    progress = values["progress"]
    assert (progress["status"], progress["stop_reason"], progress["attempts"]) == ("exhausted", "budget", 3)
    assert len(harness.model.requests) == 3 and harness.ledger.read("t1") == LedgerEntry(3, 3, 3)
    assert harness.step()["progress"]["status"] == "exhausted"  # no request: the script is empty
    assert len(harness.model.requests) == 3


def test_a_failed_request_is_not_retried_and_the_next_invocation_counts_a_new_attempt(
        graph_harness) -> None:
    harness = graph_harness.script(timeout_error(), tool_call_reply("c1"), answer_reply("done [ship-01]"))
    first = harness.start()
    assert (first["progress"]["outcome"], first["progress"]["last_error"]["error_code"]) == (
        "error", "timeout")
    assert len(harness.model.requests) == 1 and harness.ledger.read("t1") == LedgerEntry(1, 1, 4)
    assert harness.step()["progress"]["attempts"] == 2
    assert harness.step()["progress"]["status"] == "done"
    assert harness.ledger.read("t1") == LedgerEntry(3, 3, 4)


def test_replaying_a_checkpoint_before_reason_sends_nothing_uncounted(graph_harness) -> None:
    harness = graph_harness.script(_demo_turn)
    harness.start()
    (before_reason,) = [s for s in harness.graph.get_state_history(harness.config)
                        if s.next == ("reason",)]
    harness.graph.invoke(None, before_reason.config, context=harness.context, durability="sync")
    assert harness.values["progress"]["outcome"] == "not_sent"
    assert len(harness.model.requests) == 1 and harness.ledger.read("t1") == LedgerEntry(1, 1, 4)
