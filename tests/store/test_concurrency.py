"""One writer per thread across real processes; many threads share one database (I8).

The `graph.run` tests run on SQLite, PostgreSQL and Redis, each `python -m graph.run` a real
process forked from a preloaded forkserver (`tests/forked.py`), so a run costs no
interpreter start. Where the backends differ, the test says so: a SQL lock dies with its
process, so after `kill -9` of the holder the thread resumes at once; a Redis writer lease
outlives a killed holder until it runs out (`graph.store.redis.locks`, deliberate), so the
thread stays busy.

The lease tests at the end are Redis only, because only Redis has leases: real processes
(`tests.redis_child`, forked from the same forkserver) on one thread of the session's server
show that the ledger's scripts are atomic, that one writer holds the lease, that a killed
holder's lease is taken over after it runs out and not before, and that a holder paused
past its lease (SIGSTOP, SIGCONT) can never count or claim.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from graph.errors import BusyError
from nodes.context import LedgerEntry
from tests.conftest import subprocess_env
from tests.fake_mandapi import FakeMandApi
from tests.forked import ForkedProcess, forkserver

pytestmark = pytest.mark.slow

TASK = "How long does shipping take at the demo shop?"
_WAIT_S = 60.0
"""Upper bound on any wait for a process or a key (seconds); never an expectation."""


@pytest.fixture(scope="module")
def server() -> Any:
    return forkserver()


def start(server: Any, argv: list[str], env: dict[str, str], cwd: Path) -> ForkedProcess:
    """`python -m graph.run ARGV --json`, forked from the preloaded forkserver."""
    return ForkedProcess(server, "graph.run", [*argv, "--json"], env, cwd)


def outcome(proc: Any) -> dict:
    """The one JSON line a process printed, with its stderr as `_stderr`."""
    out, err = proc.communicate(timeout=120)
    lines = out.strip().splitlines()
    assert len(lines) == 1, (out, err)
    return {**json.loads(lines[0]), "_stderr": err}


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_eight_processes_on_one_thread_send_one_request_and_seven_exit_busy(
    backend, tmp_path: Path, server: Any
) -> None:
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        env = subprocess_env(MANDAPI_API_KEY="sk-test-00000000", MANDAPI_MODEL_ID="mandapi-x",
                             MANDAPI_BASE_URL=fake.base_url)
        argv = ["--thread", "shared", "--task", TASK, "--db", backend.db, "--live", "--once"]
        # Create the thread first, so all eight race on an existing thread.
        assert outcome(start(server, argv, env, tmp_path))["attempts"] == 1
        fake.hold("shipping")
        procs = [start(server, argv, env, tmp_path) for _ in range(8)]
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
        after = outcome(start(server, argv, env, tmp_path))
        if backend.name == "redis":
            # The killed holder's lease is still running: busy, nothing counted or sent.
            assert (after["exit_code"], after["error_code"]) == (5, "busy")
            assert len(fake.requests()) == 2 and backend.ledger_row("shared") == (2, 2, 4)
        else:
            # The lock died with its holder: the thread resumes with a new counted attempt.
            assert after["exit_code"] == 0 and after["attempts"] == 3
            assert len(fake.requests()) == 3 and backend.ledger_row("shared") == (3, 3, 4)


def test_eight_processes_on_eight_threads_share_one_database(
    backend, tmp_path: Path, server: Any
) -> None:
    """The database starts empty (a new SQLite file, a new PostgreSQL database, a flushed
    Redis one without its search indexes): eight concurrent set-ups too."""
    env = subprocess_env()
    procs = [start(server, ["--thread", f"p{i}", "--task", f"{TASK} ({i})", "--db", backend.db],
                   env, tmp_path) for i in range(8)]
    results = [outcome(p) for p in procs]
    assert [(r["status"], r["attempts"], r["exit_code"]) for r in results] == [("done", 2, 0)] * 8, [
        (r.get("error_code"), r.get("error"), r["_stderr"][-300:]) for r in results if r["exit_code"]]
    assert not any("locked" in r["_stderr"] for r in results)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_mid_request_stops_cleanly_and_keeps_the_count(
    backend, tmp_path: Path, sig: signal.Signals, server: Any
) -> None:
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        env = subprocess_env(MANDAPI_API_KEY="sk-test-00000000", MANDAPI_MODEL_ID="mandapi-x",
                             MANDAPI_BASE_URL=fake.base_url)
        argv = ["--thread", "t1", "--task", TASK, "--db", backend.db, "--live", "--once"]
        fake.hold("shipping")
        proc = start(server, argv, env, tmp_path)
        wait_for(lambda: len(fake.requests()) == 1)
        proc.send_signal(sig)
        result = outcome(proc)
        fake.release()
        assert (proc.returncode, result["error_code"]) == (130, "interrupted")
        assert backend.ledger_row("t1") == (1, 1, 4)
        # The lock was released: the next call is not busy and counts a new attempt.
        nxt = outcome(start(server, argv, env, tmp_path))
        assert nxt["exit_code"] == 0 and nxt["attempts"] == 2
        assert len(fake.requests()) == 2


# ---- Redis writer leases (Redis only: SQL locks have no lease, they die with the process) --
# (`client` and `ledger`: tests/store/conftest.py)

class _Child:
    """A `tests.redis_child` process forked from the preloaded forkserver: its events arrive
    on a pipe, and a go for a paused one is sent there."""

    def __init__(self, ctx: Any, *argv: str) -> None:
        from tests import redis_child

        self._conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=redis_child.forked, args=(list(argv), theirs))
        self.proc.start()
        theirs.close()
        self.pid = int(self.proc.pid)

    def next_event(self) -> dict[str, Any]:
        """The child's next event (waits for it)."""
        assert self._conn.poll(_WAIT_S), "the child sent nothing"
        event: dict[str, Any] = self._conn.recv()
        return event

    def go(self) -> None:
        """Lets a paused child go on."""
        self._conn.send("go")

    def poll(self) -> int | None:
        """The exit code, or None while the child runs."""
        return self.proc.exitcode

    def wait(self) -> int:
        self.proc.join(_WAIT_S)
        assert self.proc.exitcode is not None, "the child hung"
        return int(self.proc.exitcode)

    def events(self) -> list[dict[str, Any]]:
        """Waits for the child to end; every event it sent that was not read yet."""
        self.wait()
        found = []
        while self._conn.poll(0):
            try:
                found.append(self._conn.recv())
            except EOFError:
                break
        return found

    def end(self) -> None:
        """Ends the child however it stands (stopped, running or gone) and closes the pipe."""
        if self.proc.exitcode is None:
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGKILL)
        self.proc.join(_WAIT_S)
        self._conn.close()


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + _WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _release_together(client: Any, start: str, racers: int) -> None:
    """Waits until every racer blocks on list `start`, then lets them all go at once."""
    _until(lambda: int(client.info("clients")["blocked_clients"]) >= racers, "the racers to block")
    client.rpush(start, *["go"] * racers)


def test_eight_racing_processes_count_and_claim_exactly_the_maximum_on_redis(
        client: Any, ledger: Any, redis_url: str, server: Any) -> None:
    thread_id, start = f"t-{uuid.uuid4().hex}", f"start-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    racers = [_Child(server, "race", redis_url, thread_id, start) for _ in range(8)]
    _release_together(client, start, 8)
    claims = []
    for racer in racers:
        claims += [event["claimed"] for event in racer.events() if "claimed" in event]
        assert racer.poll() == 0
    assert sorted(claims) == [1, 2, 3, 4]
    assert ledger.read(thread_id) == LedgerEntry(4, 4, 4)


def test_eight_processes_on_one_redis_thread_one_holds_its_lease_the_others_exit_busy(
        client: Any, ledger: Any, redis_url: str, server: Any) -> None:
    thread_id = f"t-{uuid.uuid4().hex}"
    start, done = f"start-{uuid.uuid4().hex}", f"done-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    children = [_Child(server, "hold", redis_url, thread_id, "5000", start, done)
                for _ in range(8)]
    _release_together(client, start, 8)
    _until(lambda: sum(c.poll() is not None for c in children) >= 7, "seven to give up")
    client.rpush(done, "done")  # only now may the holder let go
    results = [(c.wait(), c.events()) for c in children]
    assert sorted(code for code, _ in results) == [0] + [5] * 7
    assert [e for code, events in results if code == 0 for e in events] == [{"claimed": 1}]
    assert all(events == [{"error": "busy"}] for code, events in results if code == 5)
    assert ledger.read(thread_id) == LedgerEntry(1, 1, 4)


@pytest.mark.parametrize("taken_over", [True, False], ids=["taken-over", "lease-expired"])
@pytest.mark.parametrize("operation", ["claim", "count"])
def test_a_redis_holder_paused_past_its_lease_can_never_count_or_claim(
        client: Any, ledger: Any, redis_url: str, operation: str, taken_over: bool,
        server: Any) -> None:
    from graph.store.redis.keys import lock_key
    from graph.store.redis.locks import RedisThreadLocks

    thread_id = f"t-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    paused = _Child(server, "pause", redis_url, thread_id, "1000", operation)
    try:
        assert paused.next_event() == {"ready": 1}
        os.kill(paused.pid, signal.SIGSTOP)
        _until(lambda: not client.exists(lock_key(thread_id)), "the paused holder's lease to run out")
        locks = RedisThreadLocks(client, redis_url, lease_ms=30_000)
        with locks.hold(thread_id) if taken_over else _nothing():
            os.kill(paused.pid, signal.SIGCONT)
            paused.go()
            assert paused.events() == [{"error": "busy"}]
            assert paused.poll() == 5
            assert ledger.read(thread_id) == LedgerEntry(1, 0, 4)  # counted once, never claimed
    finally:
        paused.end()


class _nothing:  # noqa: N801 - reads as a context manager at its one use
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_the_new_redis_holder_uses_the_paused_holders_counted_attempt_once(
        ledger: Any, client: Any, redis_url: str, server: Any) -> None:
    from graph.store.redis.keys import lock_key
    from graph.store.redis.ledger import RedisLedger
    from graph.store.redis.locks import RedisThreadLocks

    thread_id = f"t-{uuid.uuid4().hex}"
    ledger.create(thread_id, 4)
    paused = _Child(server, "pause", redis_url, thread_id, "1000", "claim")
    try:
        assert paused.next_event() == {"ready": 1}
        os.kill(paused.pid, signal.SIGSTOP)
        _until(lambda: not client.exists(lock_key(thread_id)), "the paused holder's lease to run out")
        locks = RedisThreadLocks(client, redis_url, lease_ms=30_000)
        fenced = RedisLedger(client, redis_url, tokens=locks.token)
        with locks.hold(thread_id):
            assert fenced.count(thread_id) == LedgerEntry(1, 0, 4)  # reused, not counted again
            assert fenced.claim(thread_id, 1) is True
            os.kill(paused.pid, signal.SIGCONT)
            paused.go()
            assert paused.events() == [{"error": "busy"}]
        assert ledger.read(thread_id) == LedgerEntry(1, 1, 4)
    finally:
        paused.end()


def test_a_killed_redis_holders_lease_is_taken_over_after_it_runs_out_and_not_before(
        client: Any, redis_url: str, server: Any) -> None:
    from graph.store.redis.keys import lock_key
    from graph.store.redis.locks import RedisThreadLocks

    thread_id, lease_ms = f"t-{uuid.uuid4().hex}", 4000
    holder = _Child(server, "keep", redis_url, thread_id, str(lease_ms))
    locks = RedisThreadLocks(client, redis_url, lease_ms=30_000)
    try:
        assert holder.next_event() == {"ready": True}
        # A live holder renews its lease past its length: wait until the lease it had when
        # it said ready would have run out (the server's PTTL then), then it must still hold.
        first_expiry = time.monotonic() + client.pttl(lock_key(thread_id)) / 1000
        _until(lambda: time.monotonic() > first_expiry + 0.25, "the holder's first lease to end")
        assert client.pttl(lock_key(thread_id)) > 0, "the live holder's lease ran out"
        with pytest.raises(BusyError), locks.hold(thread_id):
            pass
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait() == -signal.SIGKILL
        with pytest.raises(BusyError), locks.hold(thread_id):
            pass  # killed, but its lease has not run out yet
        assert client.pttl(lock_key(thread_id)) > 0
        _until(lambda: not client.exists(lock_key(thread_id)), "the killed holder's lease to run out")
        with locks.hold(thread_id):
            assert locks.token(thread_id) is not None
            assert not locks.held_elsewhere(thread_id)
        assert not client.exists(lock_key(thread_id))  # released at the end of the block
    finally:
        holder.end()
