"""The one tool-call pairing rule (`nodes.pairing.open_calls`) and the request builder (I6).

Pairing is by role and order: after an assistant message with calls, only the results
of those calls may follow until all are answered (langgraph#5109). Every conversation of
the shared corpus (`tests/pairing_corpus.py`) that breaks it is refused, and the request
builder never sends one.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodes.pairing import UnsafeHistoryError, check_request, not_executed_results, open_calls
from nodes.request import prepare_request
from nodes.review import open_calls_of_last
from tests.pairing_corpus import BROKEN, INTACT, asks, result, user

TASK = {"role": "user", "content": "How long does shipping take at the demo shop?"}
THREAD: Any = {"context_tokens": 100_000, "workspace": None, "allow_writes": None}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_every_broken_conversation_is_refused_by_the_rule(case: str) -> None:
    with pytest.raises(UnsafeHistoryError, match=r"message \d+"):
        open_calls([TASK, *BROKEN[case]])


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_request_builder_never_sends_a_broken_conversation(case: str) -> None:
    with pytest.raises(UnsafeHistoryError):
        prepare_request(THREAD, [TASK, *BROKEN[case]])


@pytest.mark.parametrize("case", sorted(INTACT))
def test_conversations_that_keep_the_rule_are_accepted(case: str) -> None:
    open_calls([TASK, *INTACT[case]])


def test_a_tool_message_first_is_refused() -> None:
    with pytest.raises(UnsafeHistoryError, match="message 0"):
        open_calls([result("c1"), TASK])


def test_a_user_message_after_open_calls_names_them() -> None:
    with pytest.raises(UnsafeHistoryError, match=r"message 2 \(user\) follows unanswered tool "
                                                 r"call\(s\) \['c1', 'c2'\]"):
        open_calls([TASK, asks("c1", "c2"), user()])


def test_open_calls_are_those_of_the_latest_assistant_message_still_unanswered() -> None:
    messages = [TASK, asks("c0"), result("c0"), asks("c0", "c1"), result("c1")]
    assert open_calls(messages) == ["c0"]
    assert [c["id"] for c in open_calls_of_last(messages)] == ["c0"]
    assert [m["tool_call_id"] for m in not_executed_results(messages)] == ["c0"]
    with pytest.raises(UnsafeHistoryError, match="have no result"):
        check_request(messages)
