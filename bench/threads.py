"""Many threads in one process, and peak memory.

  python -m bench.threads [--threads 1000] [--steps 4]

N threads × S steps with `graph.step.advance` on one SQLite file (ours) beside the same
graph on `InMemorySaver`; threads per second and the ratio. Peak RSS of the whole run
and of one `--once` step as its own process. (Worker scaling on PostgreSQL needs the
queue: `python -m bench.workers`.)
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import table


def ours(threads: int, steps: int, work: Path) -> float:
    from graph.settings import Settings
    from graph.spec import ThreadSpec
    from graph.step import StepRequest, advance
    from graph.storage import open_store
    from nodes.demo_model import OfflineDemoModel

    settings, model = Settings(db=str(work / "many.sqlite")), OfflineDemoModel()
    start = time.perf_counter()
    with open_store(settings.db, create=True) as store:
        for t in range(threads):
            for s in range(steps):
                advance(store, StepRequest(ThreadSpec(f"t{t}", task="shipping?" if s == 0 else None)),
                        settings, model_factory=lambda m, st: model)
    return time.perf_counter() - start


def memory_anchor(threads: int, steps: int) -> float:
    from langgraph.checkpoint.memory import InMemorySaver

    from graph.factory import build_graph
    from graph.state import initial_state
    from nodes.context import StepContext
    from nodes.demo_model import OfflineDemoModel
    from tests.memory_ledger import MemoryLedger

    graph, model, ledger = build_graph(InMemorySaver()), OfflineDemoModel(), MemoryLedger()
    start = time.perf_counter()
    for t in range(threads):
        ledger.create(f"t{t}", 4)
        ctx = StepContext(f"t{t}", ledger, model)
        config = {"configurable": {"thread_id": f"t{t}"}}
        graph_input = initial_state(thread_id=f"t{t}", task="shipping?", model="offline-demo", max_attempts=4,
                                    created_at="2026-01-01T00:00:00+00:00")
        for _ in range(steps):
            if graph_input is None and not graph.get_state(config).next:
                break
            graph.invoke(graph_input, config, context=ctx, durability="sync")
            graph_input = None
    return time.perf_counter() - start


ONE_STEP = """
import sys
from graph.run import main
code = main(["--thread", "rss", "--task", "q", "--once", "--db", sys.argv[1]])
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(hwm, file=sys.stderr)
"""


def one_step_rss(work: Path) -> float:
    """Peak RSS (MB) of one `--once` step as its own process (its VmHWM: Linux carries
    `ru_maxrss` across fork and exec, so the parent's figure would leak into it)."""
    done = subprocess.run([sys.executable, "-c", ONE_STEP, str(work / "rss.sqlite")], check=True,
                          capture_output=True, text=True)
    return int(done.stderr.strip().splitlines()[-1]) / 1024


def _hwm_mb() -> float:
    """This process's peak resident set (VmHWM), in MB; `ru_maxrss` where there is no /proc."""
    try:
        with open("/proc/self/status") as fh:
            return int(next(line for line in fh if line.startswith("VmHWM")).split()[1]) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(threads: int, steps: int) -> str:
    """Measures and returns the report."""
    work = Path(tempfile.mkdtemp())
    mine = ours(threads, steps, work)
    peak = _hwm_mb()  # before the anchor
    anchor = memory_anchor(threads, steps)
    rows = [["InMemorySaver (anchor)", f"{threads / anchor:.1f}", "1.00"],
            ["ours: SQLite, one process", f"{threads / mine:.1f}", f"{anchor / mine:.2f}"]]
    report = table(f"{threads} threads × up to {steps} steps (offline demo finishes in 2)",
                   ["what", "threads/s", "÷ anchor speed"], rows)
    return report + (f"\n\npeak RSS of our {threads}-thread run: {peak:.0f} MB; of one --once "
                     f"step as a process: {one_step_rss(work):.0f} MB")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    print(run(args.threads, args.steps))


if __name__ == "__main__":
    main()
