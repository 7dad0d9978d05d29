"""`Database.graph.update_state` refuses a `messages` update that would leave the thread unloadable."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import StateUpdate

from graph.api import open_database
from graph.errors import UsageError
from graph.exitcodes import ExitCode

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
        db.run("t1", task=TASK)
        db.graph.update_state(CONFIG, {"messages": [{"role": "user", "content": "And returns?"}]})
        assert db.graph.get_state(CONFIG).values["messages"][-1] == {"role": "user",
                                                                      "content": "And returns?"}
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
