"""SIGKILL at any point never leads to an uncounted request (INVARIANTS I1, I2, I7).

Real processes, real kills, on SQLite and PostgreSQL, against a loopback fake MandAPI
server that fsyncs each request to its log before answering.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from graph.factory import build_graph
from graph.storage import open_store
from graph.verify import verify
from tests.conftest import SqliteBackend, subprocess_env
from tests.crash_child import KILL_POINTS, NODE_WRITES_KILL_POINTS, PRELOAD, child_main
from tests.fake_mandapi import FakeMandApi

pytestmark = pytest.mark.slow

KILL_THREADS = 36
"""Threads per backend; each goes through several kill/resume cycles (>= 100 kills)."""
SCHEDULE = (*KILL_POINTS, *NODE_WRITES_KILL_POINTS, "during_request", "random", None)


@pytest.fixture(scope="session")
def forkserver() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False



def _kill(pid: int) -> None:
    """SIGKILLs `pid`, unless it already ended on its own (the forkserver reaps it at once)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)

class Runner:
    """Starts `graph.run` children and kills them as scheduled."""

    ok_exits: tuple[int, ...] = (0, 3, 6)
    """Exit codes of a run that was not killed: no crash, no refusal."""

    def __init__(self, ctx: Any, fake: FakeMandApi, backend: Any, tmp_path: Path) -> None:
        self.ctx, self.fake, self.backend, self.tmp_path = ctx, fake, backend, tmp_path
        self.env = subprocess_env(MANDAPI_API_KEY="sk-kill-test", MANDAPI_MODEL_ID="mandapi-kill",
                                  MANDAPI_BASE_URL=fake.base_url)
        self.runs = 0

    def run(self, tag: str, argv: list[str], kill_at: str | None, rng: random.Random
            ) -> tuple[bool, dict[str, Any] | None]:
        """Returns (killed, JSON outcome of a run that finished)."""
        self.runs += 1
        out = self.tmp_path / f"out-{self.runs}.txt"
        before = len(self.fake.requests_for(tag))
        if kill_at == "during_request":
            self.fake.hold(tag)
        proc = self.ctx.Process(target=child_main,
                                args=(argv, kill_at, self.env, str(self.tmp_path), str(out)))
        proc.start()
        try:
            if kill_at == "during_request":
                wait_for(lambda: len(self.fake.requests_for(tag)) > before
                         or proc.exitcode is not None)
                if proc.exitcode is None:
                    _kill(proc.pid)
            elif kill_at == "random":
                time.sleep(rng.uniform(0.0, 0.12))
                if proc.exitcode is None:
                    _kill(proc.pid)
            proc.join(120)
        finally:
            self.fake.release()
        assert proc.exitcode is not None, f"child hung ({kill_at}): {out.read_text()[-6000:]}"
        if proc.exitcode == -signal.SIGKILL:
            return True, None
        lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
        assert len(lines) == 1, out.read_text()
        outcome = json.loads(lines[0])
        assert outcome["exit_code"] in self.ok_exits, (kill_at, outcome)  # no crash, no refusal
        return False, outcome

    def check(self, tag: str, thread_id: str) -> tuple[int, int, int] | None:
        received = len(self.fake.requests_for(tag))
        row = self.backend.ledger_row(thread_id)
        if row is None:
            assert received == 0
        else:
            attempts, claimed, maximum = row
            assert received <= claimed <= attempts <= maximum == 4, (thread_id, received, row)
        return row


def never_restarted(db: str, thread_ids: list[str]) -> None:
    """Never silently restarted: along each thread's history, oldest first, the
    conversation only grows and the mirrored attempt count never goes down; its task
    still starts with `[thread_id]`."""
    with open_store(db, create=False) as store:
        graph = build_graph(store.checkpointer)
        for thread_id in thread_ids:
            config = {"configurable": {"thread_id": thread_id}}
            states = [h.values for h in reversed(list(graph.get_state_history(config)))
                      if h.values.get("thread")]
            lengths = [len(v["messages"]) for v in states]
            attempts = [v["progress"]["attempts"] for v in states]
            assert lengths == sorted(lengths) and attempts == sorted(attempts), thread_id
            assert states[-1]["thread"]["task"].startswith(f"[{thread_id}]")


@pytest.mark.sql_only(
    "this loop's timing assumes SQL locks die with their process; a killed holder's Redis lease "
    "keeps the thread busy until it runs out (graph.redis_locks, deliberate). Redis: "
    "tests/test_redis_crash.py::test_sigkill_at_any_point_on_redis_never_sends_an_uncounted_request")
def test_sigkill_at_any_point_never_sends_an_uncounted_request(
    backend, tmp_path: Path, forkserver
) -> None:
    rng = random.Random(20261129)
    kills: Counter[str] = Counter()
    finals: dict[str, str] = {}
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        runner = Runner(forkserver, fake, backend, tmp_path)
        for i in range(KILL_THREADS):
            thread_id, tag = f"k{i}", f"[k{i}]"
            task = f"{tag} How long does shipping take at the demo shop?"
            # Like a scheduler: the same --task on every call, --once, --live.
            argv = ["--thread", thread_id, "--task", task, "--db", backend.db, "--live",
                    "--once", "--json"]
            for round_ in range(40):
                kill_at = SCHEDULE[(i + round_) % len(SCHEDULE)]
                if round_ >= 20:
                    kill_at = None
                killed, outcome = runner.run(tag, argv, kill_at, rng)
                runner.check(tag, thread_id)
                if killed:
                    kills[kill_at or "none"] += 1
                elif outcome["status"] in ("done", "exhausted"):
                    finals[thread_id] = outcome["status"]
                    break
            assert thread_id in finals, f"{thread_id} never finished"
    total = sum(kills.values())
    assert total >= 100, kills
    assert set(kills) >= {*KILL_POINTS, "during_request", "random"}, kills
    # Kills right after a node's writes depend on LangGraph's write timing; some always land.
    assert set(kills) & set(NODE_WRITES_KILL_POINTS), kills
    assert set(finals.values()) <= {"done", "exhausted"}
    never_restarted(backend.db, [f"k{i}" for i in range(KILL_THREADS)])
    assert b"sk-kill-test" not in backend.dump()
    # Every checkpoint and pending write reads back matching its digest, whatever was killed.
    assert verify(backend.db) == []
    print(f"\n{backend.name}: {total} kills {dict(kills)}, {runner.runs} runs, "
          f"finals {Counter(finals.values())}")


class _ClosingSqliteBackend(SqliteBackend):
    """Closes its reading connection at once: an open one would still see a deleted `-wal`."""

    def ledger_row(self, thread_id: str) -> tuple[int, int, int] | None:
        with closing(self._conn()) as conn:
            return conn.execute("SELECT attempts, claimed, max_attempts FROM attempt_ledger "
                                "WHERE thread_id = ?", (thread_id,)).fetchone()


WAL_THREADS = 8
"""Threads in the kill-then-damage variant; each is killed and damaged several times."""
WAL_KILLS = ("during_request", "after_claim", "after_answer", "after_writes:budget",
             "after_writes:tools", "random")


def test_sigkill_then_lost_or_damaged_wal_never_sends_an_uncounted_request(
    tmp_path: Path, forkserver
) -> None:
    """Kill, then delete, truncate or flip bytes of the `-wal`, then resume (SQLite only)."""
    from tests.wal_damage import DAMAGE

    backend = _ClosingSqliteBackend(tmp_path / "c.sqlite")
    wal = tmp_path / "c.sqlite-wal"
    damages = list(DAMAGE.items())
    rng = random.Random(20261130)
    done: Counter[str] = Counter()
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        runner = Runner(forkserver, fake, backend, tmp_path)
        for i in range(WAL_THREADS):
            thread_id, tag = f"w{i}", f"[w{i}]"
            argv = ["--thread", thread_id, "--task", f"{tag} How long does shipping take at "
                    "the demo shop?", "--db", backend.db, "--live", "--once", "--json"]
            for round_ in range(12):
                kill_at = WAL_KILLS[(i + round_) % len(WAL_KILLS)] if round_ < 6 else None
                killed, outcome = runner.run(tag, argv, kill_at, rng)
                if killed:
                    name, damage = damages[(i * 6 + round_) % len(damages)]
                    if wal.exists():
                        damage(wal)
                    done[name] += 1
                runner.check(tag, thread_id)  # received <= claimed <= attempts, always
                if outcome is not None and outcome["status"] in ("done", "exhausted"):
                    break
            assert runner.check(tag, thread_id) is not None
    assert len(done) == len(DAMAGE), done
