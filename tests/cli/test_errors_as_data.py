"""Errors are data: codes from the enum, where they happened as fields, one shape everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

TASK = "How long does shipping take at the demo shop?"


def test_no_error_code_is_a_bare_string_in_the_source() -> None:
    literal = re.compile(r"""error_code\s*(?::\s*str\s*)?=\s*["']""")
    found = [f"{path.name}:{number}" for path in sorted(ROOT.glob("graph/**/*.py"))
             for number, line in enumerate(path.read_text().splitlines(), start=1)
             if literal.search(line)]
    assert found == []


def test_an_error_carries_where_it_happened_and_is_formatted_once() -> None:
    from graph.errors import ErrorCode, ExitCode, RefusedError

    error = RefusedError("the ledger is short", error_code=ErrorCode.DAMAGED, thread_id="t1")
    assert error.at(location="db.sqlite", thread_id="other", checkpoint_id="c9") is error
    assert (error.location, error.thread_id, error.checkpoint_id) == ("db.sqlite", "t1", "c9")
    assert error.message == str(error) == "db.sqlite: thread 't1': checkpoint c9: the ledger is short"
    assert error.exit_code == ExitCode.REFUSED == ErrorCode.DAMAGED.exit_code
    assert error.fields() == {"error": error.message, "error_code": "damaged", "exit_code": 4}


def test_a_batch_that_fails_reports_the_shared_error_fields(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from graph.batch import main as batch_main
    from graph.run import main as run_main

    db = str(tmp_path / "db.sqlite")
    assert run_main(["--thread", "t1", "--task", TASK, "--once", "--db", db]) == 0
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(line) + "\n" for line in (
        {"thread_id": "t1", "task": "another task"}, {"thread_id": "t2", "task": TASK})))
    capsys.readouterr()
    assert batch_main([str(tasks), "--db", db, "--once", "--json"]) == 4
    summary = json.loads(capsys.readouterr().out)
    assert (summary["error_code"], summary["exit_code"]) == ("identity_mismatch", 4)
    assert "t1" in summary["error"] and "task" in summary["error"]
    tasks.write_text(json.dumps({"thread_id": "t2", "task": TASK}) + "\n")
    assert batch_main([str(tasks), "--db", db, "--once", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["error"], summary["error_code"], summary["exit_code"]) == (None, None, 0)
