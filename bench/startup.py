"""Cold start of one `graph.run` invocation, as a scheduler runs it, beside its anchors.

  python -m bench.startup [--repeat N] [--passes N] [--postgres URL] [--json PATH]

Whole processes, one of each per round (the order rotating), in two passes (`--passes`):
`python -c pass`, `python -c "import langgraph.graph"` (the import floor), a plain
JSON-file step (load, count, write a temporary file, fsync, rename), ours with
`--once` on a new thread (the offline demo model), and ours on a thread that is done
(nothing to do: the quick answer of `graph.store.poll`, and the full path forced by
`--task`). With `--postgres` (a URL whose user may create databases), the same two
polls of a done thread in a fresh PostgreSQL database (dropped at the end), and
`python -c "import psycopg"` (the driver's own import, which the quick answer pays
there). Also lists what this project's own modules add to start-up
(`python -X importtime`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from bench.common import (
    PASSES,
    alternate,
    cli_parser,
    pass_names,
    pass_summaries,
    ratios,
    table,
    timing_row,
    write_json,
)
from bench.scratch import fresh_database, workdir

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
LABELS = {
    "pass": "python -c pass",
    "floor": "import langgraph.graph (floor)",
    "json": "JSON-file step",
    "once": "graph.run --once, new thread (ours)",
    "done": "graph.run, thread already done (ours: the quick answer)",
    "done_full": "graph.run, thread already done, full path (--task given)",
}
POSTGRES_LABELS = {
    "psycopg": "import psycopg",
    "pg_done": "PostgreSQL: graph.run, thread already done (ours: the quick answer)",
    "pg_done_full": "PostgreSQL: graph.run, thread already done, full path (--task given)",
}
TASK = "How long does shipping take?"


def _env() -> dict[str, str]:
    """This environment without MandAPI settings or a default database."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MANDAPI_", "GRAPH_DB"))}


def one_pass(repeat: int, postgres: str | None = None) -> dict[str, list[float]]:
    """Seconds per process of each variant, `repeat` rounds alternated.

    With `postgres` (an admin URL), also the PostgreSQL variants, in a fresh database.
    """
    py, env = sys.executable, _env()

    def run(*args: str) -> None:
        subprocess.run([py, *args], check=True, capture_output=True, env=env)

    def done(db: str, *full: str) -> Callable[[int], None]:
        return lambda i: run("-m", "graph.run", "--thread", "done", "--db", db, *full)

    with workdir("startup") as work, \
            fresh_database(postgres, "startup") if postgres else nullcontext("") as url:
        db = str(work / "c.sqlite")
        for where in filter(None, (db, url)):  # a thread done, to the answer
            run("-m", "graph.run", "--thread", "done", "--task", TASK, "--db", where)
        variants = {
            "pass": lambda i: run("-c", "pass"),
            "floor": lambda i: run("-c", "import langgraph.graph"),
            "json": lambda i: run("-c", JSON_STEP, str(work / "s.json")),
            "once": lambda i: run("-m", "graph.run", "--thread", f"t{i}", "--task", TASK, "--once",
                                  "--db", db),
            "done": done(db),
            "done_full": done(db, "--task", TASK),
        }
        if url:
            variants.update({"psycopg": lambda i: run("-c", "import psycopg"),
                             "pg_done": done(url), "pg_done_full": done(url, "--task", TASK)})
        return alternate(variants, repeat)


def own_import_time() -> tuple[float, list[tuple[str, float]]]:
    """Self import time (ms) of our own modules in `graph.run --help`, total and the top 4."""
    trace = subprocess.run([sys.executable, "-X", "importtime", "-m", "graph.run", "--help"],
                           capture_output=True, text=True, env=_env()).stderr.splitlines()
    own = []
    for line in trace:
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2].split(".")[0] in ("graph", "nodes") \
                and parts[0].split()[-1].isdigit():
            own.append((parts[2], int(parts[0].split()[-1]) / 1000))
    return sum(t for _, t in own), sorted(own, key=lambda x: -x[1])[:4]


def measure(repeat: int, postgres: str | None = None, passes: int = PASSES) -> dict[str, Any]:
    """Every pass and our import time, as the JSON `bench.run_all` reads."""
    summaries = pass_summaries([one_pass(repeat, postgres) for _ in range(passes)])
    total, top = own_import_time()
    return {"repeat": repeat, "passes": passes, "summaries": summaries,
            "ratios": {name: ratios(summaries, name, "floor") for name in summaries},
            "own_import_ms": total, "own_import_top": top}


def report(results: dict[str, Any]) -> str:
    """The table of `results` (from `measure`)."""
    summaries = results["summaries"]
    rows = [timing_row(label, summaries[name], results["ratios"][name])
            for name, label in {**LABELS, **POSTGRES_LABELS}.items() if name in summaries]
    top = ", ".join(f"{name} {t:.1f}" for name, t in results["own_import_top"])
    return (table(f"Cold start, whole process, {results['repeat']} rounds × {results['passes']} passes, "
                  f"variants alternated (cells: {pass_names(results['passes'])})",
                  ["what", "median", "p25–p75 ms", "÷ import floor"], rows)
            + f"\n\nour own modules' self import time: {results['own_import_ms']:.1f} ms ({top})")


def main(argv: list[str] | None = None) -> None:
    """Measures and prints the report (and writes the results as JSON with `--json`)."""
    parser = cli_parser(__doc__, passes=True)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--postgres", help="also poll a done thread on PostgreSQL (an admin URL)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = measure(args.repeat, args.postgres, args.passes)
    write_json(args.json, results)
    print(report(results))


if __name__ == "__main__":
    main()
