"""A Redis writer paused past its lease changes nothing when it wakes, and exits 5 `busy`.

Issue 28's first failure: a step paused past the lease (SIGSTOP, a long GC pause) woke after
another writer had taken the thread over, wrote its attempt-log row and its checkpoint, and
exited 0; the log read attempts `[1, 1, 3, 2]` and every later run and `history` exited 4.

Here a real `graph.run` child (`tests.crash_child`, lease `LEASE_MS`) stops itself
(SIGSTOP) at one write point of a step (`HOLD_POINTS`: before and after the claim, the log
row, the checkpoint, the writes, the outcome). Once its lease has run out, a second writer
(default lease) takes the thread over and completes a step; then the first is continued
(SIGCONT). Each case checks (INVARIANTS I1, I8): the resumed writer exits 5 `busy`, never 0
or 4 later; nothing it did after losing the lease is stored (the database is as the second
writer left it); the thread verifies clean and runs on; its attempts equal the requests the
fake server received. Also a stale `done` over a thread cancelled meanwhile.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.verify import main as verify_main
from tests.conftest import subprocess_env
from tests.crash_child import HOLD_POINTS, LEASE_ENV, child_main
from tests.fake_mandapi import FakeMandApi
from tests.forked import forkserver

pytestmark = pytest.mark.slow

LEASE_MS = 1000
"""The paused writer's lease: it runs out soon after the stop. Long enough that a loaded host
does not starve the renewal while the step imports its tools (a run that lost its lease
before the hold point would end `busy` on its own); the second writer keeps the default."""
_TRIES = 5
"""Runs that may lose their lease on their own before the hold point, on a host so loaded
that the renewal starves (each ends `busy`, changing nothing: the promise under test)."""
_WAIT_S = 60.0
"""Upper bound on any wait (seconds); a failsafe, never an expectation."""


def _until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + _WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _stopped(pid: int) -> bool:
    """True once process `pid` is stopped (state `T` in /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("T", "t")
    except OSError:  # it ended (gone, or a zombie being reaped)
        return False


class _Writers:
    """`graph.run --once --json` children on one thread, against one fake server."""

    def __init__(self, ctx: Any, fake: FakeMandApi, backend: Any, tmp_path: Path) -> None:
        self.ctx, self.fake, self.backend, self.tmp_path = ctx, fake, backend, tmp_path
        self.env = subprocess_env(MANDAPI_API_KEY="sk-pause-test-012", MANDAPI_MODEL_ID="mandapi-pause",
                                  MANDAPI_BASE_URL=fake.base_url)
        self.runs = 0
        self.thread_id = f"p-{uuid.uuid4().hex[:10]}"
        self.tag = f"[{self.thread_id}]"

    def argv(self, *extra: str) -> list[str]:
        return ["--thread", self.thread_id, "--task", f"{self.tag} How long does shipping "
                "take at the demo shop?", "--db", self.backend.db, "--live", "--once", "--json",
                *extra]

    def start(self, hold_at: str | None, *extra: str) -> tuple[Any, Path]:
        self.runs += 1
        out = self.tmp_path / f"out-{self.runs}.txt"
        env = {**self.env, LEASE_ENV: str(LEASE_MS)} if hold_at else self.env
        proc = self.ctx.Process(target=child_main, args=(self.argv(*extra), hold_at, env,
                                                         str(self.tmp_path), str(out)))
        proc.start()
        return proc, out

    def finish(self, proc: Any, out: Path) -> dict[str, Any]:
        proc.join(_WAIT_S)
        assert proc.exitcode is not None, f"child hung: {out.read_text()[-4000:]}"
        lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
        assert len(lines) == 1, (proc.exitcode, out.read_text())
        outcome: dict[str, Any] = json.loads(lines[0])
        assert outcome["exit_code"] == proc.exitcode, outcome
        return outcome

    def run(self, *extra: str) -> dict[str, Any]:
        return self.finish(*self.start(None, *extra))

    def stored(self) -> bytes:
        """Every key and value but the writer locks (what a writer's data is)."""
        lock = b"mandapi-resume:lock:"
        return b"\n".join(line for line in self.backend.dump().split(b"\n")
                          if not line.startswith(lock))


@pytest.fixture(scope="module")
def ctx() -> Any:
    return forkserver()


@pytest.fixture
def writers(ctx: Any, redis_url: str, tmp_path: Path) -> Iterator[_Writers]:
    from tests.redis_adapter import RedisBackend

    backend = RedisBackend(redis_url)
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        yield _Writers(ctx, fake, backend, tmp_path)
    backend.close()


def _pause_then_take_over(writers: _Writers, hold_at: str, *takeover: str,
                          then: Callable[[], Any] | None = None
                          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The thread's next step, stopped at `hold_at`; another writer's step once its lease ran
    out (and `then`); then the stopped one continued. Returns both outcomes, the stale one's checked to
    have stored nothing."""
    for _ in range(_TRIES):
        paused, out = writers.start(hold_at)
        _until(lambda p=paused: _stopped(p.pid) or p.exitcode is not None, f"a stop at {hold_at}")
        if paused.exitcode is None:
            break
        lost = writers.finish(paused, out)  # its lease ran out before the point: busy, unharmed
        assert lost["error_code"] == "busy" and "lost it" in lost["error"], (lost, out.read_text())
        _until(lambda: writers.backend.lock_gone(writers.thread_id), "the lost lease to end")
    else:
        raise AssertionError(f"never reached {hold_at} in {_TRIES} runs")
    _until(lambda: writers.backend.lock_gone(writers.thread_id), "the paused lease to run out")
    second = writers.run(*takeover)
    if then is not None:
        then()
    after_takeover = writers.stored()
    os.kill(paused.pid, signal.SIGCONT)
    stale = writers.finish(paused, out)
    assert writers.stored() == after_takeover  # nothing the stale writer did is stored
    return second, stale


def _clean(writers: _Writers) -> None:
    """The thread verifies clean, runs on, and counts exactly the requests sent."""
    assert verify_main(["--db", writers.backend.db]) == 0
    again = writers.run()
    assert again["exit_code"] in (0, 3), again
    attempts = writers.backend.ledger_row(writers.thread_id)[0]
    assert attempts == writers.fake.count_for(writers.tag)


@pytest.mark.parametrize("hold_at", HOLD_POINTS)
def test_a_writer_paused_past_its_lease_exits_busy_and_stores_nothing(
        writers: _Writers, hold_at: str) -> None:
    first = writers.run()  # a tool call; the held step runs the tool, then asks again
    assert first["exit_code"] == 0 and first["status"] == "ready", first
    second, stale = _pause_then_take_over(writers, hold_at)
    assert second["exit_code"] == 0, second
    assert stale["exit_code"] == 5 and stale["error_code"] == "busy", stale
    _clean(writers)


def test_a_paused_writer_never_finishes_a_thread_cancelled_meanwhile(
        writers: _Writers) -> None:
    """The stale writer holds its answer (a `done`), not yet stored, when the thread is
    cancelled. (Held later, its answer may be stored already as the reason node's pending
    writes, made while it held the lease, which the cancellation's `update_state` applies.)"""
    assert writers.run()["exit_code"] == 0
    cancelled, stale = _pause_then_take_over(writers, "hold:before_log", "--cancel")
    assert cancelled["exit_code"] == 0 and cancelled["status"] == "cancelled", cancelled
    assert stale["exit_code"] == 5 and stale["error_code"] == "busy", stale
    assert verify_main(["--db", writers.backend.db]) == 0
    assert writers.run()["status"] == "cancelled"
    attempts = writers.backend.ledger_row(writers.thread_id)[0]
    assert attempts == writers.fake.count_for(writers.tag)


def test_a_paused_writer_leaves_no_key_behind_a_prune_of_its_thread(writers: _Writers) -> None:
    """The thread is finished by the other writer and pruned before the stale one wakes."""
    assert writers.run()["exit_code"] == 0

    def prune() -> None:
        out = writers.tmp_path / "prune.txt"
        argv = ["--db", writers.backend.db, "--completed", "0s", "--failed", "0s", "--json"]
        proc = writers.ctx.Process(target=child_main, args=(argv, None, writers.env,
                                                            str(writers.tmp_path), str(out),
                                                            "graph.prune"))
        proc.start()
        proc.join(_WAIT_S)
        assert proc.exitcode == 0, out.read_text()
        assert writers.thread_id in json.loads(out.read_text().splitlines()[-1])["pruned"], \
            out.read_text()

    finished, stale = _pause_then_take_over(writers, "hold:before_log", then=prune)
    assert finished["status"] == "done", finished
    assert stale["exit_code"] == 5 and stale["error_code"] == "busy", stale
    assert verify_main(["--db", writers.backend.db]) == 0
    assert writers.run()["error_code"] == "pruned"  # gone, never restarted
