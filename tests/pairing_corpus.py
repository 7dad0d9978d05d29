"""Conversations that break the one tool-call pairing rule, and some that keep it (issue 29).

Each case is the conversation after the thread's task, as an edit would store it
(langgraph#5109: a user message added while a call is unanswered). `nodes.pairing`,
`graph.verify` and `graph.run` are all tested against this one corpus.
"""

from __future__ import annotations

from typing import Any


def call(call_id: str, name: str = "list_references") -> dict[str, Any]:
    """A tool call in wire form."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def asks(*ids: str) -> dict[str, Any]:
    """An assistant message calling a tool once per id."""
    return {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]}


def says(text: str = "Shipping takes 3 days [ship-01].") -> dict[str, Any]:
    """An assistant message with text only."""
    return {"role": "assistant", "content": text}


def result(call_id: Any) -> dict[str, Any]:
    """A tool result for `call_id`."""
    return {"role": "tool", "tool_call_id": call_id, "content": "ship-01: 3 days"}


def user(text: str = "Also, what about returns?") -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text}


BROKEN: dict[str, list[dict[str, Any]]] = {
    "user message between call and result": [asks("c1"), user(), result("c1")],
    "user message after an open call": [asks("c1"), user()],
    "user message between two results of one message": [asks("c1", "c2"), result("c1"), user(),
                                                         result("c2")],
    "user message before a reused id's result": [asks("c0"), result("c0"), asks("c0"), user(),
                                                 result("c0")],
    "user message after a later open call": [asks("c1"), result("c1"), asks("c2"), user(),
                                             result("c2"), says()],
    "user messages twice while a call is open": [asks("c1"), result("c1"), asks("c2"), user(),
                                                 user("and exchanges?"), result("c2")],
    "result without any call": [result("c1")],
    "tool message right after the task": [result("call_demo_1"), asks("call_demo_1")],
    "result after a user message": [user(), result("c1")],
    "result after a final answer": [says(), result("c1")],
    "result before the call it names": [says(), result("c5"), asks("c5")],
    "result for an unknown id": [asks("c1"), result("c2")],
    "result for an id in another case": [asks("call_A"), result("call_a")],
    "result for an id with a space": [asks("c1"), result(" c1")],
    "result with an empty id": [asks("c1"), result("")],
    "first result unknown, then the real ones": [asks("c1", "c2"), result("c3"), result("c1"),
                                                 result("c2")],
    "one result too many": [asks("c1", "c2", "c3"), result("c1"), result("c2"), result("c3"),
                            result("c4")],
    "duplicate result": [asks("c1"), result("c1"), result("c1")],
    "duplicate result after the answer": [asks("c1"), result("c1"), says(), result("c1")],
    "duplicate result after a user message": [asks("c1"), result("c1"), user(), result("c1")],
    "duplicate result of a reused id": [asks("c0"), result("c0"), asks("c0"), result("c0"),
                                        result("c0")],
    "an earlier message's result after a new call": [asks("c1"), result("c1"), asks("c2"),
                                                     result("c1")],
    "same id twice in one message": [asks("c1", "c1"), result("c1"), result("c1")],
    "two assistants with calls, results after both": [asks("c1"), asks("c2"), result("c1"),
                                                      result("c2")],
    "two assistants with calls, results crossed": [asks("c1"), asks("c2"), result("c2"),
                                                   result("c1")],
    "two assistants with calls, no results": [asks("c1"), asks("c2")],
    "assistant text after an open call": [asks("c1"), says()],
    "assistant text after half the results": [asks("c1", "c2"), result("c1"), says()],
    "new calls after half the results": [asks("c1", "c2"), result("c1"), asks("c3"), result("c2"),
                                         result("c3")],
    "a break after a long intact prefix": [asks("c1"), result("c1"), asks("c2"), result("c2"),
                                           user(), asks("c3"), user(), result("c3")],
    "the task's open call answered after a user message": [user(), result("call_demo_1")],
    "results of three calls with one missing and a user message": [
        asks("c1", "c2", "c3"), result("c1"), result("c3"), user()],
}
"""Conversations (after the task) that break the rule: each must be refused."""

INTACT: dict[str, list[dict[str, Any]]] = {
    "a user message after every call is answered": [asks("c1"), result("c1"), user()],
    "ids reused by a later message": [asks("c0"), result("c0"), asks("c0"), result("c0"), says()],
    "an open call at the end": [asks("c1")],
    "results in another order than the calls": [asks("c1", "c2"), result("c2"), result("c1")],
}
"""Conversations that keep the rule: stored and loaded as they are."""
