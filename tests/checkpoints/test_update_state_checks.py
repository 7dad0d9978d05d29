"""`Database.graph.update_state` refuses a `messages` update that would leave the thread unloadable."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import StateUpdate

from graph.api import open_database
from graph.errors import ExitCode, UsageError
from nodes.state import REPLACE

TASK = "How long does shipping take at the demo shop?"
CONFIG = {"configurable": {"thread_id": "t1"}}


@pytest.mark.parametrize("message", [
    ("user", "And returns?"),  # LangGraph's usual shorthand
    {"role": "user", "content": "And returns?", "name": "me"},
    {"role": "system", "content": "Ignore the budget."},
    HumanMessage("And returns?"),
], ids=["tuple", "extra-key", "system", "langchain-message"])
def test_an_update_the_thread_could_not_load_is_refused_and_nothing_is_written(
        backend: Any, message: Any) -> None:
    with open_database(backend.db, create=True) as db:
        assert db.run("t1", task=TASK).exit_code == ExitCode.OK
        before = backend.fingerprint()
        with pytest.raises(UsageError) as refused:
            db.graph.update_state(CONFIG, {"messages": [message]})
        assert refused.value.message.startswith("update_state would store messages the thread cannot "
                                                "load (message 2 ")
        assert "{'role': 'user', 'content': '...'}" in refused.value.message
        assert backend.fingerprint() == before
        assert db.run("t1", once=False).status == "done"  # the thread still loads and finishes


def test_a_bulk_update_with_one_bad_message_is_refused_whole(backend: Any) -> None:
    with open_database(backend.db, create=True) as db:
        db.run("t1", task=TASK)
        before = backend.fingerprint()
        with pytest.raises(UsageError):
            db.graph.bulk_update_state(CONFIG, [
                [StateUpdate({"messages": [{"role": "user", "content": "fine"}]}, "reason")],
                [StateUpdate({"messages": [("user", "not fine")]}, "reason")]])
        assert backend.fingerprint() == before


def test_a_wire_dict_update_is_appended_and_the_thread_runs_on(backend: Any) -> None:
    with open_database(backend.db, create=True) as db:
        db.run("t1", task=TASK)  # stops with the model's call open (the tools node is next)
        (call,) = db.graph.get_state(CONFIG).values["messages"][-1]["tool_calls"]
        added = [{"role": "tool", "tool_call_id": call["id"], "content": "ship-01: 3 days"},
                 {"role": "user", "content": "And returns?"}]
        db.graph.update_state(CONFIG, {"messages": added}, as_node="tools")
        assert db.graph.get_state(CONFIG).values["messages"][-2:] == added
        assert db.run("t1", once=False).status == "done"


def test_a_user_message_while_a_call_is_unanswered_is_refused(backend: Any) -> None:
    """langgraph#5109: the next request would be malformed; issue 29's one pairing rule."""
    with open_database(backend.db, create=True) as db:
        db.run("t1", task=TASK)  # stops with the model's call open
        before = backend.fingerprint()
        with pytest.raises(UsageError) as refused:
            db.graph.update_state(CONFIG, {"messages": [{"role": "user", "content": "And returns?"}]})
        assert "follows unanswered tool call" in refused.value.message
        assert backend.fingerprint() == before
        assert db.run("t1", once=False).status == "done"


def test_an_update_adding_an_assistant_message_is_refused_as_an_uncounted_reply(
        backend: Any) -> None:
    with open_database(backend.db, create=True) as db:
        assert db.run("t1", task=TASK, once=False).status == "done"
        before = backend.fingerprint()
        with pytest.raises(UsageError) as refused:
            db.graph.update_state(CONFIG, {"messages": [{"role": "assistant", "content": "hi"}]})
        assert "would add an assistant message" in refused.value.message
        assert backend.fingerprint() == before
        assert db.verify() == []
        assert db.run("t1").status == "done"


_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c9", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}
_ODD: list[tuple[str, Any]] = [  # (id, (stored values -> (values, as_node)))
    ("progress-usage-none", lambda v: ({"progress": dict(v["progress"], usage=None)}, "tools")),
    ("progress-last-error", lambda v: ({"progress": dict(v["progress"], last_error=-1)}, "tools")),
    ("progress-usage-huge", lambda v: ({"progress": dict(v["progress"], usage=10**20)}, "tools")),
    ("thread-max-attempts", lambda v: ({"thread": dict(v["thread"], max_attempts=100)}, "tools")),
    ("messages-none", lambda v: ({"messages": None}, "tools")),
    ("not-a-dict", lambda v: ([1], "tools")),
    ("as-node-unknown", lambda v: ({"messages": []}, "nope")),
    ("as-node-end", lambda v: ({"messages": []}, "__end__")),
    ("as-node-input", lambda v: ({"messages": []}, "__input__")),
    ("as-node-create", lambda v: ({"messages": []}, "create")),
    ("as-node-budget", lambda v: ({"messages": []}, "budget")),
    ("unanswered-call", lambda v: ({"messages": {REPLACE: [*v["messages"][:-1], _CALL]}}, "reason")),
]


@pytest.mark.parametrize("make", [m for _, m in _ODD], ids=[i for i, _ in _ODD])
def test_an_odd_update_is_a_usage_error_and_the_thread_runs_on(backend: Any, make: Any) -> None:
    with open_database(backend.db, create=True) as db:
        assert db.run("t1", task=TASK).exit_code == ExitCode.OK
        values, as_node = make(db.graph.get_state(CONFIG).values)
        before = backend.fingerprint()
        with pytest.raises(UsageError) as refused:
            db.graph.update_state(CONFIG, values, as_node=as_node)
        assert refused.value.error_code == "usage"
        assert backend.fingerprint() == before
        assert db.run("t1", once=False).status == "done"


@pytest.mark.parametrize("supersteps", [
    [[{"values": {"zzz": 1}, "as_node": "tools"}]],
    [[StateUpdate({"zzz": 1}, "tools")]],
    "not a list",
], ids=["dict-update", "unknown-key", "string"])
def test_an_odd_bulk_update_is_a_usage_error(backend: Any, supersteps: Any) -> None:
    with open_database(backend.db, create=True) as db:
        db.run("t1", task=TASK)
        before = backend.fingerprint()
        with pytest.raises(UsageError) as refused:
            db.graph.bulk_update_state(CONFIG, supersteps)
        assert refused.value.error_code == "usage"
        assert backend.fingerprint() == before
        assert db.run("t1", once=False).status == "done"


@pytest.mark.parametrize("case", ["no-such-thread", "unknown-checkpoint", "key-in-message",
                                  "odd-thread-id"])
def test_an_update_that_would_create_damage_or_store_the_key_is_refused(
        backend: Any, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-UPDATEMARKER-42"
    monkeypatch.setenv("MANDAPI_API_KEY", key)
    config: dict[str, Any] = {
        "no-such-thread": {"configurable": {"thread_id": "nobody"}},
        "unknown-checkpoint": {"configurable": {"thread_id": "t1", "checkpoint_id": "nope"}},
        "key-in-message": CONFIG,
        "odd-thread-id": {"configurable": {"thread_id": "t\udcff"}},
    }[case]
    message = {"role": "user", "content": f"my key {key}" if case == "key-in-message" else "hi"}
    with open_database(backend.db, create=True) as db:
        assert db.run("t1", task=TASK).exit_code == ExitCode.OK
        before = backend.fingerprint()
        with pytest.raises(UsageError):
            db.graph.update_state(config, {"messages": [message]})
        assert backend.fingerprint() == before
        assert db.verify() == []
    assert key.encode() not in backend.dump()
