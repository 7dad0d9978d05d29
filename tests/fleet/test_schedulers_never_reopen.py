"""Schedulers never reopen a thread by themselves (issue 29).

A stop by a model error (`invalid_request` after a gateway's 400 for a wrong key, ...)
is undone only by a person (`graph.run --reopen`, `Database.reopen`). A batch rerun and
a queue worker, the two things that advance threads without one, leave such a thread
as it is: stopped, its attempts unchanged, nothing sent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from graph.batch import main as batch_main
from tests.conftest import run_cli
from tests.fake_mandapi import FakeMandApi
from tests.step.test_finish_reasons import TASK, body
from tests.step.test_reopen import Gateway

pytest.importorskip("procrastinate")
DRAIN_BOUND_S = 30
"""How long the worker may run before the queue counts as never emptying (a bound, not a
timing: draining one job takes well under a second)."""


def _stopped_by_a_400(db: str) -> None:
    """Thread `t1` in `db`, stopped as `invalid_request` by a gateway's 400 on its first attempt."""
    gateway = Gateway(400, body("3 days [ship-01].", "stop"))  # type: ignore[arg-type]
    out = run_cli(["--thread", "t1", "--live", "--once", "--db", db, "--task", TASK,
                   "--model", "mandapi-large"], model_factory=gateway)
    assert (out["status"], out["stop_reason"], out["attempts"]) == ("exhausted", "invalid_request", 1)


def _state(db: str) -> tuple[str, str | None]:
    from graph.api import open_database

    with open_database(db, read_only=True) as opened:
        header = opened.history("t1")["header"]
    return header["status"], header["stop_reason"]


async def _drain(app: Any) -> None:
    """Runs a worker of `app` until the queue is empty; fails when it never empties.

    A worker that reopened the thread would queue its next step after every step.
    """
    async with app.open_async():
        try:
            await asyncio.wait_for(app.run_worker_async(wait=False, name="no-reopen",
                                                        install_signal_handlers=False),
                                   DRAIN_BOUND_S)
        except (TimeoutError, asyncio.CancelledError):  # procrastinate re-raises the cancel
            pytest.fail("the worker kept queueing steps of the stopped thread")


@pytest.mark.postgres
def test_a_batch_rerun_and_a_queue_worker_leave_a_thread_stopped_by_a_400_stopped(
        pg, tmp_path: Path, monkeypatch, capsys) -> None:
    """Through the real entry points: `graph.batch` (run, then `--enqueue`) and a
    procrastinate worker of `graph.queue.app` draining the queue (in process). A model
    that would answer is there all along: a reopened thread would reach `done`."""
    import psycopg

    from graph.fleet.jobs import make_app
    from graph.fleet.queue_logs import ADVANCE_TASK

    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-schedulers")
        monkeypatch.setenv("MANDAPI_BASE_URL", fake.base_url)
        monkeypatch.setenv("GRAPH_DB", pg.db)
        _stopped_by_a_400(pg.db)
        before = pg.ledger_row("t1")
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text(json.dumps({"thread_id": "t1", "task": TASK, "model": "mandapi-large"})
                         + "\n")

        batch_main([str(tasks), "--db", pg.db, "--live", "--json"])
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["statuses"] == {"exhausted": 1}, summary
        assert _state(pg.db) == ("exhausted", "invalid_request"), "the batch reopened it"

        assert batch_main([str(tasks), "--db", pg.db, "--live", "--enqueue"]) == 0
        asyncio.run(_drain(make_app(pg.db)))
        with psycopg.connect(pg.db) as conn:
            jobs = conn.execute("SELECT status::text FROM procrastinate_jobs WHERE task_name = %s",
                                (ADVANCE_TASK,)).fetchall()
        assert jobs == [("succeeded",)], "the worker took the thread's job and ended its chain"
        assert _state(pg.db) == ("exhausted", "invalid_request"), "the worker reopened it"
        assert fake.requests() == [], "nothing was sent"
    assert pg.ledger_row("t1") == before == (1, 1, 4)
