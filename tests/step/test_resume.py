"""Re-runs, replays and forks never send a request without its own counted attempt (I1, I2)."""

from __future__ import annotations

import pytest

from graph.agent import build_graph
from graph.settings import Settings
from graph.store import open_store
from nodes.context import StepContext
from nodes.pairing import UnsafeHistoryError
from tests.conftest import run_cli
from tests.fakes import NeverFinishes, ScriptedModel, answer_reply, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def factory(model):
    return lambda model_id, settings: model


class Boom(RuntimeError):
    """A bug in reason after the request went out (for example in parsing)."""


def test_reason_that_raised_after_sending_is_not_rerun_without_a_new_count(backend) -> None:
    model = ScriptedModel([Boom("parse bug"), tool_call_reply("c1"), answer_reply("ok [ship-01]")])
    with pytest.raises(Boom):
        run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db],
                model_factory=factory(model))
    assert len(model.requests) == 1 and backend.ledger_row("t1") == (1, 1, 4)
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db], model_factory=factory(model))
    # The resume went back through budget: a second request, with its own count.
    assert (out["attempts"], len(model.requests)) == (2, 2)
    assert backend.ledger_row("t1") == (2, 2, 4)
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db], model_factory=factory(model))
    assert (out["status"], out["attempts"], len(model.requests)) == ("done", 3, 3)


def test_langgraph_rerun_of_failed_reason_sends_nothing_even_without_the_driver(backend) -> None:
    """Invoke the compiled graph directly, as a notebook would, after reason raised."""
    model = ScriptedModel([Boom("after send")])
    with pytest.raises(Boom):
        run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db],
                model_factory=factory(model))
    with open_store(backend.db, create=False) as store:
        graph = build_graph(store.checkpointer)
        config = {"configurable": {"thread_id": "t1"}}
        assert graph.get_state(config).next == ("reason",)
        ctx = StepContext("t1", store.ledger, model)
        graph.invoke(None, config, context=ctx, durability="sync")
        state = graph.get_state(config)
    assert len(model.requests) == 1, "LangGraph's re-run of reason must not send"
    assert state.values["progress"]["outcome"] == "not_sent"
    assert state.next == ("budget",)
    assert backend.ledger_row("t1") == (1, 1, 4)


def test_counted_but_unsent_attempt_is_used_not_counted_twice(backend) -> None:
    """A crash between the budget commit and the claim wastes nothing."""
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    # As if budget counted attempt 2, then the process died before reason claimed it.
    backend.update_ledger("t1", attempts=2)
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("done", 2)
    assert backend.ledger_row("t1") == (2, 2, 4)


def test_replaying_an_older_checkpoint_cannot_lower_the_count_or_pass_the_maximum(backend) -> None:
    model = NeverFinishes()
    run_cli(["--thread", "t1", "--task", TASK, "--db", backend.db], model_factory=factory(model))
    assert len(model.requests) == 4
    with open_store(backend.db, create=False) as store:
        graph = build_graph(store.checkpointer)
        history = list(graph.get_state_history({"configurable": {"thread_id": "t1"}}))
        ctx = StepContext("t1", store.ledger, model)
        for snapshot in history:  # fork from every checkpoint, including ones at attempts 0..3
            if snapshot.next:
                graph.invoke(None, snapshot.config, context=ctx, durability="sync")
    assert len(model.requests) == 4
    assert backend.ledger_row("t1") == (4, 4, 4)


def test_update_state_cannot_lower_the_ledger(backend) -> None:
    model = NeverFinishes()
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db],
            model_factory=factory(model))
    run_cli(["--thread", "t1", "--once", "--db", backend.db], model_factory=factory(model))
    with open_store(backend.db, create=False) as store:
        graph = build_graph(store.checkpointer)
        config = {"configurable": {"thread_id": "t1"}}
        ctx = StepContext("t1", store.ledger, model)
        for _ in range(6):
            # Pretend the count is back at 0, as a hand-made update_state could.
            graph.update_state(config, {"progress": {"attempts": 0, "status": "ready"}},
                               as_node="tools")
            graph.invoke(None, config, context=ctx, durability="sync")
    assert len(model.requests) == 4
    assert backend.ledger_row("t1") == (4, 4, 4)


def test_update_state_leaving_a_call_unanswered_is_refused_before_any_claim(backend) -> None:
    model = NeverFinishes()
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db],
            model_factory=factory(model))
    with open_store(backend.db, create=False) as store:
        graph = build_graph(store.checkpointer)
        config = {"configurable": {"thread_id": "t1"}}
        # Skip the tools node: the next request would carry a call without its result.
        graph.update_state(config, {"progress": {"status": "ready"}}, as_node="budget")
        with pytest.raises(UnsafeHistoryError):
            graph.invoke(None, config, context=StepContext("t1", store.ledger, model),
                         durability="sync")
    assert len(model.requests) == 1 and backend.ledger_row("t1") == (1, 1, 4)


def test_a_call_left_unanswered_gets_a_not_executed_result_before_counting(backend) -> None:
    model = ScriptedModel([tool_call_reply("c1"), answer_reply("ok")])
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db],
            model_factory=factory(model))
    with open_store(backend.db, create=False) as store:
        graph = build_graph(store.checkpointer)
        config = {"configurable": {"thread_id": "t1"}}
        graph.update_state(config, {"progress": {"status": "ready"}}, as_node="tools")
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db], model_factory=factory(model))
    assert (out["status"], out["attempts"]) == ("done", 2)
    sent = model.requests[1]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[-1]["tool_call_id"] == "c1" and "NOT EXECUTED" in sent[-1]["content"]


@pytest.mark.sql_only(
    "SQL triggers refuse an UPDATE lowering the ledger; Redis has no write path but its scripts: "
    "tests/store/test_ledger.py::test_no_operation_lowers_a_count_or_changes_a_maximum[redis]")
def test_ledger_rows_refuse_to_decrease(backend) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    for sql in (
        "UPDATE attempt_ledger SET attempts = 0, claimed = 0",
        "UPDATE attempt_ledger SET claimed = 0",
        "UPDATE attempt_ledger SET max_attempts = 9",
    ):
        with pytest.raises(Exception, match="never decreases"):
            backend.execute(sql)
    assert backend.ledger_row("t1") == (1, 1, 4)


def test_settings_repr_never_shows_the_key() -> None:
    assert "sk-secret-000000" not in repr(Settings(db="x", live=True, api_key="sk-secret-000000"))


def _keep_only_input_checkpoint(backend, keep_input_writes: bool) -> None:
    """Leaves the database as a kill just after LangGraph saved the thread's input."""
    with open_store(backend.db, create=False) as store:
        history = list(build_graph(store.checkpointer).get_state_history(
            {"configurable": {"thread_id": "t1"}}))
    first = history[-1].config["configurable"]["checkpoint_id"]
    writes = "writes" if backend.name == "sqlite" else "checkpoint_writes"
    backend.execute("DELETE FROM checkpoints WHERE thread_id = 't1' AND checkpoint_id > ?",
                    (first,))
    op = ">" if keep_input_writes else ">="
    backend.execute(f"DELETE FROM {writes} WHERE thread_id = 't1' AND checkpoint_id {op} ?",
                    (first,))


@pytest.mark.sql_only(
    "stages the kill by deleting SQL checkpoint rows; Redis: "
    "tests/store/redis/test_saver.py::test_a_put_killed_after_its_digest_leaves_the_thread_resumable")
@pytest.mark.parametrize("input_saved", [True, False])
def test_thread_killed_right_after_its_input_checkpoint_resumes(backend, input_saved) -> None:
    """LangGraph saves the input checkpoint, then the input as its pending writes."""
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    _keep_only_input_checkpoint(backend, keep_input_writes=input_saved)
    backend.execute("DELETE FROM attempt_log")
    backend.execute("DELETE FROM attempt_ledger")
    backend.execute("INSERT INTO attempt_ledger VALUES ('t1', 0, 0, 4, '2026-01-01T00:00:00+00:00', "
                    "'2026-01-01T00:00:00+00:00')")
    if input_saved:
        out = run_cli(["--thread", "t1", "--task", "Other task", "--once", "--db", backend.db])
        assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    if not input_saved:  # the thread was never created: nothing to resume, --task creates it
        assert (out["exit_code"], out["error_code"]) == (4, "no_such_thread")
        out = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("ready", 1), out
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("done", 2)
