"""Cold start of one `--once` step and of a poll, as a scheduler runs them, beside anchors.

  python -m bench.startup [--repeat N]

Anchors: `python -c pass`, `python -c "import langgraph.graph"` (the import floor), and a
plain JSON-file step (load, count, write a temporary file, fsync, rename). Ours: one
`--once` step of a new thread, and a poll of a finished thread (the quick answer of
`graph.poll`, and the full path it replaces, forced by passing `--task`). The variants
alternate in every round. Also lists what this project's own modules add to start-up
(`python -X importtime`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import measure_alternating, ms, table

TASK = "How long does shipping take?"
JSON_STEP = r"""
import json, os, sys
p = sys.argv[1]
state = json.load(open(p)) if os.path.exists(p) else {"attempts": 0, "messages": []}
state["attempts"] += 1
state["messages"].append({"role": "assistant", "content": "x" * 2000})
tmp = p + ".tmp"
with open(tmp, "w") as fh:
    json.dump(state, fh); fh.flush(); os.fsync(fh.fileno())
os.replace(tmp, p)
"""


def run(repeat: int) -> str:
    """Measures and returns the report; the temporary folder is removed."""
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        return _measure(Path(tmp), repeat)


def _measure(work: Path, repeat: int) -> str:
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MANDAPI_", "GRAPH_DB"))}
    counter = iter(range(10**6))
    db = str(work / "c.sqlite")

    def ours() -> None:
        subprocess.run([py, "-m", "graph.run", "--thread", f"t{next(counter)}", "--task", TASK,
                        "--once", "--db", db], check=True, capture_output=True, env=env)

    def poll(*extra: str):
        return lambda: subprocess.run([py, "-m", "graph.run", "--thread", "finished", "--once",
                                       "--json", "--db", db, *extra], check=True,
                                      capture_output=True, env=env)

    def cmd(*args: str):
        return lambda: subprocess.run([py, *args], check=True, capture_output=True, env=env)

    subprocess.run([py, "-m", "graph.run", "--thread", "finished", "--task", TASK, "--db", db],
                   check=True, capture_output=True, env=env)  # done: nothing left to do
    results = measure_alternating({
        "python -c pass": cmd("-c", "pass"),
        "import langgraph.graph (floor)": cmd("-c", "import langgraph.graph"),
        "JSON-file step": cmd("-c", JSON_STEP, str(work / "s.json")),
        "graph.run --once (ours)": ours,
        "poll a finished thread (ours, quick answer)": poll(),
        "poll a finished thread (ours, full path: --task)": poll("--task", TASK),
    }, repeat)
    floor = results["import langgraph.graph (floor)"][0]
    rows = [[name, ms(med), ms(spread), f"{med / floor:.2f}"] for name, (med, spread) in results.items()]
    report = table(f"Cold start of one step and of a poll (median of {repeat}, whole process, "
                   "variants alternated)",
                   ["what", "median", "spread", "÷ import floor"], rows)
    trace = subprocess.run([py, "-X", "importtime", "-m", "graph.run", "--help"],
                           capture_output=True, text=True, env=env).stderr.splitlines()
    own = []
    for line in trace:
        parts = [p.strip() for p in line.split("|")]
        ours_module = parts[2].split(".")[0] in ("graph", "nodes") if len(parts) == 3 else False
        if ours_module and parts[0].split()[-1].isdigit():
            own.append((int(parts[0].split()[-1]), parts[2]))
    own_total = sum(us for us, _ in own)
    report += f"\n\nour own modules' self import time: {own_total / 1000:.1f} ms " \
              f"({', '.join(f'{n} {us / 1000:.1f}' for us, n in sorted(own, reverse=True)[:4])})"
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    print(run(parser.parse_args(argv).repeat))


if __name__ == "__main__":
    main()
