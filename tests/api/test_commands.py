"""The commands are thin layers over `graph.api`: what the API returns is what they print."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from graph.api import Candidate, RefusedError, open_database, verify_database
from graph.errors import ErrorCode, ExitCode
from graph.fleet.tasks_file import read_tasks
from graph.prune import main as prune_main
from graph.verify import main as verify_main

TASK = "How long does shipping take at the demo shop?"


def printed(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out)


def test_prune_report_is_typed_and_is_what_the_command_prints(
        backend: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with open_database(backend.db, create=True) as db:
        db.run("done_1", task=TASK, once=False)
        db.run("ready_1", task=TASK)
        would = db.prune_report(completed="0s", dry_run=True)
    assert prune_main(["--db", backend.db, "--completed", "0s", "--dry-run", "--json"]) == 0
    assert printed(capsys) == {**would.to_dict(), "exit_code": 0}
    assert [(c.thread_id, c.status) for c in would.candidates] == [("done_1", "done")]
    assert isinstance(would.candidates[0], Candidate) and would.pruned == []
    with open_database(backend.db) as db:
        report = db.prune_report(completed=timedelta(0))
    assert (report.dry_run, report.pruned, report.skipped) == (False, ["done_1"], [])
    assert list(report.to_dict()) == ["pruned", "skipped", "swept", "trimmed", "freed_bytes"]
    assert backend.ledger_row("done_1") is None and backend.ledger_row("ready_1") is not None


def test_verify_database_counts_what_the_command_reports(
        backend: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with open_database(backend.db, create=True) as db:
        db.run("a", task=TASK, once=False)
        db.run("b", task=TASK)
        problems = db.verify()
    report = verify_database(backend.db)
    assert verify_main(["--db", backend.db, "--json"]) == 0
    cli = printed(capsys)
    assert (report.ok, report.problems, problems) == (True, [], [])
    assert (report.threads, report.checkpoints) == (cli["threads"], cli["checkpoints"])
    assert report.threads == 2 and report.checkpoints >= 5


def test_verify_database_lists_damage_an_open_would_refuse(tmp_path: Path) -> None:
    path = tmp_path / "not_a_db.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + bytes(200))
    with pytest.raises(RefusedError) as refused:
        verify_database(str(path))
    assert refused.value.error_code == ErrorCode.DAMAGED


def test_copy_to_copies_whole_threads_and_refuses_existing_ones(tmp_path: Path) -> None:
    source, target = str(tmp_path / "src.sqlite"), str(tmp_path / "dst.sqlite")
    with open_database(source, create=True) as src:
        src.run("t1", task=TASK, once=False)
        src.run("t2", task=TASK)
        with open_database(target, create=True) as dst:
            copied = src.copy_to(dst, ["t2", "t1", "t2"])
            steps = dst.history("t1")["steps"]
            with pytest.raises(RefusedError) as again:
                src.copy_to(dst)
            with pytest.raises(RefusedError) as missing:
                src.copy_to(dst, ["nobody"])
            resumed = dst.run("t2")
        original = src.history("t1")["steps"]
    assert copied == ["t1", "t2"]
    assert steps == original
    assert again.value.error_code == ErrorCode.EXISTS
    assert missing.value.error_code == ErrorCode.NO_SUCH_THREAD
    assert (resumed.status, resumed.attempts) == ("done", 2)


def test_copy_to_with_an_empty_list_copies_nothing(tmp_path: Path) -> None:
    source, target = str(tmp_path / "src.sqlite"), str(tmp_path / "dst.sqlite")
    with open_database(source, create=True) as src:
        src.run("t1", task=TASK)
        with open_database(target, create=True) as dst:
            copied = src.copy_to(dst, [])
            listed = dst.threads()
    assert copied == []
    assert listed == []


def test_batch_runs_a_tasks_file_and_history_shows_the_parent(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task": TASK}) + "\n" + json.dumps({"task": TASK}) + "\n")
    with open_database(str(tmp_path / "b.sqlite"), create=True) as db:
        report = db.batch(read_tasks(tasks, "par", live=False), once=False, cap_id="parent:par",
                          max_requests=10)
        parent = db.history("par")
    assert report.exit_code == ExitCode.OK and not report.cap_reached
    assert [(o.thread_id, o.status) for o in report.outcomes] == [("par:sub_0", "done"),
                                                                   ("par:sub_1", "done")]
    assert set(parent) == {"parent_result"}
