"""Batches and subtasks: validation first, finished threads reused, a shared cap that holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.batch import main as batch_main
from graph.store import open_store
from tests.conftest import SqliteBackend, subprocess_env
from tests.fakes import NeverFinishes
from tests.forked import ForkedProcess, forkserver

TASK = "How long does shipping take at the demo shop?"


def tasks_file(tmp_path: Path, lines: list[dict | str], name: str = "tasks.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                            for line in lines))
    return path


def test_invalid_lines_are_reported_by_number_before_anything_runs(backend, tmp_path, capsys):
    path = tasks_file(tmp_path, [{"thread_id": "ok", "task": TASK}, "not json",
                                 {"thread_id": "a b", "task": TASK}, {"thread_id": "x"},
                                 {"thread_id": "y", "task": TASK, "max_attempts": 0},
                                 {"thread_id": "ok", "task": TASK},
                                 {"thread_id": "z", "task": "t", "bad": 1}])
    assert batch_main([str(path), "--db", backend.db, "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    for number in (2, 3, 4, 5, 6, 7):
        assert f"line {number}:" in error
    assert "line 1:" not in error
    assert backend.ledger_row("ok") is None


def test_batch_runs_every_thread_and_a_rerun_sends_nothing(backend, tmp_path: Path) -> None:
    path = tasks_file(tmp_path, [{"thread_id": f"b{i}", "task": f"{TASK} ({i})"} for i in range(4)])
    out1, out2 = tmp_path / "r1.jsonl", tmp_path / "r2.jsonl"
    assert batch_main([str(path), "--db", backend.db, "--out", str(out1)]) == 0
    rows = [json.loads(line) for line in out1.read_text().splitlines()]
    assert [(r["thread_id"], r["status"], r["attempts"]) for r in rows] == [
        (f"b{i}", "done", 2) for i in range(4)]
    ledger = [backend.ledger_row(f"b{i}") for i in range(4)]
    assert batch_main([str(path), "--db", backend.db, "--out", str(out2)]) == 0
    assert out2.read_text() == out1.read_text()
    assert [backend.ledger_row(f"b{i}") for i in range(4)] == ledger


def test_max_requests_stops_the_batch_with_exit_8_and_is_never_reset(backend, tmp_path, capsys):
    path = tasks_file(tmp_path, [{"thread_id": f"c{i}", "task": TASK} for i in range(4)])
    assert batch_main([str(path), "--db", backend.db, "--max-requests", "3", "--json"]) == 8
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["cap_reached"] is True
    claimed = sum((backend.ledger_row(f"c{i}") or (0, 0, 0))[1] for i in range(4))
    assert claimed == 3
    assert batch_main([str(path), "--db", backend.db, "--max-requests", "3"]) == 8
    assert sum((backend.ledger_row(f"c{i}") or (0, 0, 0))[1] for i in range(4)) == 3
    with open_store(backend.db, create=False, read_only=True) as store:
        assert list(store.ledger.caps().values()) == [(3, 3)]  # full, never reset
    assert batch_main([str(path), "--db", backend.db, "--max-requests", "9", "--json"]) == 4


def test_subtasks_get_derived_ids_and_the_parent_lists_answers_in_order(backend, tmp_path, capsys):
    path = tasks_file(tmp_path, [{"task": "How long does shipping take?"},
                                 {"task": "How do I return an item?"}], "sub.jsonl")
    assert batch_main([str(path), "--db", backend.db, "--parent", "P", "--json"]) == 0
    parent = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["parent"]
    assert parent["status"] == "done"
    assert [s["thread_id"] for s in parent["subtasks"]] == ["P:sub_0", "P:sub_1"]
    assert "[ship-01]" in parent["answers"][0] and "[ret-01]" in parent["answers"][1]
    before = (backend.ledger_row("P:sub_0"), backend.ledger_row("P:sub_1"))
    assert batch_main([str(path), "--db", backend.db, "--parent", "P"]) == 0
    assert (backend.ledger_row("P:sub_0"), backend.ledger_row("P:sub_1")) == before


def test_parent_wide_cap_is_charged_for_every_subtask_request(backend, tmp_path) -> None:
    from graph.fleet.batch import run_batch
    from graph.fleet.tasks_file import read_tasks
    from graph.settings import resolve_settings
    from graph.store import open_store

    path = tasks_file(tmp_path, [{"task": TASK}] * 3, "sub.jsonl")
    model = NeverFinishes()
    with open_store(backend.db, create=True) as store:
        report = run_batch(store, read_tasks(path, "Q"), resolve_settings(
            db=backend.db, live=False, timeout_s=None), once=False, cap_id="parent:Q",
            max_requests=5, model_factory=lambda m, s: model)
    assert report.cap_reached and len(model.requests) == 5
    assert int(report.exit_code) == 8


@pytest.mark.slow
def test_max_requests_holds_exactly_under_concurrency(backend, tmp_path: Path) -> None:
    """Four batch processes (`python -m graph.batch` forked from a preloaded forkserver,
    `tests/forked.py`) share one cap."""
    path = tasks_file(tmp_path, [{"thread_id": f"k{i}", "task": f"{TASK} {i}"} for i in range(12)])
    env = subprocess_env()
    server = forkserver()
    procs = [ForkedProcess(server, "graph.batch", [str(path), "--db", backend.db,
                                                   "--max-requests", "7", "--batch-id", "shared"],
                           env, tmp_path)
             for _ in range(4)]
    for proc in procs:
        proc.communicate(timeout=120)
    claimed = sum((backend.ledger_row(f"k{i}") or (0, 0, 0))[1] for i in range(12))
    assert claimed == 7
    assert all(p.returncode in (0, 8) for p in procs)


def test_a_cap_filled_exactly_by_the_last_step_is_not_a_stop(backend, tmp_path) -> None:
    path = tasks_file(tmp_path, [{"thread_id": f"e{i}", "task": TASK} for i in range(2)])
    assert batch_main([str(path), "--db", backend.db, "--once", "--max-requests", "2"]) == 0
    assert batch_main([str(path), "--db", backend.db, "--once", "--max-requests", "2"]) == 8


def test_lines_that_could_only_fail_later_are_refused_up_front(backend, tmp_path, capsys) -> None:
    path = tasks_file(tmp_path, [{"thread_id": "a", "task": TASK},
                                 {"thread_id": "b", "task": TASK, "model": "paid-model"},
                                 {"thread_id": "c", "task": TASK, "workspace": str(tmp_path / "no")},
                                 {"thread_id": "d", "task": TASK, "max_attempts": 3_000_000_000}])
    assert batch_main([str(path), "--db", backend.db, "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert all(f"line {n}:" in error for n in (2, 3, 4))
    assert backend.ledger_row("a") is None


def test_a_thread_the_cap_stops_mid_run_is_reported_held(backend, tmp_path, capsys) -> None:
    path = tasks_file(tmp_path, [{"thread_id": "m1", "task": TASK}])
    out = tmp_path / "r.jsonl"
    assert batch_main([str(path), "--db", backend.db, "--max-requests", "1", "--out", str(out)]) == 8
    row = json.loads(out.read_text())
    assert (row["status"], row["error_code"], row["exit_code"]) == ("ready", "batch_cap", 8)
    assert backend.ledger_row("m1")[1] == 1


def test_every_plain_progress_line_has_the_same_shape_ok_or_its_error_code(sqlite_db, tmp_path,
                                                                            capsys) -> None:
    import re

    path = tasks_file(tmp_path, [{"thread_id": f"p{i}", "task": TASK} for i in range(3)])
    assert batch_main([str(path), "--db", str(sqlite_db), "--max-requests", "2", "--once"]) == 8
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert progress == ["[1/3] p0: ready (ok)", "[2/3] p1: ready (ok)", "[3/3] p2: error (batch_cap)"]
    assert all(re.fullmatch(r"\[\d+/\d+\] \S+: \S+ \(\S+\)", line) for line in progress)


def test_an_invocation_without_an_outcome_shows_status_error_with_its_code_and_exit_code(
        backend, tmp_path, capsys) -> None:
    """Issue 30: `error` was printed but documented nowhere; its code and exit code say why."""
    for thread_id in ("busy1", "other1"):
        assert batch_main([str(tasks_file(tmp_path, [{"thread_id": thread_id, "task": TASK}])),
                           "--db", backend.db, "--once"]) == 0
    before = {t: backend.ledger_row(t) for t in ("busy1", "other1")}
    path = tasks_file(tmp_path, [{"thread_id": "new1", "task": TASK},
                                 {"thread_id": "busy1", "task": TASK},
                                 {"thread_id": "other1", "task": TASK, "max_attempts": 5}])
    out = tmp_path / "r.jsonl"
    capsys.readouterr()
    with open_store(backend.db, create=False) as holder, holder.locks.hold("busy1"):
        code = batch_main([str(path), "--db", backend.db, "--once", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 4, "the first failure's exit code: identity_mismatch; busy leaves it alone"
    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert progress == ["[1/3] new1: ready (ok)", "[2/3] busy1: error (busy)",
                        "[3/3] other1: error (identity_mismatch)"]
    rows = {r["thread_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert [(rows[t]["status"], rows[t]["error_code"], rows[t]["exit_code"])
            for t in ("busy1", "other1")] == [(None, "busy", 5), (None, "identity_mismatch", 4)]
    summary = json.loads(captured.out)
    assert (summary["statuses"], summary["errors"]) == (
        {"ready": 1, "error": 2}, {"busy": 1, "identity_mismatch": 1})
    assert {t: backend.ledger_row(t) for t in ("busy1", "other1")} == before, "nothing changed"


def test_the_readme_documents_every_status_a_batch_prints_with_its_exit_code() -> None:
    from graph.fleet.batch import NO_STATUS
    from nodes.state import STATUSES
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("  | STATUS | meaning | the thread's `exit_code` |"):]
    table = table[:table.index("\n\n")]
    rows = {row.strip().split("|")[1].strip(): row for row in table.splitlines()[2:]}
    assert f"`{NO_STATUS}`" in rows, "the status of an invocation without an outcome"
    assert "5 for `busy`" in rows[f"`{NO_STATUS}`"] and "`status` null" in rows[f"`{NO_STATUS}`"]
    documented = ", ".join(name for name in rows if name != f"`{NO_STATUS}`")
    assert all(f"`{status}`" in documented for status in STATUSES), documented


def test_a_thread_stopped_by_a_model_error_makes_the_batch_exit_3(
        sqlite_db, tmp_path, capsys, monkeypatch) -> None:
    """Issue 30: a batch whose thread met `model_not_found` exited 0, so a scheduler never
    saw it; the stop needs a person (`--reopen`), unlike a thread that used its budget."""
    import httpx

    import graph.api._database
    from graph.step.models import make_model

    def not_found(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"message": "The model `mandapi-larg` does "
                                                              "not exist", "code": "model_not_found"}})

    monkeypatch.setattr(graph.api._database, "make_model", lambda model_id, settings: make_model(
        model_id, settings, transport=httpx.MockTransport(not_found)))
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-marker-4f09ab77d1")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")
    path = tasks_file(tmp_path, [{"thread_id": "m1", "task": TASK, "model": "mandapi-larg"}])
    for run in ("first", "rerun"):
        assert batch_main([str(path), "--db", str(sqlite_db), "--live", "--json"]) == 3, run
        out, err = capsys.readouterr()
        summary = json.loads(out)
        assert (summary["exit_code"], summary["statuses"]) == (3, {"exhausted": 1}), run
        assert "no rerun can fix this" in (summary["error"] or ""), (run, summary)
        assert "[1/1] m1: exhausted (" in err, run


def test_a_full_cap_is_not_raised_but_the_refusal_names_the_flag_that_starts_a_new_one(
        sqlite_db, tmp_path, capsys) -> None:
    """Issue 30: a user could not raise the batch's default cap (named by the tasks file)
    and was not told how to go on: a new cap named with --batch-id."""
    path = tasks_file(tmp_path, [{"thread_id": f"r{i}", "task": TASK} for i in range(3)])
    db = str(sqlite_db)
    assert batch_main([str(path), "--db", db, "--once", "--max-requests", "1"]) == 8
    before = [SqliteBackend(sqlite_db).ledger_row(f"r{i}") for i in range(3)]
    capsys.readouterr()
    assert batch_main([str(path), "--db", db, "--once", "--max-requests", "3"]) == 4
    err = capsys.readouterr().err
    assert "error (identity_mismatch): " in err and "'tasks.jsonl'" in err
    assert "--batch-id" in err, "says how to allow more requests"
    assert [SqliteBackend(sqlite_db).ledger_row(f"r{i}") for i in range(3)] == before
    assert batch_main([str(path), "--db", db, "--once", "--max-requests", "3",
                       "--batch-id", "tasks-2"]) == 0
