"""Many workers through procrastinate on PostgreSQL: every thread done, nothing double-counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PYTHON, PostgresBackend, postgres_admin_url, subprocess_env
from tests.fake_mandapi import FakeMandApi

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
THREADS, WORKERS = 60, 3


def test_three_queue_workers_share_sixty_threads_and_survive_a_killed_worker(tmp_path: Path) -> None:
    from graph.queue import recover_stalled
    from graph.storage import open_store
    from graph.thread_history import list_threads

    pg = PostgresBackend(postgres_admin_url())
    workers: list[subprocess.Popen] = []
    try:
        with FakeMandApi(tmp_path / "requests.jsonl", hold_s=0.05) as fake:
            env = subprocess_env(GRAPH_DB=pg.db, MANDAPI_API_KEY="sk-queue", MANDAPI_MODEL_ID="m",
                                 MANDAPI_BASE_URL=fake.base_url, GRAPH_QUEUE_HEARTBEAT_S="0.5",
                                 GRAPH_QUEUE_STALLED_S="2")
            tasks = tmp_path / "tasks.jsonl"
            tasks.write_text("".join(json.dumps({"thread_id": f"q{i}", "task": f"[q{i}] shipping?"})
                                     + "\n" for i in range(THREADS)))
            enqueue = subprocess.run([PYTHON, "-m", "graph.batch", str(tasks), "--enqueue",
                                      "--live"], env=env, capture_output=True, text=True, timeout=60)
            assert enqueue.returncode == 0, enqueue.stderr
            command = [os.path.join(os.path.dirname(sys.executable), "procrastinate"),
                       "--app=graph.queue.app", "worker"]
            for n in range(WORKERS):
                workers.append(subprocess.Popen([*command, f"--name=w{n}"], env=env, cwd=tmp_path,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 60
            while len(fake.requests()) < THREADS // 2:
                assert time.monotonic() < deadline, "workers made no progress"
                time.sleep(0.05)
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait(10)
            deadline = time.monotonic() + 120
            while True:
                with open_store(pg.db, create=False, read_only=True) as store:
                    statuses = {t["thread_id"]: t["status"] for t in list_threads(store)}
                if len(statuses) == THREADS and set(statuses.values()) <= {"done"}:
                    break
                assert time.monotonic() < deadline, statuses
                recover_stalled(pg.db, seconds=2)  # what the periodic job does each minute
                time.sleep(0.5)
            requests = fake.requests()
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
                worker.wait(10)
    try:
        for i in range(THREADS):
            sent = [r for r in requests if f"[q{i}]" in r["body"]["messages"][1]["content"]]
            attempts, claimed, maximum = pg.ledger_row(f"q{i}")
            assert len(sent) <= claimed <= attempts <= maximum == 4, (i, len(sent), claimed)
            # One writer at a time: a thread's requests never overlap (each is held 0.05 s).
            times = sorted(r["at"] for r in sent)
            assert all(b - a >= 0.045 for a, b in zip(times, times[1:], strict=False)), (i, times)
        # Requests received == attempts counted, except at most one per thread for a step
        # the killed worker had claimed but not yet sent.
        lost = sum(pg.ledger_row(f"q{i}")[1] for i in range(THREADS)) - len(requests)
        assert 0 <= lost <= 1
    finally:
        pg.drop()
