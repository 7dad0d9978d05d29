"""The Studio graph (`graph.studio`) in process, on the server's kind of checkpointer.

`langgraph dev` copies the graph with its own checkpointer and passes each run's
context as a plain dict; these tests do the same with `InMemorySaver`, and check that
the ledger in the context's database still keeps the budget.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from graph.errors import ErrorCode, RefusedError, UsageError
from graph.studio import StudioContext, studio_graph
from tests.conftest import ROOT

TASK = "How long does shipping take at the demo shop?"
THREAD = "0193b7a0-5c1e-7000-8000-000000000001"


def served() -> Any:
    """The graph as the server holds it: its own checkpointer."""
    return studio_graph().copy(update={"checkpointer": InMemorySaver()})


def config(thread_id: str = THREAD) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def ledger(db: Path, thread_id: str = THREAD) -> tuple[int, int, int] | None:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT attempts, claimed, max_attempts FROM attempt_ledger "
                            "WHERE thread_id = ?", (thread_id,)).fetchone()


def test_the_context_and_input_are_plain_describable_fields() -> None:
    graph = studio_graph()
    assert set(graph.get_context_jsonschema()["properties"]) == {"db", "model_id", "live"}
    assert graph.get_input_jsonschema()["required"] == ["task"]
    assert "create --> budget" in graph.get_graph().draw_mermaid()


def test_each_run_sends_one_request_counted_in_the_ledger(tmp_path: Path) -> None:
    db, graph = tmp_path / "studio.sqlite", served()
    context = {"db": str(db)}
    graph.invoke({"task": TASK}, config(), context=context)
    assert ledger(db) == (1, 1, 4)
    assert graph.get_state(config()).next == ("tools",)  # stopped after reason
    graph.invoke(None, config(), context=context)
    state = graph.get_state(config())
    assert ledger(db) == (2, 2, 4)
    assert state.values["progress"]["status"] == "done"


def test_graph_db_names_the_ledger_when_the_context_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPH_DB", str(tmp_path / "env.sqlite"))
    served().invoke({"task": TASK}, config(), context={})
    assert ledger(tmp_path / "env.sqlite") == (1, 1, 4)


def test_a_second_claim_in_one_run_is_refused_before_sending(tmp_path: Path) -> None:
    """A run that overrode `interrupt_after` could reach reason twice; its context claims once."""
    db = tmp_path / "studio.sqlite"
    served().invoke({"task": TASK}, config(), context={"db": str(db)})
    context = StudioContext(db=str(db))
    assert context.ledger.count(THREAD).attempts == 2
    assert context.ledger.claim(THREAD, 2) is True
    assert context.ledger.count(THREAD).attempts == 3
    with pytest.raises(UsageError, match="one model request per run"):
        context.ledger.claim(THREAD, 3)
    assert ledger(db) == (3, 2, 4)  # the third attempt is counted, never sent
    assert StudioContext(db=str(db)).ledger.claim(THREAD, 3) is True  # the next run sends it


def test_a_fork_of_the_servers_checkpoints_stops_at_the_maximum(tmp_path: Path) -> None:
    db, graph = tmp_path / "studio.sqlite", served()
    context = {"db": str(db)}
    graph.invoke({"task": TASK, "max_attempts": 1}, config(), context=context)
    assert graph.get_state(config()).values["progress"]["status"] == "exhausted"
    first = [s for s in graph.get_state_history(config()) if s.next == ("budget",)][-1]
    graph.invoke(None, first.config, context=context)  # time travel to before the request
    graph.update_state(config(), {"progress": {"status": "ready"}}, as_node="budget")
    graph.invoke(None, config(), context=context)  # a hand-made state straight to reason
    assert ledger(db) == (1, 1, 1)  # nothing more was counted or sent


def test_a_thread_whose_ledger_row_is_gone_is_refused(tmp_path: Path) -> None:
    db, graph = tmp_path / "studio.sqlite", served()
    graph.invoke({"task": TASK}, config(), context={"db": str(db)})
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM attempt_ledger")
    with pytest.raises(RefusedError) as refused:
        graph.invoke(None, config(), context={"db": str(db)})
    assert refused.value.error_code == ErrorCode.DAMAGED
    assert ledger(db) is None


def test_a_new_thread_id_that_already_counts_attempts_is_not_restarted(tmp_path: Path) -> None:
    db = tmp_path / "studio.sqlite"
    served().invoke({"task": TASK}, config(), context={"db": str(db)})
    with pytest.raises(RefusedError) as refused:  # the server lost its checkpoints
        served().invoke({"task": TASK}, config(), context={"db": str(db)})
    assert refused.value.error_code == ErrorCode.DAMAGED
    assert ledger(db) == (1, 1, 4)


def test_a_resumed_thread_refuses_another_model(tmp_path: Path) -> None:
    db, graph = tmp_path / "studio.sqlite", served()
    graph.invoke({"task": TASK}, config(), context={"db": str(db)})
    with pytest.raises(RefusedError) as refused:
        graph.invoke(None, config(), context={"db": str(db), "model_id": "other-model"})
    assert refused.value.error_code == ErrorCode.IDENTITY_MISMATCH
    assert ledger(db) == (1, 1, 4)


@pytest.mark.parametrize("refusal", ["another task", "another model", "no ledger row"])
def test_the_studio_server_shows_a_refused_runs_reason_and_code(tmp_path: Path, refusal: str) -> None:
    """What `langgraph dev` sends Studio for a run's exception (langgraph-api's serde):
    its reason, never "An internal error occurred"; still a `RefusedError` in process."""
    from langgraph_api.serde import json_dumpb

    db, graph = tmp_path / "studio.sqlite", served()
    graph.invoke({"task": TASK}, config(), context={"db": str(db)})
    run_input: Any = {"task": "Another task?"} if refusal == "another task" else None
    context = {"db": str(db), **({"model_id": "other-model"} if refusal == "another model" else {})}
    if refusal == "no ledger row":
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM attempt_ledger")
    with pytest.raises(RefusedError) as refused:
        graph.invoke(run_input, config(), context=context)
    sent = json.loads(json_dumpb({"error": refused.value}))["error"]
    code = ErrorCode.DAMAGED if refusal == "no ledger row" else ErrorCode.IDENTITY_MISMATCH
    assert sent == {"error": "RefusedError",
                    "message": f"error ({code}): {refused.value.message}"}, sent
    assert refused.value.detail in sent["message"] and "internal error" not in sent["message"]


def test_a_run_with_input_on_a_finished_thread_counts_and_sends_nothing(tmp_path: Path) -> None:
    """Studio starts every run with input at `create`, then budget: a finished thread
    (here `done`) must end there, not count and send again."""
    db, graph = tmp_path / "studio.sqlite", served()
    graph.invoke({"task": TASK}, config(), context={"db": str(db)})
    graph.invoke(None, config(), context={"db": str(db)})
    assert ledger(db) == (2, 2, 4)
    graph.invoke({"task": TASK}, config(), context={"db": str(db)})
    assert graph.get_state(config()).values["progress"]["status"] == "done"
    assert ledger(db) == (2, 2, 4)


def test_a_thread_stopped_by_a_gateways_400_is_reopened_by_the_input_and_continues(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Studio's `--reopen` (issue 29): `{"task": ..., "reopen": true}` puts the thread back
    to `ready`, its attempts still counted, and the run makes the next step; no run
    without it reopens, and the flag is not kept for later runs."""
    from tests.step.test_finish_reasons import body
    from tests.step.test_reopen import Gateway

    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-studio-01")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")
    gateway = Gateway(400, body("3 days [ship-01].", "stop"))  # type: ignore[arg-type]
    monkeypatch.setattr("graph.step.models.make_model", gateway)
    db, graph = tmp_path / "studio.sqlite", served()
    context = {"db": str(db), "model_id": "mandapi-large", "live": True}
    graph.invoke({"task": TASK}, config(), context=context)
    progress = graph.get_state(config()).values["progress"]
    assert (progress["status"], progress["stop_reason"]) == ("exhausted", "invalid_request")
    for run_input in (None, {"task": TASK}):  # runs without the flag: it stays stopped
        graph.invoke(run_input, config(), context=context)
        assert graph.get_state(config()).values["progress"]["status"] == "exhausted"
    assert ledger(db) == (1, 1, 4) and len(gateway.requests) == 1
    graph.invoke({"task": TASK, "reopen": True}, config(), context=context)
    state = graph.get_state(config())
    assert (state.values["progress"]["status"], state.values["progress"]["answer"]) == (
        "done", "3 days [ship-01].")
    assert ledger(db) == (2, 2, 4) and len(gateway.requests) == 2, "attempts still counted"
    assert state.values.get("reopen") is None, "the flag is gone after the run that read it"
    with pytest.raises(UsageError, match="nothing to reopen") as refused:  # done: not a model error
        graph.invoke({"task": TASK, "reopen": True}, config(), context=context)
    assert "error (usage): " in str(refused.value) and ledger(db) == (2, 2, 4)


def test_an_approval_interrupt_is_resumed_with_decisions_and_applies_the_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.types import Command

    from tests.step.test_approvals import Writer

    out, model = tmp_path / "out", Writer()
    out.mkdir()
    (out / "log.txt").write_text("start\n")
    monkeypatch.setattr("graph.step.models.make_model", lambda model_id, settings: model)
    db, graph = tmp_path / "studio.sqlite", served()
    context = {"db": str(db)}
    graph.invoke({"task": "Write the report.", "allow_writes": str(out)}, config(),
                 context=context)
    graph.invoke(None, config(), context=context)  # tools pauses for review
    paused = graph.get_state(config())
    review = paused.tasks[0].interrupts[0].value
    assert [p["tool_call_id"] for p in review["pending"]] == ["w1", "w2"]
    graph.invoke(Command(resume={"approve": ["w1"]}), config(), context=context)
    again = graph.get_state(config()).tasks[0].interrupts[0].value  # asked again, and why
    assert "decide every paused call" in again["error"] and again["pending"] == review["pending"]
    assert not (out / "report.md").exists()
    graph.invoke(Command(resume={"approve": ["w1"], "reject": ["w2"], "reason": "no log"}),
                 config(), context=context)
    assert (out / "report.md").read_text().startswith("# Shipping")
    assert (out / "log.txt").read_text() == "start\n"
    results = {m["tool_call_id"]: m["content"] for m in graph.get_state(config()).values["messages"]
               if m["role"] == "tool"}
    assert results["w2"].startswith("REJECTED") and "ship-01" in results["r1"]
    # The resume run goes on to the next step: one more request, counted before it left.
    assert len(model.requests) == 2 and ledger(db) == (2, 2, 4)


def test_git_ignores_the_files_the_readmes_commands_leave_in_the_clone() -> None:
    """The README's `GRAPH_DB=studio.sqlite langgraph dev` leaves the database and, while it
    runs, its `-wal` and `-shm` beside it, and its Redis block a `redis-data/` folder: none
    of them belongs in a commit."""
    import subprocess

    names = ["studio.sqlite", "studio.sqlite-wal", "studio.sqlite-shm", "checkpoints.sqlite-wal",
             "redis-data/appendonlydir"]  # the README's Redis block keeps its files there
    done = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert sorted(done.stdout.split()) == sorted(names), done.stderr


def test_verify_on_studios_database_says_it_is_studios_ledger_not_damaged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: `graph.verify --db studio.sqlite` said `damaged` (exit 4) for every Studio
    thread, whose checkpoints are the server's: it names the database for what it is."""
    from graph.verify import main as verify_main

    db, graph = tmp_path / "studio.sqlite", served()
    for thread_id in (THREAD, THREAD[:-1] + "2"):
        graph.invoke({"task": TASK}, config(thread_id), context={"db": str(db)})
    before = db.read_bytes()
    assert verify_main(["--db", str(db), "--json"]) == 4
    out = json.loads(capsys.readouterr().out)
    assert (out["error_code"], out["exit_code"], out["threads"]) == ("studio_db", 4, 2)
    assert "Studio" in out["error"] and ".langgraph_api" in out["error"]
    assert "damaged" not in out["error"]
    assert verify_main(["--db", str(db)]) == 4
    err = capsys.readouterr().err
    assert err.startswith("error (studio_db): ") and "2 thread(s)" in err
    assert db.read_bytes() == before, "reads only"


def test_verify_on_a_database_with_studio_and_run_threads_lists_the_studio_ones_as_damaged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A thread whose checkpoints were deleted looks like a Studio thread: only a database of
    nothing else is named Studio's (README, Studio)."""
    from graph.verify import main as verify_main
    from tests.conftest import run_cli

    db = tmp_path / "studio.sqlite"
    served().invoke({"task": TASK}, config(), context={"db": str(db)})
    run_cli(["--thread", "own", "--task", TASK, "--db", str(db), "--once"])
    assert verify_main(["--db", str(db), "--json"]) == 4
    out = json.loads(capsys.readouterr().out)
    assert (out["error_code"], out["threads"]) == ("damaged", 2)
    assert out["problems"] == [f"{db}: thread {THREAD!r}: 1 counted attempt(s) in the ledger but "
                               "no checkpoint"]
