"""The ledger guards every invocation of `Database.graph`: wrong context, none, forks past a cap."""

from __future__ import annotations

from typing import Any

import pytest

from graph.api import open_database
from graph.checkpoints.load import graph_of
from graph.errors import ErrorCode, RefusedError, RunError, UsageError
from tests.fakes import ScriptedModel, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def scripted(model: ScriptedModel) -> Any:
    return lambda model_id, settings: model


def stored(db: Any, thread_id: str) -> Any:
    """Everything stored for a thread: checkpoints with their pending writes, log, ledger."""
    config = {"configurable": {"thread_id": thread_id}}
    checkpoints = [(t.config["configurable"]["checkpoint_id"], sorted(map(repr, t.pending_writes or [])))
                   for t in db.checkpointer.list(config)]
    return checkpoints, db.store.log.rows(thread_id), db.store.ledger.read(thread_id)


def _first_budget(db: Any, thread_id: str) -> Any:
    """The oldest checkpoint before budget: no request made yet (history is newest first)."""
    config = {"configurable": {"thread_id": thread_id}}
    return [s for s in db.graph.get_state_history(config) if s.next == ("budget",)][-1]


def test_a_fork_after_the_token_cap_stopped_the_thread_sends_nothing(backend: Any) -> None:
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])  # 15 tokens each
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        first = db.run("t1", task=TASK, max_attempts=10, max_tokens=20, once=False)
        assert (first.status, first.stop_reason) == ("exhausted", "token_cap")
        ledger = backend.ledger_row("t1")
        start = _first_budget(db, "t1")  # before any request: the state's total is 0
        assert start.values["progress"]["usage"]["total_tokens"] == 0
        for _ in range(2):
            with db.invocation("t1") as context:
                db.graph.invoke(None, start.config, context=context, durability="sync")
            fork = db.graph.get_state({"configurable": {"thread_id": "t1"}}).values["progress"]
            assert (fork["status"], fork["stop_reason"]) == ("exhausted", "token_cap")
        again = db.run("t1")  # a plain run continues from the fork: still stopped
    assert len(model.requests) == 2
    assert backend.ledger_row("t1") == ledger
    assert (again.status, again.stop_reason) == ("exhausted", "token_cap")


def test_another_threads_context_is_refused_and_both_threads_stay_as_stored(
        backend: Any) -> None:
    model = ScriptedModel([tool_call_reply("a1"), tool_call_reply("b1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("A", task=TASK, max_attempts=1)
        db.run("B", task=TASK, max_attempts=4)
        before = stored(db, "A"), stored(db, "B")
        start = _first_budget(db, "A")
        with db.invocation("B") as context, pytest.raises(RefusedError) as refused:
            db.graph.invoke(None, start.config, context=context, durability="sync")
        after = stored(db, "A"), stored(db, "B")
    assert refused.value.error_code == ErrorCode.IDENTITY_MISMATCH
    assert len(model.requests) == 2
    assert after == before


def test_a_new_thread_invoked_with_another_threads_context_is_refused_unwritten(
        backend: Any) -> None:
    model = ScriptedModel([tool_call_reply("b1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("B", task=TASK)
        before = stored(db, "B")
        with db.invocation("B") as context, pytest.raises(RefusedError) as refused:
            db.graph.invoke({"task": "hi"}, {"configurable": {"thread_id": "brand_new"}},
                            context=context, durability="sync")
        assert stored(db, "B") == before
        assert stored(db, "brand_new")[0] == []
    assert refused.value.error_code == ErrorCode.IDENTITY_MISMATCH
    assert len(model.requests) == 1


def test_invoking_without_a_context_is_a_usage_error(backend: Any) -> None:
    model = ScriptedModel([tool_call_reply("c1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("t1", task=TASK)
        before = stored(db, "t1")
        with pytest.raises(UsageError) as refused:
            db.graph.invoke(None, {"configurable": {"thread_id": "t1"}})
        assert stored(db, "t1") == before
    assert isinstance(refused.value, RunError)
    assert refused.value.error_code == ErrorCode.USAGE


def test_the_budget_node_refuses_a_mismatch_past_the_api_wrapper(backend: Any) -> None:
    """The node's own check, for callers that reach the compiled graph itself."""
    from nodes.errors import InvocationErrorCode, InvocationRefusedError

    model = ScriptedModel([tool_call_reply("a1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("A", task=TASK, max_attempts=1)
        ledger = backend.ledger_row("A")
        with db.invocation("A") as context:
            other = type(context)("elsewhere", context.ledger, context.model, context.log)
            with pytest.raises(InvocationRefusedError) as refused:
                graph_of(db.store).invoke(None, _first_budget(db, "A").config, context=other,
                                      durability="sync")
    assert refused.value.error_code == InvocationErrorCode.IDENTITY_MISMATCH
    assert backend.ledger_row("A") == ledger
    assert len(model.requests) == 1


def _call(graph: Any, method: str, config: Any, context: Any) -> Any:
    """Calls `graph.<method>` the way a LangGraph user would, async ones run to completion."""
    import asyncio

    kwargs: dict[str, Any] = {} if context is None else {"context": context}
    if method in ("batch", "abatch", "batch_as_completed", "abatch_as_completed"):
        result = getattr(graph, method)([None], [config], **kwargs)
    elif method in ("transform", "atransform"):
        result = getattr(graph, method)(iter([None]), config, **kwargs)
    elif method in ("stream_events", "astream_events"):
        result = getattr(graph, method)(None, config, version="v2", **kwargs)
    else:
        result = getattr(graph, method)(None, config, **kwargs)
    if asyncio.iscoroutine(result):
        return asyncio.run(result)
    return result  # a stream: refused at the call, so it is never iterated here


INVOCATIONS = ["invoke", "ainvoke", "stream", "astream", "batch", "abatch", "batch_as_completed",
               "abatch_as_completed", "stream_events", "astream_events", "astream_log",
               "transform", "atransform"]


@pytest.mark.parametrize("method", INVOCATIONS)
def test_every_invocation_method_refuses_a_missing_or_mismatched_context_before_running(
        sqlite_db: Any, method: str) -> None:
    model = ScriptedModel([tool_call_reply("a1"), tool_call_reply("b1")])
    with open_database(str(sqlite_db), create=True, model_factory=scripted(model)) as db:
        db.run("A", task=TASK)
        db.run("B", task=TASK)
        before = stored(db, "A"), stored(db, "B")
        start = _first_budget(db, "A")
        with pytest.raises(UsageError):
            _call(db.graph, method, start.config, None)
        with db.invocation("B") as context, pytest.raises(RefusedError) as refused:
            _call(db.graph, method, start.config, context)
        with db.invocation("B") as context, pytest.raises(RefusedError):
            _call(db.graph.with_config(tags=["mine"]), method, start.config, context)
        assert (stored(db, "A"), stored(db, "B")) == before
    assert refused.value.error_code == ErrorCode.IDENTITY_MISMATCH
    assert len(model.requests) == 2


def test_a_batch_with_one_foreign_config_runs_none_of_its_inputs(sqlite_db: Any) -> None:
    model = ScriptedModel([tool_call_reply("a1"), tool_call_reply("b1")])
    with open_database(str(sqlite_db), create=True, model_factory=scripted(model)) as db:
        db.run("A", task=TASK)
        db.run("B", task=TASK)
        before = stored(db, "A"), stored(db, "B")
        configs = [_first_budget(db, "A").config, _first_budget(db, "B").config]
        with db.invocation("A") as context, pytest.raises(RefusedError):
            db.graph.batch([None, None], configs, context=context)
        assert (stored(db, "A"), stored(db, "B")) == before
    assert len(model.requests) == 2
