"""One writer per thread on Redis across real processes (I8): eight processes on one thread send
one request and seven exit busy; a killed holder's lease outlives it, so the thread stays busy
until the lease runs out, and no attempt is ever sent uncounted."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from tests.conftest import subprocess_env
from tests.fake_mandapi import FakeMandApi
from tests.test_concurrency import TASK, outcome, start, wait_for

pytestmark = pytest.mark.slow


def _ledger(url: str, thread_id: str) -> tuple[int, int, int]:
    from graph.redis_conn import connect
    from graph.redis_ledger import RedisLedger

    client = connect(url)
    try:
        entry = RedisLedger(client, url).read(thread_id)
    finally:
        client.close()
    assert entry is not None
    return entry.attempts, entry.claimed, entry.max_attempts


def test_eight_processes_on_one_redis_thread_send_one_request_and_seven_exit_busy(
        redis_url: str, tmp_path: Path) -> None:
    thread_id = f"c-{uuid.uuid4().hex[:10]}"
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        env = subprocess_env(MANDAPI_API_KEY="sk-test", MANDAPI_MODEL_ID="mandapi-x",
                             MANDAPI_BASE_URL=fake.base_url)
        argv = ["--thread", thread_id, "--task", TASK, "--db", redis_url, "--live", "--once"]
        assert outcome(start(argv, env, tmp_path))["attempts"] == 1
        fake.hold("shipping")
        procs = [start(argv, env, tmp_path) for _ in range(8)]
        wait_for(lambda: sum(p.poll() is not None for p in procs) == 7)
        (holder,) = [p for p in procs if p.poll() is None]
        busy = [outcome(p) for p in procs if p is not holder]
        assert [(o["exit_code"], o["error_code"]) for o in busy] == [(5, "busy")] * 7
        wait_for(lambda: len(fake.requests()) == 2)
        assert _ledger(redis_url, thread_id) == (2, 2, 4)
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=30)
        fake.release()
        # The killed holder's lease is still running: busy, nothing counted or sent.
        after = outcome(start(argv, env, tmp_path))
        assert (after["exit_code"], after["error_code"]) == (5, "busy")
        assert len(fake.requests()) == 2 and _ledger(redis_url, thread_id) == (2, 2, 4)
