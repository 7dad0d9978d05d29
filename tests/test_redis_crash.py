"""SIGKILL at any point never leads to an uncounted request on Redis (INVARIANTS I1, I2, I7).

`tests.test_crash`'s runner and child on a private valkey server (AOF fsynced always):
real `graph.run --live` processes against the loopback fake MandAPI server, killed at
fixed points (`tests.crash_child`: before/after the count, after the claim, mid-`WAITAOF`,
after the answer, after a node's writes, mid-bury during a prune), at random instants and
while the server holds their request, then run again until the thread is done or
exhausted. The writer lease is shortened in the children (`crash_child.LEASE_ENV`), and
each run waits until a killed holder's lease has run out, as a scheduler's retry would.
"""

from __future__ import annotations

import json
import random
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph import redis_keys as keys
from graph.verify import verify
from tests.crash_child import KILL_POINTS, LEASE_ENV, NODE_WRITES_KILL_POINTS, child_main
from tests.fake_mandapi import FakeMandApi
from tests.redis_server import start_server
from tests.test_crash import Runner, forkserver, never_restarted, wait_for  # noqa: F401

pytestmark = pytest.mark.slow

KILL_THREADS = 14
"""Threads; each goes through several kill/resume cycles (>= 50 kills in all)."""
SCHEDULE = (*KILL_POINTS, "mid_waitaof", *NODE_WRITES_KILL_POINTS, "during_request", "random",
            None)
LEASE_MS = 1000
"""The children's writer lease: renewed every 333 ms, so a live holder keeps it, unless the
host starves its renewing thread past the lease (then the run ends `busy`, unharmed)."""
BURY_KILLS = 4
"""Prunes killed mid-bury, each after burying one more thread's keys."""


class RedisKillBackend:
    """A private server's database, read straight with a client of its own."""

    name = "redis"

    def __init__(self, url: str) -> None:
        import redis

        self.db = url
        self.client = redis.Redis.from_url(url)

    def ledger_row(self, thread_id: str) -> tuple[int, int, int] | None:
        """(attempts, claimed, max_attempts) from the thread's ledger hash (None if none)."""
        values = self.client.hmget(keys.ledger_key(thread_id), "attempts", "claimed",
                                   "max_attempts")
        if values == [None, None, None]:
            return None
        attempts, claimed, maximum = (int(v) for v in values)
        return attempts, claimed, maximum

    def dump(self) -> bytes:
        """Every key's DUMP, concatenated (for 'no secret stored' checks)."""
        return b"".join(self.client.dump(k) or b"" for k in sorted(self.client.scan_iter()))

    def lock_gone(self, thread_id: str) -> bool:
        return not self.client.exists(keys.lock_key(thread_id))


class RedisRunner(Runner):
    """`Runner`, waiting after a kill until the killed holder's lease has run out.

    A run may also end `busy` (exit 5) on its own: on a loaded host its lease ran out
    before the renewal (`graph.redis_locks`), and fencing then refused its next write,
    counting and sending nothing. That is the promise under test, not a failure; the
    loop runs the thread again.
    """

    ok_exits = (0, 3, 5, 6)

    def run(self, tag: str, argv: list[str], kill_at: str | None, rng: random.Random
            ) -> tuple[bool, dict[str, Any] | None]:
        killed, outcome = super().run(tag, argv, kill_at, rng)
        if outcome is not None and outcome["exit_code"] == 5:
            assert "lost it" in outcome["error"], outcome  # no other holder runs here
        if killed or outcome is not None and outcome["exit_code"] == 5:
            assert wait_for(lambda: self.backend.lock_gone(argv[1]))
        return killed, outcome

    def child(self, argv: list[str], kill_at: str | None, entry: str = "graph.run"
              ) -> dict[str, Any] | None:
        """Runs `entry` once, killed only at `kill_at`; its JSON outcome, None when killed."""
        self.runs += 1
        out = self.tmp_path / f"out-{self.runs}.txt"
        proc = self.ctx.Process(target=child_main, args=(argv, kill_at, self.env,
                                                         str(self.tmp_path), str(out), entry))
        proc.start()
        proc.join(120)
        assert proc.exitcode is not None, f"child hung ({kill_at}): {out.read_text()[-6000:]}"
        if proc.exitcode == -signal.SIGKILL:
            return None
        lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
        assert len(lines) == 1 and proc.exitcode != 1, out.read_text()
        outcome: dict[str, Any] = json.loads(lines[0])
        assert outcome["exit_code"] == proc.exitcode, outcome
        return outcome

    def prune(self, kill_at: str | None) -> bool:
        """Runs `graph.prune` of every finished thread; True when it was killed."""
        argv = ["--db", self.backend.db, "--completed", "0s", "--failed", "0s", "--json"]
        outcome = self.child(argv, kill_at, "graph.prune")
        assert outcome is None or outcome["exit_code"] == 0, outcome
        if outcome is None:  # the killed pruner held a thread's lease: wait until it runs out
            assert wait_for(lambda: not self.backend.client.keys(keys.pattern(keys.LOCK)))
        return outcome is None


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[RedisKillBackend]:
    server = start_server(tmp_path / "redis")
    try:
        yield RedisKillBackend(server.url)
    finally:
        server.stop()


def _argv(thread_id: str, tag: str, db: str) -> list[str]:
    return ["--thread", thread_id, "--task", f"{tag} How long does shipping take at the demo "
            "shop?", "--db", db, "--live", "--once", "--json"]


def test_sigkill_at_any_point_on_redis_never_sends_an_uncounted_request(
    backend: RedisKillBackend, tmp_path: Path, forkserver: Any  # noqa: F811 - the fixture
) -> None:
    rng = random.Random(20261201)
    kills: Counter[str] = Counter()
    finals: dict[str, str] = {}
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        runner = RedisRunner(forkserver, fake, backend, tmp_path)
        runner.env[LEASE_ENV] = str(LEASE_MS)
        for i in range(KILL_THREADS):
            thread_id = f"r{i}"
            argv = _argv(thread_id, f"[{thread_id}]", backend.db)
            for round_ in range(40):
                kill_at = SCHEDULE[(i + round_) % len(SCHEDULE)] if round_ < 20 else None
                killed, outcome = runner.run(f"[{thread_id}]", argv, kill_at, rng)
                runner.check(f"[{thread_id}]", thread_id)
                if killed:
                    kills[kill_at or "none"] += 1
                elif outcome is not None and outcome["status"] in ("done", "exhausted"):
                    finals[thread_id] = outcome["status"]
                    break
            assert thread_id in finals, f"{thread_id} never finished"
        ids = sorted(finals)
        never_restarted(backend.db, ids)
        assert verify(backend.db) == []
        received = {t: len(fake.requests_for(f"[{t}]")) for t in ids}
        for _ in range(BURY_KILLS):
            assert runner.prune("mid_bury")
            kills["mid_bury"] += 1
        assert not runner.prune(None)  # finishes the prune, sweeping what the kills left
        assert verify(backend.db) == []
        for thread_id in ids:  # each buried thread is refused as pruned, sending nothing
            outcome = runner.child(_argv(thread_id, f"[{thread_id}]", backend.db), None)
            assert outcome is not None and outcome["exit_code"] == 4, outcome
            assert outcome["error_code"] == "pruned", outcome
            assert len(fake.requests_for(f"[{thread_id}]")) == received[thread_id]
    total = sum(kills.values())
    assert total >= 50, kills
    assert set(kills) >= {*KILL_POINTS, "mid_waitaof", "during_request", "random",
                          "mid_bury"}, kills
    assert set(kills) & set(NODE_WRITES_KILL_POINTS), kills
    assert b"sk-kill-test" not in backend.dump()
    print(f"\nredis: {total} kills {dict(kills)}, {runner.runs} runs, "
          f"finals {Counter(finals.values())}; {json.dumps(received)}")
