"""A queue worker and `graph.batch` report a full request cap alike: `batch_cap`, exit 8.

A worker logged a thread whose counted attempt a full cap held back as `ready`, exit 0,
where the batch said `batch_cap`, exit 8 (issue 30). Both now go through
`graph.fleet.request_cap.held_by_full_cap`; here a worker's step (`run_step`, the job's
body, in process) and a batch over the same database are read side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.batch import main as batch_main
from graph.fleet.request_cap import open_cap
from graph.fleet.worker import RESULT_KEYS, run_step
from graph.store import open_store
from tests.conftest import PostgresBackend

TASK = "How long does shipping take at the demo shop?"


@pytest.mark.postgres
def test_a_worker_reports_a_full_cap_as_batch_cap_exit_8_as_the_batch_does(
        pg: PostgresBackend, tmp_path: Path, capsys) -> None:
    with open_store(pg.db, create=True) as store:
        open_cap(store, "cap1", 1)
    first = run_step(pg.db, "w1", {"task": TASK}, False, "cap1")
    assert (first.result["status"], first.result["exit_code"]) == ("ready", 0), first
    held = run_step(pg.db, "w1", {"task": TASK}, False, "cap1")
    assert held.result == {"thread_id": "w1", "status": "ready", "attempts": 2, "max_attempts": 4,
                           "exit_code": 8, "error_code": "batch_cap"}, held
    assert held.again_s is None, "a full cap ends the thread's job chain"
    assert set(held.result) == set(RESULT_KEYS)

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"thread_id": "w1", "task": TASK}) + "\n")
    out = tmp_path / "results.jsonl"
    capsys.readouterr()
    assert batch_main([str(tasks), "--db", pg.db, "--once", "--batch-id", "cap1", "--json",
                       "--out", str(out)]) == 8
    summary = json.loads(capsys.readouterr().out)
    assert (summary["cap_reached"], summary["error_code"]) == (True, "batch_cap"), summary
    by_batch = json.loads(out.read_text())
    assert {k: by_batch[k] for k in RESULT_KEYS} == held.result
