"""In-process cost of one step (one graph invocation) in the default configuration.

  python -m bench.step_cost [--steps N] [--passes N] [--postgres URL] [--redis URL] [--json PATH]

One thread per variant, stepped with the offline scripted tool-loop model (the
conversation grows ~2 KB per step until compaction bounds it at the default
`--context-tokens`). Variants, one step of each per round, order rotating:

- ours: `graph.step.advance` on SQLite (`durability="sync"`, lock, load-time checks,
  ledger, attempt log, the claim checkpoint);
- ours without the claim checkpoint (the claim left in the `-wal`, before issue 12);
- InMemorySaver: the same compiled graph, same compaction, `durability="sync"`, an
  in-memory ledger (the anchor);
- SqliteSaver: the same graph on LangGraph's own saver, its default `"async"`
  durability, no ledger;
- SqliteSaver with `durability="sync"` (and SQLite's `synchronous=FULL`), no ledger: the
  floor any store pays on this disk once every superstep's checkpoint is synced before
  the next node runs, the promise ours keeps;
- a JSON-file step (load, append, write a temporary file, fsync, rename);
- with `--postgres URL`: ours on PostgreSQL (a fresh database per pass, dropped after);
- with `--redis URL`: ours on Redis (a new thread per pass, its keys deleted after; the
  server must keep an append-only file, fsynced by each claim's `WAITAOF`).

Two passes from scratch (`--passes`); medians, interquartile ranges and ratios per pass, of the
wall time and of the process's CPU time (every thread of it): their difference is time
spent waiting, mostly for the disk's syncs that `durability="sync"` and
`synchronous=FULL` promise, and on PostgreSQL and Redis for the server, whose own CPU
time is not counted. Commits per step are counted under strace by `bench.syncs`
(a separate, untimed run). `--profile` instead prints where our step spends its CPU
(cProfile of the main thread; LangGraph saves checkpoints on other threads).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import syncs
from bench.common import (
    PASSES,
    alternate,
    cli_parser,
    ms,
    pass_names,
    pass_summaries,
    per_pass,
    ratios,
    table,
    timing_row,
    write_json,
)
from bench.scratch import workdir

LABELS = {
    "memory": "InMemorySaver, same graph and compaction (anchor)",
    "bare": "SqliteSaver, async durability, no ledger",
    "bare_sync": "SqliteSaver, sync durability, no ledger (durable floor)",
    "ours": "ours: durable SQLite + ledger + checks",
    "ours_no_claim": "ours without the claim checkpoint",
    "json": "JSON-file step",
    "postgres": "ours on PostgreSQL",
    "redis": "ours on Redis",
}
SERVERS = ("postgres", "redis")
"""Variants measured only when their server is given."""
SYNC_STEPS = 20
"""Steps counted under strace (fewer when the run has fewer)."""


class JsonFileThread:
    """A thread kept as one JSON file, rewritten atomically and fsync'd each step."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def step(self) -> None:
        """Loads the file, appends ~2 KB, writes a temporary file, fsyncs, renames."""
        state: dict[str, Any] = {"attempts": 0, "messages": []}
        if self.path.exists():
            state = json.loads(self.path.read_text())
        state["attempts"] += 1
        state["messages"].append({"role": "assistant", "content": "x" * 2000})
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


def _stepper(thread: Any, cpu: list[float]) -> Callable[[int], None]:
    def step(i: int) -> None:
        start = time.process_time()
        thread.step()
        cpu.append(time.process_time() - start)
    return step


class _Named:
    """Steps one named thread of a store (`step()` takes no thread id)."""

    def __init__(self, store: Any, thread_id: str) -> None:
        self.store, self.thread_id = store, thread_id

    def step(self) -> None:
        """One step of the thread."""
        self.store.step(self.thread_id)


def _servers(stack: ExitStack, postgres: str | None, redis: str | None) -> dict[str, Any]:
    """Ours on a fresh PostgreSQL database and on a new Redis thread (each when given)."""
    from bench.project import OurStore, ToolLoopModel
    from bench.redis_db import drop_thread, thread_id
    from bench.scratch import fresh_database

    threads: dict[str, Any] = {}
    if postgres:
        store = OurStore(stack.enter_context(fresh_database(postgres, "step")), ToolLoopModel())
        stack.callback(store.close)
        threads["postgres"] = store
    if redis:
        store, tid = OurStore(redis, ToolLoopModel()), thread_id("step")
        stack.callback(drop_thread, redis, tid)
        stack.callback(store.close)
        threads["redis"] = _Named(store, tid)
    return threads


def one_pass(steps: int, postgres: str | None = None,
             redis: str | None = None) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Runs every variant `steps` times, alternated.

    Returns:
        Name -> wall seconds per step, and name -> CPU seconds per step.
    """
    from bench.project import BareThreads, OurStore, ToolLoopModel, memory_saver, sqlite_saver

    with workdir("step") as work, ExitStack() as stack:
        ours = OurStore(str(work / "ours.sqlite"), ToolLoopModel())
        stack.callback(ours.close)
        ours_no_claim = OurStore(str(work / "no-claim.sqlite"), ToolLoopModel(), claim_checkpoint=False)
        stack.callback(ours_no_claim.close)
        bare_saver = stack.enter_context(sqlite_saver(str(work / "bare.sqlite")))
        sync_saver = stack.enter_context(sqlite_saver(str(work / "bare-sync.sqlite")))
        threads: dict[str, Any] = {
            "memory": BareThreads(memory_saver(), ToolLoopModel(), durability="sync"),
            "bare": BareThreads(bare_saver, ToolLoopModel(), durability="async"),
            "bare_sync": BareThreads(sync_saver, ToolLoopModel(), durability="sync"),
            "ours": ours, "ours_no_claim": ours_no_claim,
            "json": JsonFileThread(work / "thread.json"),
        } | _servers(stack, postgres, redis)
        cpu: dict[str, list[float]] = {name: [] for name in threads}
        wall = alternate({name: _stepper(t, cpu[name]) for name, t in threads.items()}, steps)
        return wall, cpu


def measure(steps: int, postgres: str | None = None, redis: str | None = None,
            passes: int = PASSES) -> dict[str, Any]:
    """Every pass and the commit counts, as the JSON `bench.run_all` reads."""
    from bench.project import default_context_tokens

    runs = [one_pass(steps, postgres, redis) for _ in range(passes)]
    summaries = pass_summaries([wall for wall, _ in runs])
    cpu = pass_summaries([cpu for _, cpu in runs])
    sync_steps = min(steps, SYNC_STEPS)
    return {
        "steps": steps, "passes": passes, "context_tokens": default_context_tokens(),
        "summaries": summaries,
        "cpu_summaries": cpu,
        "cpu_ratios": {"ours/memory": ratios(cpu, "ours", "memory"),
                       "ours/bare": ratios(cpu, "ours", "bare")},
        "ratios": {"ours/memory": ratios(summaries, "ours", "memory"),
                   "ours/bare": ratios(summaries, "ours", "bare"),
                   "bare/memory": ratios(summaries, "bare", "memory"),
                   "bare_sync/memory": ratios(summaries, "bare_sync", "memory"),
                   "ours/bare_sync": ratios(summaries, "ours", "bare_sync"),
                   "claim": ratios(summaries, "ours", "ours_no_claim")}
                  | {f"{name}/memory": ratios(summaries, name, "memory")
                     for name in SERVERS if name in summaries}
                  | {f"{name}/ours": ratios(summaries, name, "ours")
                     for name in SERVERS if name in summaries},
        "sync_steps": sync_steps,
        "syncs": {variant: syncs.count(variant, sync_steps) for variant in ("ours", "bare")},
    }


def report(results: dict[str, Any]) -> str:
    """The two tables of `results` (from `measure`)."""
    summaries, counted = results["summaries"], results["syncs"]

    def per_step(variant: str, key: str) -> str:
        counts = counted.get(variant)
        return "-" if variant not in counted else f"{counts[key]:.1f}" if counts else "n/a"

    cpu = results["cpu_summaries"]
    rows = [timing_row(LABELS[name], summaries[name], ratios(summaries, name, "memory"))
            + [per_pass([p["median"] for p in cpu[name]], ms),
               per_pass(ratios(cpu, name, "memory"), lambda r: f"{r:.2f}"),
               per_step(name, "commits"), per_step(name, "syncs")] for name in LABELS if name in summaries]
    main = table(f"One step in process, default configuration (--context-tokens "
                 f"{results['context_tokens']}), {results['steps']} steps × {results['passes']} passes, "
                 f"variants alternated (cells: {pass_names(results['passes'])})",
                 ["what", "median", "p25–p75 ms", "÷ InMemorySaver", "CPU median",
                  "CPU ÷ InMemorySaver", "commits/step", "fsync+fdatasync/step"], rows)
    claim = table("Claim checkpoint (same loop)", ["what", "median", "p25–p75 ms", "ratio"],
                  [timing_row(LABELS[name], summaries[name], ratios(summaries, name, "ours_no_claim"))
                   for name in ("ours", "ours_no_claim")])
    note = (f"commits/step: SQLite commits counted under strace over {results['sync_steps']} "
            "steps (python -m bench.syncs splits the sync calls by file)")
    return "\n\n".join([main, claim, note])


def profile(steps: int, top: int = 40) -> str:
    """cProfile of our variant's loop (after a warm-up to steady compaction), top functions."""
    import cProfile
    import io
    import pstats

    from bench.project import OurStore, ToolLoopModel

    with workdir("profile") as work:
        ours = OurStore(str(work / "ours.sqlite"), ToolLoopModel())
        try:
            for _ in range(30):
                ours.step()
            profiler = cProfile.Profile()
            profiler.runcall(lambda: [ours.step() for _ in range(steps)])
        finally:
            ours.close()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    """Measures and prints the report (and writes the results as JSON with `--json`)."""
    parser = cli_parser(__doc__, passes=True)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--postgres", help="also step ours on this PostgreSQL server (an admin URL)")
    parser.add_argument("--redis", help="also step ours on this Redis server (a redis:// URL)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--profile", action="store_true",
                        help="print a profile of our step instead of measuring")
    args = parser.parse_args(argv)
    if args.profile:
        print(profile(args.steps))
        return
    results = measure(args.steps, args.postgres, args.redis, args.passes)
    write_json(args.json, results)
    print(report(results))


if __name__ == "__main__":
    main()
