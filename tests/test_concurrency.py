"""One writer per thread across real processes; many threads share one database (I8)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import PYTHON, subprocess_env
from tests.fake_mandapi import FakeMandApi

pytestmark = pytest.mark.slow

TASK = "How long does shipping take at the demo shop?"


def start(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "graph.run", *argv, "--json"], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outcome(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    lines = out.strip().splitlines()
    assert len(lines) == 1, (out, err)
    return {**json.loads(lines[0]), "_stderr": err}


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.sql_only(
    "after kill -9 of the holder the thread resumes at once on SQL (the lock dies with the process); "
    "on Redis only once the holder's lease runs out (graph.redis_locks, deliberate): tests/test_redis"
    "_concurrency.py::test_eight_processes_on_one_redis_thread_send_one_request_and_seven_exit_busy, "
    "tests/test_redis_locks.py::test_a_killed_holders_lease_is_taken_over_after_it_runs_out_and_not_b"
    "efore")
def test_eight_processes_on_one_thread_send_one_request_and_seven_exit_busy(
    backend, tmp_path: Path
) -> None:
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        env = subprocess_env(MANDAPI_API_KEY="sk-test", MANDAPI_MODEL_ID="mandapi-x",
                             MANDAPI_BASE_URL=fake.base_url)
        argv = ["--thread", "shared", "--task", TASK, "--db", backend.db, "--live", "--once"]
        # Create the thread first, so all eight race on an existing thread.
        assert outcome(start(argv, env, tmp_path))["attempts"] == 1
        fake.hold("shipping")
        procs = [start(argv, env, tmp_path) for _ in range(8)]
        wait_for(lambda: sum(p.poll() is not None for p in procs) == 7)
        (holder,) = [p for p in procs if p.poll() is None]
        busy = [outcome(p) for p in procs if p is not holder]
        assert [(o["exit_code"], o["error_code"]) for o in busy] == [(5, "busy")] * 7
        assert all("shared" in o["error"] for o in busy)
        wait_for(lambda: len(fake.requests()) == 2)
        assert backend.ledger_row("shared") == (2, 2, 4)
        # kill -9 the holder while the server still holds its request.
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=30)
        assert holder.returncode == -signal.SIGKILL
        fake.release()
        # The lock died with its holder: the thread resumes with a new counted attempt.
        after = outcome(start(argv, env, tmp_path))
        assert after["exit_code"] == 0 and after["attempts"] == 3
        assert len(fake.requests()) == 3 and backend.ledger_row("shared") == (3, 3, 4)


def test_eight_processes_on_eight_threads_share_one_database(backend, tmp_path: Path) -> None:
    """On PostgreSQL the database starts empty: eight concurrent schema set-ups too."""
    env = subprocess_env()
    procs = [start(["--thread", f"p{i}", "--task", f"{TASK} ({i})", "--db", backend.db],
                   env, tmp_path) for i in range(8)]
    results = [outcome(p) for p in procs]
    assert [(r["status"], r["attempts"], r["exit_code"]) for r in results] == [("done", 2, 0)] * 8
    assert not any("locked" in r["_stderr"] for r in results)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_mid_request_stops_cleanly_and_keeps_the_count(
    backend, tmp_path: Path, sig: signal.Signals
) -> None:
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        env = subprocess_env(MANDAPI_API_KEY="sk-test", MANDAPI_MODEL_ID="mandapi-x",
                             MANDAPI_BASE_URL=fake.base_url)
        argv = ["--thread", "t1", "--task", TASK, "--db", backend.db, "--live", "--once"]
        fake.hold("shipping")
        proc = start(argv, env, tmp_path)
        wait_for(lambda: len(fake.requests()) == 1)
        proc.send_signal(sig)
        result = outcome(proc)
        fake.release()
        assert (proc.returncode, result["error_code"]) == (130, "interrupted")
        assert backend.ledger_row("t1") == (1, 1, 4)
        # The lock was released: the next call is not busy and counts a new attempt.
        nxt = outcome(start(argv, env, tmp_path))
        assert nxt["exit_code"] == 0 and nxt["attempts"] == 2
        assert len(fake.requests()) == 2
