"""The public Python API (`graph.api`): the CLI's operations, typed errors, direct graph use."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

import graph.api as api
from graph.api import open_database
from graph.checkpoints.load import graph_of
from graph.errors import BusyError, ErrorCode, ExitCode, RefusedError, RunError, UsageError
from tests.conftest import ROOT, run_cli
from tests.fakes import ScriptedModel, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def scripted(model: ScriptedModel) -> Any:
    return lambda model_id, settings: model


def test_the_module_exports_what_it_documents() -> None:
    assert set(api.__all__) <= set(dir(api))
    assert {"open_database", "Database", "Outcome", "RunError"} <= set(api.__all__)


def test_run_gives_the_outcome_the_cli_prints(backend: Any) -> None:
    with open_database(backend.db, create=True) as db:
        first = db.run("t_api", task=TASK)
        second = db.run("t_api")
    cli = run_cli(["--thread", "t_cli", "--task", TASK, "--once", "--db", backend.db])
    assert (first.status, first.attempts, first.exit_code) == ("ready", 1, ExitCode.OK)
    assert json.loads(first.to_json()).keys() == {k for k in cli if k != "_next"}
    assert (second.status, second.attempts, second.answer is not None) == ("done", 2, True)
    assert backend.ledger_row("t_api") == (2, 2, 4)


def test_history_threads_prune_and_verify_read_like_the_commands(backend: Any) -> None:
    with open_database(backend.db, create=True) as db:
        outcome = db.run("t1", task=TASK, once=False)
        assert (outcome.status, outcome.attempts) == ("done", 2)
        history = db.history("t1")
        listed = db.threads()
        assert db.verify() == []
        would = db.prune(completed="0s", dry_run=True)
        report = db.prune(completed="0s")
    assert [s["outcome"] for s in history["steps"]] == ["tool_calls", "answer"]
    assert history["header"]["status"] == "done"
    assert [(t["thread_id"], t["status"]) for t in listed] == [("t1", "done")]
    assert [c["thread_id"] for c in would["would_prune"]] == ["t1"]
    assert report["pruned"] == ["t1"]


def test_refusals_raise_typed_errors_carrying_error_and_exit_codes(tmp_path: Path) -> None:
    with pytest.raises(RefusedError) as missing:
        with open_database(str(tmp_path / "absent.sqlite")):
            pass
    assert (missing.value.error_code, missing.value.exit_code) == (ErrorCode.NO_SUCH_FILE, 4)
    with open_database(str(tmp_path / "c.sqlite"), create=True) as db:
        with pytest.raises(RefusedError) as unknown:
            db.run("nobody")
        with pytest.raises(UsageError) as bad_id:
            db.run("no spaces allowed", task=TASK)
        with pytest.raises(UsageError) as paid:
            db.run("t2", task=TASK, model="mandapi-large")
    assert (unknown.value.error_code, unknown.value.exit_code) == (ErrorCode.NO_SUCH_THREAD, 4)
    assert (bad_id.value.error_code, bad_id.value.exit_code) == (ErrorCode.USAGE, ExitCode.USAGE)
    assert paid.value.exit_code == 2 and "live=True" in paid.value.message


@pytest.mark.parametrize("error", [RunError("x"), UsageError("x"), BusyError("x")])
def test_every_run_error_has_an_exit_code_attribute(error: RunError) -> None:
    assert error.exit_code == error.error_code.exit_code
    assert error.fields()["exit_code"] == int(error.exit_code)


def test_a_second_writer_is_refused_as_busy(tmp_path: Path) -> None:
    with open_database(str(tmp_path / "c.sqlite"), create=True) as db:
        db.run("t1", task=TASK)
        with db.invocation("t1"), open_database(str(tmp_path / "c.sqlite")) as other:
            with pytest.raises(BusyError) as busy:
                other.run("t1")
    assert busy.value.exit_code == ExitCode.BUSY


def test_cancel_and_decide_go_through_the_same_step(tmp_path: Path) -> None:
    with open_database(str(tmp_path / "c.sqlite"), create=True) as db:
        db.run("t1", task=TASK)
        with pytest.raises(UsageError):
            db.decide("t1", approve=["call_1"])
        cancelled = db.cancel("t1")
        again = db.run("t1")  # the thread's own state comes back as an outcome, as in the CLI
    assert (cancelled.status, cancelled.exit_code) == ("cancelled", ExitCode.OK)
    assert (again.exit_code, again.error_code) == (ExitCode.REFUSED, ErrorCode.CANCELLED)


def _counted_before_sending(backend: Any, sent: list[tuple[int, int]], reply: Any) -> Any:
    def answer(messages: list[dict[str, Any]]) -> Any:
        row = backend.ledger_row("t1")
        sent.append((row[0], row[1]))  # (attempts, claimed) committed when the request leaves
        return reply
    return answer


def test_a_fork_through_the_returned_graph_counts_before_sending_and_stops_at_the_maximum(
        backend: Any) -> None:
    sent: list[tuple[int, int]] = []
    model = ScriptedModel([_counted_before_sending(backend, sent, tool_call_reply("c1")),
                           _counted_before_sending(backend, sent, tool_call_reply("c2"))])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("t1", task=TASK, max_attempts=2)
        config = {"configurable": {"thread_id": "t1"}}
        start = next(s for s in db.graph.get_state_history(config) if s.next == ("budget",))
        for _ in range(2):  # the same fork twice: once within the budget, once past it
            with db.invocation("t1") as context:
                db.graph.invoke(None, start.config, context=context, durability="sync")
        fork = db.graph.get_state(config)
    assert sent == [(1, 1), (2, 2)]  # each request left after its own committed claim
    assert len(model.requests) == 2  # the second fork stopped at the maximum, unsent
    assert backend.ledger_row("t1") == (2, 2, 2)
    assert fork.values["progress"]["status"] == "exhausted"


def test_update_state_cannot_lower_the_count_the_ledger_guards(backend: Any) -> None:
    model = ScriptedModel([tool_call_reply("c1")])
    with open_database(backend.db, create=True, model_factory=scripted(model)) as db:
        db.run("t1", task=TASK, max_attempts=1)
        config = {"configurable": {"thread_id": "t1"}}
        assert db.graph.get_state(config).values["progress"]["status"] == "exhausted"
        # Revive the exhausted thread by hand and send it straight to reason.
        revived = {"progress": {"status": "ready", "attempts": 1},
                   "messages": [{"role": "tool", "tool_call_id": "c1", "content": "{}"}]}
        with pytest.raises(UsageError):  # the checked graph refuses progress edits outright
            db.graph.update_state(config, revived, as_node="budget")
        graph_of(db.store).update_state(config, revived, as_node="budget")  # LangGraph's own graph
        outcomes = []
        for _ in range(2):  # reason refuses the spent claim; budget then stops the thread
            with db.invocation("t1") as context:
                db.graph.invoke(None, config, context=context, durability="sync")
            progress = db.graph.get_state(config).values["progress"]
            outcomes.append((progress["status"], progress["outcome"]))
    assert len(model.requests) == 1  # the claim for attempt 1 was spent: nothing sent again
    assert backend.ledger_row("t1") == (1, 1, 1)
    assert outcomes == [("ready", "not_sent"), ("exhausted", None)]


def test_async_variants_run_the_same_calls_in_a_worker_thread(tmp_path: Path) -> None:
    async def main() -> tuple[Any, ...]:
        async with open_database(str(tmp_path / "c.sqlite"), create=True) as db:
            first = await db.arun("t1", task=TASK)
            second = await db.arun("t1")
            history = await db.ahistory("t1")
            threads = await db.athreads()
            problems = await db.averify()
            pruned = await db.aprune(completed="0s", dry_run=True)
            with pytest.raises(RefusedError):
                await db.acancel("nobody")
            return first, second, history, threads, problems, pruned

    first, second, history, threads, problems, pruned = asyncio.run(main())
    assert (first.attempts, second.status) == (1, "done")
    assert history["header"]["attempts"] == 2 and len(threads) == 1
    assert problems == [] and len(pruned["would_prune"]) == 1


def readme_block(marker: str) -> str:
    """The fenced code block right after `<!-- MARKER -->` in README.md."""
    text = (ROOT / "README.md").read_text()
    match = re.search(re.escape(f"<!-- {marker} -->") + r"\n```\w*\n(.*?)\n```", text, re.S)
    assert match, f"README.md lost its {marker} block"
    return match.group(1)


def test_the_readme_from_python_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    exec(compile(readme_block("test:from-python"), "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "done 2" in out and "budget" in out
