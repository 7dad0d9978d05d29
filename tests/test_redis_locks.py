"""Real processes on one thread of a real Redis server: the ledger's scripts are atomic, one
writer holds the lease, a killed holder's lease is taken over after it runs out and not
before, and a holder paused past its lease (SIGSTOP, SIGCONT) can never count or claim."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from typing import Any

import pytest

from graph.errors import BusyError
from nodes.context import LedgerEntry
from tests.conftest import PYTHON, subprocess_env

pytestmark = pytest.mark.slow
_WAIT_S = 60.0
"""Upper bound on any wait for a process or a key (seconds); never an expectation."""


@pytest.fixture
def client(redis_client: Any) -> Any:
    return redis_client


@pytest.fixture
def ledger(client: Any, redis_url: str) -> Any:
    from graph.redis_ledger import RedisLedger

    return RedisLedger(client, redis_url)


def _child(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([PYTHON, "-m", "tests.redis_child", *args], env=subprocess_env(),
                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, text=True)


def _events(process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, _ = process.communicate(timeout=_WAIT_S)
    return [json.loads(line) for line in out.splitlines()]


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + _WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _release_together(client: Any, start: str, racers: int) -> None:
    """Waits until every racer blocks on list `start`, then lets them all go at once."""
    _until(lambda: int(client.info("clients")["blocked_clients"]) >= racers, "the racers to block")
    client.rpush(start, *["go"] * racers)


def test_eight_racing_processes_count_and_claim_exactly_the_maximum(client: Any, ledger: Any,
                                                                    redis_url: str) -> None:
    thread_id, start = f"t-{uuid.uuid4().hex}", f"start-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    racers = [_child("race", redis_url, thread_id, start) for _ in range(8)]
    _release_together(client, start, 8)
    claims = []
    for racer in racers:
        claims += [event["claimed"] for event in _events(racer) if "claimed" in event]
        assert racer.returncode == 0
    assert sorted(claims) == [1, 2, 3, 4]
    assert ledger.read(thread_id) == LedgerEntry(4, 4, 4)


def test_eight_processes_on_one_thread_one_holds_it_the_others_exit_busy(client: Any, ledger: Any,
                                                                         redis_url: str) -> None:
    thread_id = f"t-{uuid.uuid4().hex}"
    start, done = f"start-{uuid.uuid4().hex}", f"done-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    children = [_child("hold", redis_url, thread_id, "5000", start, done) for _ in range(8)]
    _release_together(client, start, 8)
    _until(lambda: sum(c.poll() is not None for c in children) >= 7, "seven to give up")
    client.rpush(done, "done")  # only now may the holder let go
    results = [(c.wait(timeout=_WAIT_S), _events(c)) for c in children]
    assert sorted(code for code, _ in results) == [0] + [5] * 7
    assert [e for code, events in results if code == 0 for e in events] == [{"claimed": 1}]
    assert all(events == [{"error": "busy"}] for code, events in results if code == 5)
    assert ledger.read(thread_id) == LedgerEntry(1, 1, 4)


@pytest.mark.parametrize("taken_over", [True, False], ids=["taken-over", "lease-expired"])
@pytest.mark.parametrize("operation", ["claim", "count"])
def test_a_holder_paused_past_its_lease_can_never_count_or_claim(
        client: Any, ledger: Any, redis_url: str, operation: str, taken_over: bool) -> None:
    from graph.redis_keys import lock_key
    from graph.redis_locks import RedisThreadLocks

    thread_id = f"t-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    paused = _child("pause", redis_url, thread_id, "1000", operation, stdin=True)
    assert paused.stdout is not None and paused.stdin is not None
    assert json.loads(paused.stdout.readline()) == {"ready": 1}
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        _until(lambda: not client.exists(lock_key(thread_id)), "the paused holder's lease to run out")
        locks = RedisThreadLocks(client, redis_url, lease_ms=30_000)
        with locks.hold(thread_id) if taken_over else _nothing():
            os.kill(paused.pid, signal.SIGCONT)
            paused.stdin.write("go\n")
            paused.stdin.flush()
            assert _events(paused) == [{"error": "busy"}]
            assert paused.returncode == 5
            assert ledger.read(thread_id) == LedgerEntry(1, 0, 4)  # counted once, never claimed
    finally:
        _end(paused)


def _end(process: subprocess.Popen[str]) -> None:
    """Ends a child however it stands (stopped, running or gone) and closes its pipes."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
    process.communicate()


class _nothing:  # noqa: N801 - reads as a context manager at its one use
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_the_new_holder_uses_the_paused_holders_counted_attempt_once(ledger: Any, client: Any,
                                                                     redis_url: str) -> None:
    from graph.redis_keys import lock_key
    from graph.redis_ledger import RedisLedger
    from graph.redis_locks import RedisThreadLocks

    thread_id = f"t-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    paused = _child("pause", redis_url, thread_id, "1000", "claim", stdin=True)
    assert paused.stdout is not None and paused.stdin is not None
    assert json.loads(paused.stdout.readline()) == {"ready": 1}
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        _until(lambda: not client.exists(lock_key(thread_id)), "the paused holder's lease to run out")
        locks = RedisThreadLocks(client, redis_url, lease_ms=30_000)
        fenced = RedisLedger(client, redis_url, tokens=locks.token)
        with locks.hold(thread_id):
            assert fenced.count(thread_id) == LedgerEntry(1, 0, 4)  # reused, not counted again
            assert fenced.claim(thread_id, 1) is True
            os.kill(paused.pid, signal.SIGCONT)
            paused.stdin.write("go\n")
            paused.stdin.flush()
            assert _events(paused) == [{"error": "busy"}]
        assert ledger.read(thread_id) == LedgerEntry(1, 1, 4)
    finally:
        _end(paused)


def test_a_killed_holders_lease_is_taken_over_after_it_runs_out_and_not_before(
        client: Any, redis_url: str) -> None:
    from graph.redis_keys import lock_key
    from graph.redis_locks import RedisThreadLocks

    thread_id, lease_ms = f"t-{uuid.uuid4().hex}", 4000
    holder = _child("keep", redis_url, thread_id, str(lease_ms))
    assert holder.stdout is not None
    assert json.loads(holder.stdout.readline()) == {"ready": True}
    locks = RedisThreadLocks(client, redis_url, lease_ms=30_000)
    try:
        # A live holder renews its lease past its length: wait until the lease it had when
        # it said ready would have run out (the server's PTTL then), then it must still hold.
        first_expiry = time.monotonic() + client.pttl(lock_key(thread_id)) / 1000
        _until(lambda: time.monotonic() > first_expiry + 0.25, "the holder's first lease to end")
        assert client.pttl(lock_key(thread_id)) > 0, "the live holder's lease ran out"
        with pytest.raises(BusyError), locks.hold(thread_id):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        with pytest.raises(BusyError), locks.hold(thread_id):
            pass  # killed, but its lease has not run out yet
        assert client.pttl(lock_key(thread_id)) > 0
        _until(lambda: not client.exists(lock_key(thread_id)), "the killed holder's lease to run out")
        with locks.hold(thread_id):
            assert locks.token(thread_id) is not None
            assert not locks.held_elsewhere(thread_id)
        assert not client.exists(lock_key(thread_id))  # released at the end of the block
    finally:
        _end(holder)
