"""A runtime context is bound to its database and its `with` block; bad graph calls are typed.

Each test keeps an input that got past `Database.graph` before (issue 16's attack):
another database's context, a context used after its block, a fork from the input
checkpoint, malformed arguments, async methods on a synchronous saver.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from graph.api import open_database
from graph.checkpoints.load import graph_of
from graph.errors import ErrorCode, RefusedError, UsageError
from nodes.errors import InvocationErrorCode, InvocationRefusedError
from tests.conftest import SqliteBackend
from tests.fakes import ScriptedModel, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def scripted(model: ScriptedModel) -> Any:
    return lambda model_id, settings: model


def _first_budget(db: Any, thread_id: str) -> Any:
    """The oldest checkpoint before budget: no request made yet (history is newest first)."""
    config = {"configurable": {"thread_id": thread_id}}
    return [s for s in db.graph.get_state_history(config) if s.next == ("budget",)][-1]


def _input_checkpoint(db: Any, thread_id: str) -> Any:
    """The thread's input checkpoint: step -1, next `__start__`."""
    config = {"configurable": {"thread_id": thread_id}}
    return [s for s in db.graph.get_state_history(config) if s.metadata["step"] == -1][0]


def test_a_context_from_another_database_is_refused_and_the_thread_stays_within_its_maximum(
        tmp_path: Any) -> None:
    one, two = SqliteBackend(tmp_path / "one.sqlite"), SqliteBackend(tmp_path / "two.sqlite")
    model = ScriptedModel([tool_call_reply(f"c{i}") for i in range(4)])
    with open_database(one.db, create=True, model_factory=scripted(model)) as db1, \
            open_database(two.db, create=True, model_factory=scripted(model)) as db2:
        assert db1.run("t", task=TASK, once=False, max_attempts=2).status == "exhausted"
        db2.run("t", task=TASK, max_attempts=50)
        before = one.fingerprint(), two.fingerprint()
        start = _first_budget(db1, "t")
        with db2.invocation("t") as foreign, pytest.raises(RefusedError) as refused:
            db1.graph.invoke(None, start.config, context=foreign, durability="sync")
        assert (one.fingerprint(), two.fingerprint()) == before
        assert db1.history("t")["header"]["attempts"] == 2
    assert refused.value.error_code == ErrorCode.IDENTITY_MISMATCH
    assert refused.value.exit_code == 4
    assert len(model.requests) == 3


def test_the_budget_node_refuses_another_databases_context_past_the_api_wrapper(
        tmp_path: Any) -> None:
    one, two = SqliteBackend(tmp_path / "one.sqlite"), SqliteBackend(tmp_path / "two.sqlite")
    model = ScriptedModel([tool_call_reply(f"c{i}") for i in range(4)])
    with open_database(one.db, create=True, model_factory=scripted(model)) as db1, \
            open_database(two.db, create=True, model_factory=scripted(model)) as db2:
        db1.run("t", task=TASK, once=False, max_attempts=2)
        db2.run("t", task=TASK, max_attempts=50)
        ledgers = one.ledger_row("t"), two.ledger_row("t")
        with db2.invocation("t") as foreign, pytest.raises(InvocationRefusedError) as refused:
            graph_of(db1.store).invoke(None, _first_budget(db1, "t").config, context=foreign,
                                   durability="sync")
        assert (one.ledger_row("t"), two.ledger_row("t")) == ledgers
    assert refused.value.error_code == InvocationErrorCode.IDENTITY_MISMATCH
    assert len(model.requests) == 3


def test_a_context_used_after_its_block_is_refused_while_another_holder_has_the_lock(
        sqlite_db: Any) -> None:
    backend = SqliteBackend(sqlite_db)
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("B", task=TASK, max_attempts=10)
        with db.invocation("B") as stale:
            pass
        before = backend.fingerprint()
        with open_database(backend.db, model_factory=scripted(model)) as other, \
                other.invocation("B"), pytest.raises(UsageError) as refused:
            db.graph.invoke(None, {"configurable": {"thread_id": "B"}}, context=stale,
                            durability="sync")
        assert backend.fingerprint() == before
    assert "block has ended" in refused.value.detail
    assert len(model.requests) == 1


def test_the_budget_node_refuses_a_context_used_after_its_block(sqlite_db: Any) -> None:
    backend = SqliteBackend(sqlite_db)
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("B", task=TASK, max_attempts=10)
        ledger = backend.ledger_row("B")
        with db.invocation("B") as stale:
            pass
        with pytest.raises(InvocationRefusedError) as refused:
            graph_of(db.store).invoke(None, {"configurable": {"thread_id": "B"}}, context=stale,
                                  durability="sync")
        assert backend.ledger_row("B") == ledger
    assert refused.value.error_code == InvocationErrorCode.USAGE
    assert len(model.requests) == 1


def test_a_context_not_made_by_invocation_is_refused(sqlite_db: Any) -> None:
    from nodes.context import StepContext

    backend = SqliteBackend(sqlite_db)
    model = ScriptedModel([tool_call_reply("c1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("B", task=TASK)
        before = backend.fingerprint()
        built = StepContext("B", db.store.ledger, model, db.store.log)  # holds no lock
        with pytest.raises(UsageError) as refused:
            db.graph.invoke(None, {"configurable": {"thread_id": "B"}}, context=built)
        assert backend.fingerprint() == before
    assert "not made by Database.invocation" in refused.value.detail


def test_a_fork_from_the_input_checkpoint_is_refused_and_the_thread_stays_readable(
        sqlite_db: Any) -> None:
    backend = SqliteBackend(sqlite_db)
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("t", task=TASK, once=False, max_attempts=2, keep_checkpoints="all")
        start = _input_checkpoint(db, "t")
        assert start.next == ("__start__",)
        before = backend.fingerprint()
        for _ in range(2):  # the second fork once failed inside LangGraph (EmptyInputError)
            with db.invocation("t") as context, pytest.raises(UsageError) as refused:
                db.graph.invoke(None, start.config, context=context, durability="sync")
            assert "nothing to fork" in refused.value.detail
        with pytest.raises(UsageError):
            db.graph.update_state(start.config, {"messages": []})
        assert backend.fingerprint() == before
        assert db.history("t")["header"]["attempts"] == 2
    assert refused.value.checkpoint_id == start.config["configurable"]["checkpoint_id"]


def test_a_fork_from_an_unknown_checkpoint_is_a_usage_error(sqlite_db: Any) -> None:
    backend = SqliteBackend(sqlite_db)
    model = ScriptedModel([tool_call_reply("c1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("t", task=TASK)
        before = backend.fingerprint()
        config = {"configurable": {"thread_id": "t",
                                   "checkpoint_id": "1f000000-0000-6000-8000-000000000000"}}
        with db.invocation("t") as context, pytest.raises(UsageError):
            db.graph.invoke(None, config, context=context, durability="sync")
        assert backend.fingerprint() == before


def test_update_state_from_a_checkpoint_the_window_trimmed_says_why_it_is_gone(
        sqlite_db: Any) -> None:
    """A new user forked from a checkpoint id noted earlier, which the thread's window of
    kept checkpoints had trimmed since, and read only "needs an existing thread"."""
    backend = SqliteBackend(sqlite_db)
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("t", task=TASK, keep_checkpoints=1)
        config = {"configurable": {"thread_id": "t"}}
        first = db.graph.get_state(config).config
        db.run("t")
        before = backend.fingerprint()
        with pytest.raises(UsageError) as refused:
            db.graph.update_state(first, {"messages": [{"role": "user", "content": "more"}]})
        assert backend.fingerprint() == before
    assert "is not stored for thread t" in str(refused.value)
    assert "keep_checkpoints" in str(refused.value)


CONFIG_A = {"configurable": {"thread_id": "A"}}
BAD_CALLS = {
    "dict context": lambda g, c: g.invoke(None, CONFIG_A, context={"thread_id": "A"}),
    "namespace context": lambda g, c: g.invoke(
        None, CONFIG_A, context=types.SimpleNamespace(thread_id="A")),
    "str config": lambda g, c: g.invoke(None, "A", context=c),
    "list config for invoke": lambda g, c: g.invoke(None, [CONFIG_A], context=c),
    "list config for stream": lambda g, c: g.stream(None, [CONFIG_A], context=c),
    "str configurable": lambda g, c: g.invoke(None, {"configurable": "x"}, context=c),
    "batch of str configs": lambda g, c: g.batch([None], ["A"], context=c),
    "update_state without a thread": lambda g, c: g.update_state({"configurable": {}},
                                                                 {"messages": []}),
    "update_state with a str config": lambda g, c: g.update_state("A", {"messages": []}),
    "ainvoke": lambda g, c: g.ainvoke(None, CONFIG_A, context=c),
    "astream": lambda g, c: g.astream(None, CONFIG_A, context=c),
    "abatch": lambda g, c: g.abatch([None], [CONFIG_A], context=c),
    "astream_events": lambda g, c: g.astream_events(None, CONFIG_A, context=c, version="v2"),
    "aupdate_state": lambda g, c: g.aupdate_state(CONFIG_A, {"messages": []}),
    "abulk_update_state": lambda g, c: g.abulk_update_state(CONFIG_A, []),
    "aget_state": lambda g, c: g.aget_state(CONFIG_A),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_a_bad_graph_call_is_a_typed_usage_error_changing_nothing(sqlite_db: Any,
                                                                  case: str) -> None:
    backend = SqliteBackend(sqlite_db)
    model = ScriptedModel([tool_call_reply("c1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("A", task=TASK)
        before = backend.fingerprint()
        with db.invocation("A") as context, pytest.raises(UsageError) as refused:
            result = BAD_CALLS[case](db.graph, context)
            if asyncio.iscoroutine(result):
                asyncio.run(result)
        assert backend.fingerprint() == before
    assert refused.value.exit_code == 2
    if case.startswith("a"):
        assert "Database.arun" in refused.value.detail
    assert len(model.requests) == 1


def test_async_graph_methods_are_refused_on_every_backend_before_running(backend: Any) -> None:
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("A", task=TASK, max_attempts=10)
        ledger = backend.ledger_row("A")
        for case in ("ainvoke", "abatch", "aupdate_state", "aget_state"):
            with db.invocation("A") as context, pytest.raises(UsageError) as refused:
                asyncio.run(BAD_CALLS[case](db.graph, context))
            assert "Database.arun" in refused.value.detail
        assert backend.ledger_row("A") == ledger
    assert len(model.requests) == 1


def test_a_live_context_of_this_database_still_runs_through_a_configured_copy(
        sqlite_db: Any) -> None:
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])
    with open_database(str(sqlite_db), create=True, model_factory=scripted(model)) as db:
        db.run("A", task=TASK, max_attempts=10)
        with db.invocation("A") as context:
            parts = list(db.graph.with_config(tags=["mine"]).stream(
                None, _first_budget(db, "A").config, context=context, durability="sync"))
        assert parts
        assert db.history("A")["header"]["attempts"] == 2
    assert len(model.requests) == 2


def test_a_fork_of_a_done_thread_with_no_attempt_left_is_refused_and_keeps_the_answer(
        backend: Any) -> None:
    """Issue 30: a fork of a thread done at its maximum could send nothing and stopped it
    `exhausted` at budget, so the paid answer vanished from the thread's latest state."""
    with open_database(backend.db, create=True) as db:
        done = db.run("t1", task="How long does shipping take at the demo shop?", once=False,
                      max_attempts=2)
        assert (done.status, done.attempts) == ("done", 2)
        before = backend.fingerprint()
        with db.invocation("t1") as context, pytest.raises(UsageError) as refused:
            db.graph.invoke(None, _first_budget(db, "t1").config, context=context,
                            durability="sync")
        assert "no attempt left" in refused.value.message and "answer" in refused.value.message
        assert backend.fingerprint() == before, "a refusal changes nothing"
        again = db.run("t1")
    assert (again.status, again.answer) == ("done", done.answer)
