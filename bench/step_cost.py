"""In-process cost of one step (one graph invocation), beside LangGraph with lighter settings.

  python -m bench.step_cost [--steps N]

Same three-node graph and offline scripted model (state growing ~2 KB per step):
ours (`graph.step.advance`: SQLite with sync durability, ledger, attempt log, lock,
load-time checks) vs the same compiled graph on `InMemorySaver` vs LangGraph's
`SqliteSaver` with its default `"async"` durability and no ledger, and a JSON-file
step. Also counts SQLite commits per step (trace callback) for ours and bare LangGraph,
and measures the claim checkpoint (`graph.sqlite_ledger`) by alternating steps with and
without it on two databases in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import ToolLoopModel, ms, table
from tests.memory_ledger import MemoryLedger

MAX_ATTEMPTS = 10**6
"""The maximum of a benchmark thread: never reached."""


def _initial() -> Any:
    from graph.state import initial_state

    return initial_state(thread_id="t", task="bench", model="offline-demo", max_attempts=MAX_ATTEMPTS,
                         created_at="2026-01-01T00:00:00+00:00", context_tokens=10**9)


def _bare(checkpointer: Any, steps: int, durability: str) -> list[float]:
    from graph.factory import build_graph
    from nodes.context import StepContext

    graph, ledger = build_graph(checkpointer), MemoryLedger()
    ledger.create("t", MAX_ATTEMPTS)
    ctx = StepContext("t", ledger, ToolLoopModel())
    config = {"configurable": {"thread_id": "t"}}
    times, graph_input = [], _initial()
    for _ in range(steps):
        start = time.perf_counter()
        graph.invoke(graph_input, config, context=ctx, durability=durability)
        times.append(time.perf_counter() - start)
        graph_input = None
    return times


class _Commits:
    def __init__(self) -> None:
        self.n = 0

    def saver(self, statement: str) -> None:
        self.n += statement.strip().upper().startswith("COMMIT")

    def autocommit(self, statement: str) -> None:
        self.n += statement.strip().upper().startswith(("INSERT", "UPDATE", "DELETE"))


def ours(steps: int, work: Path) -> tuple[list[float], float]:
    """Per-step times of `graph.step.advance`, and SQLite commits per step."""
    from graph.settings import Settings
    from graph.spec import LIMITS, ThreadSpec
    from graph.step import StepRequest, advance
    from graph.storage import open_store

    model = ToolLoopModel()
    settings = Settings(db=str(work / "ours.sqlite"))
    times, commits = [], _Commits()
    with open_store(settings.db, create=True) as store:
        store.checkpointer.conn.set_trace_callback(commits.saver)
        store.sql.conn.set_trace_callback(commits.autocommit)
        for i in range(steps):
            request = StepRequest(ThreadSpec("t", task="bench" if i == 0 else None,
                                             max_attempts=10**6, context_tokens=LIMITS["context_tokens"]))
            start = time.perf_counter()
            advance(store, request, settings, model_factory=lambda m, s: model)
            times.append(time.perf_counter() - start)
    return times, commits.n / steps


def claim_checkpoint(steps: int, work: Path) -> tuple[list[float], list[float]]:
    """Per-step times of `advance` with and without the claim checkpoint, alternated."""
    from unittest import mock

    import graph.sqlite_store
    from graph.ledger import SqlLedger
    from graph.settings import Settings
    from graph.spec import LIMITS, ThreadSpec
    from graph.step import StepRequest, advance
    from graph.storage import open_store

    model = ToolLoopModel()
    with_db, without_db = str(work / "with.sqlite"), str(work / "without.sqlite")
    timed: dict[str, list[float]] = {with_db: [], without_db: []}
    with ExitStack() as stack:
        stores = {with_db: stack.enter_context(open_store(with_db, create=True))}
        with mock.patch.object(graph.sqlite_store, "SqliteLedger", SqlLedger):
            stores[without_db] = stack.enter_context(open_store(without_db, create=True))
        for i in range(steps):
            request = StepRequest(ThreadSpec("t", task="bench" if i == 0 else None,
                                             max_attempts=10**6, context_tokens=LIMITS["context_tokens"]))
            for db, store in stores.items():
                start = time.perf_counter()
                advance(store, request, Settings(db=db), model_factory=lambda m, s: model)
                timed[db].append(time.perf_counter() - start)
    return timed[with_db], timed[without_db]


def bare_sqlite(steps: int, work: Path) -> tuple[list[float], float]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(work / "bare.sqlite", check_same_thread=False)
    commits = _Commits()
    conn.set_trace_callback(commits.saver)
    times = _bare(SqliteSaver(conn), steps, "async")
    conn.close()
    return times, commits.n / steps


def json_steps(steps: int, work: Path) -> list[float]:
    path, times, state = work / "s.json", [], {"attempts": 0, "messages": []}
    for _ in range(steps):
        start = time.perf_counter()
        if path.exists():
            state = json.loads(path.read_text())
        state["attempts"] += 1
        state["messages"].append({"role": "assistant", "content": "x" * 2000})
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        times.append(time.perf_counter() - start)
    return times


def run(steps: int) -> str:
    """Measures and returns the report."""
    from langgraph.checkpoint.memory import InMemorySaver

    work = Path(tempfile.mkdtemp())
    our_times, our_commits = ours(steps, work)
    memory = _bare(InMemorySaver(), steps, "sync")
    bare, bare_commits = bare_sqlite(steps, work)
    jsonf = json_steps(steps, work)
    base = statistics.median(memory)
    rows = []
    for name, times, commits in (("InMemorySaver (anchor)", memory, "-"),
                                 ("SqliteSaver, async durability, no ledger", bare,
                                  f"{bare_commits:.1f}"),
                                 ("ours: durable SQLite + ledger + checks", our_times,
                                  f"{our_commits:.1f}"),
                                 ("JSON-file step", jsonf, "-")):
        med = statistics.median(times)
        rows.append([name, ms(med), ms(max(times) - min(times)), f"{med / base:.2f}", commits])
    report = table(f"One step in process ({steps} steps, state +~2 KB per step)",
                   ["what", "median", "spread", "÷ InMemorySaver", "commits/step"], rows)
    with_ckpt, without_ckpt = claim_checkpoint(steps, work)
    ratio = statistics.median(with_ckpt) / statistics.median(without_ckpt)
    rows = [["ours, claim checkpointed into the database file", ms(statistics.median(with_ckpt)),
             ms(max(with_ckpt) - min(with_ckpt)), f"{ratio:.2f}"],
            ["ours, claim left in the -wal (before issue 12)",
             ms(statistics.median(without_ckpt)), ms(max(without_ckpt) - min(without_ckpt)),
             "1.00"]]
    return report + "\n" + table("Claim checkpoint (steps alternated in one run)",
                                  ["what", "median", "spread", "ratio"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100)
    print(run(parser.parse_args(argv).steps))


if __name__ == "__main__":
    main()
