"""Many threads in one process, beside the same graph on InMemorySaver.

  python -m bench.threads [--threads 1000] [--steps 2] [--passes N] [--json PATH]

N threads × S steps (the offline demo model answers after one tool round, so a thread
is done in 2 steps), in the default configuration. Ours: `graph.step.advance` on one
SQLite store kept open for the whole run. Anchor: the same compiled graph on
`InMemorySaver` with an in-memory ledger, compiled once. Beside them, for reference, the
same graph on LangGraph's own `SqliteSaver` (WAL, `synchronous=FULL`, `durability="sync"`,
no checks, no attempt log): the floor a durable SQLite store sets on this disk, since
every superstep waits for its commit's sync. Thread by thread alternated
(thread i of each variant in turn, the order rotating), in two passes (`--passes`),
timing wall and CPU time (the process's, every thread of it; the difference is time
spent waiting, mostly for the disk's syncs the durable steps promise).
Also the peak resident set of one `--once` step run as its own process (`graph.run`).
(Worker scaling on PostgreSQL needs the queue: `python -m bench.workers`.)
"""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Any

from bench.common import (
    PASSES,
    alternate,
    cli_parser,
    ms,
    pass_names,
    pass_summaries,
    per_pass,
    table,
    write_json,
)
from bench.scratch import workdir


def one_pass(threads: int, steps: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds per thread (all its steps) of ours and of the anchor, alternated."""
    from bench.project import BareThreads, OurStore, demo_model, memory_saver, sqlite_saver

    with workdir("threads") as work, ExitStack() as stack:
        ours = OurStore(str(work / "many.sqlite"), demo_model(), max_attempts=None)
        stack.callback(ours.close)
        anchor = BareThreads(memory_saver(), demo_model(), durability="sync", max_attempts=4)
        bare = BareThreads(stack.enter_context(sqlite_saver(str(work / "bare.sqlite"))),
                           demo_model(), durability="sync", max_attempts=4)
        cpu: dict[str, list[float]] = {"memory": [], "sqlite": [], "ours": []}

        def run(thread: Any, name: str) -> Any:
            def steps_of(i: int) -> None:
                start = time.process_time()
                for _ in range(steps):
                    thread.step(f"t{i}", task="How long does shipping take?")
                cpu[name].append(time.process_time() - start)
            return steps_of

        wall = alternate({"memory": run(anchor, "memory"), "sqlite": run(bare, "sqlite"),
                          "ours": run(ours, "ours")}, threads)
        return wall, cpu


ONE_STEP = """
import sys
from graph.run import main
code = main(["--thread", "rss", "--task", "q", "--once", "--db", sys.argv[1]])
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(hwm, file=sys.stderr)
"""


def one_step_rss() -> float | None:
    """Peak RSS (MB) of one `--once` step as its own process, from its own VmHWM.

    Linux sets a child's `ru_maxrss` from its parent's at fork and exec, so the parent's
    figure would leak into it; the child's VmHWM does not. None without /proc.
    """
    with workdir("rss") as work:
        done = subprocess.run([sys.executable, "-c", ONE_STEP, str(work / "rss.sqlite")],
                              capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    return int(lines[-1]) / 1024 if done.returncode == 0 and lines and lines[-1].isdigit() else None


def measure(threads: int, steps: int, passes: int = PASSES) -> dict[str, Any]:
    """Every pass and the one-step RSS, as the JSON `bench.run_all` reads."""
    runs = [one_pass(threads, steps) for _ in range(passes)]
    walls = [wall for wall, _ in runs]
    totals = {name: [sum(p[name]) for p in walls] for name in walls[0]}
    cpu = {name: [sum(c[name]) for _, c in runs] for name in walls[0]}
    return {"threads": threads, "steps": steps, "passes": passes, "summaries": pass_summaries(walls),
            "threads_per_s": {name: [threads / t for t in ts] for name, ts in totals.items()},
            "ratio": [m / o for m, o in zip(totals["memory"], totals["ours"], strict=True)],
            "sqlite_ratio": [m / o for m, o in zip(totals["memory"], totals["sqlite"], strict=True)],
            "cpu_s": cpu,
            "cpu_ratio": [m / o for m, o in zip(cpu["memory"], cpu["ours"], strict=True)],
            "one_step_rss_mb": one_step_rss()}


def report(results: dict[str, Any]) -> str:
    """The table of `results` (from `measure`)."""
    speed, summaries = results["threads_per_s"], results["summaries"]
    ones = [1.0] * results["passes"]
    cpu = results["cpu_s"]
    ratio = {"memory": ones, "sqlite": results["sqlite_ratio"], "ours": results["ratio"]}
    rows = [[label, per_pass(speed[name], lambda v: f"{v:.1f}"),
             per_pass([s["median"] for s in summaries[name]], ms),
             per_pass(ratio[name], lambda r: f"{r:.2f}"),
             per_pass([c / results["threads"] for c in cpu[name]], ms),
             per_pass([m / c for m, c in zip(cpu["memory"], cpu[name], strict=True)],
                      lambda r: f"{r:.2f}")]
            for name, label in (("memory", "InMemorySaver, graph compiled once (anchor)"),
                                ("sqlite", "LangGraph's SqliteSaver, synchronous=FULL (floor)"),
                                ("ours", "ours: advance on one SQLite store"))]
    rss = results["one_step_rss_mb"]
    return (table(f"{results['threads']} threads × {results['steps']} steps, one process, threads "
                  f"alternated, {results['passes']} passes (cells: {pass_names(results['passes'])})",
                  ["what", "threads/s", "median per thread", "× anchor speed",
                   "CPU per thread", "× anchor CPU speed"], rows)
            + "\n\npeak RSS of one --once step as a process: "
            + (f"{rss:.0f} MB" if rss is not None else "n/a"))


def main(argv: list[str] | None = None) -> None:
    """Measures and prints the report (and writes the results as JSON with `--json`)."""
    parser = cli_parser(__doc__, passes=True)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = measure(args.threads, args.steps, args.passes)
    write_json(args.json, results)
    print(report(results))


if __name__ == "__main__":
    main()
