"""Throughput of 1, 2 and 4 queue workers on PostgreSQL beside one process on SQLite.

  python -m bench.workers --postgres URL [--threads 40] [--delay 0.2] [--workers 1,2,4]
                          [--json PATH]

The same batch each time, against a loopback fake MandAPI that answers after a fixed
delay (seconds); threads per second and the ratio to one worker. Each configuration
runs once per round on a fresh database (dropped afterwards), the order rotating, in
two rounds (the two passes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import PASSES, alternate, cli_parser, per_pass, table, write_json
from bench.scratch import fresh_database, workdir


def _all_done(db: str, threads: int) -> bool:
    from graph.storage import open_store
    from graph.thread_history import list_threads

    with open_store(db, create=False, read_only=True) as store:
        rows = list_threads(store)
    return len(rows) == threads and all(r["status"] == "done" for r in rows)


def _one_process(tasks: Path, env: dict[str, str]) -> None:
    """The batch in one `graph.batch --live` process on a new SQLite file."""
    with workdir("workers-sqlite") as work:
        subprocess.run([sys.executable, "-m", "graph.batch", str(tasks), "--live", "--db",
                        str(work / "one.sqlite")], env=env, check=True, capture_output=True)


def _queue(tasks: Path, env: dict[str, str], admin_url: str, count: int, threads: int) -> float:
    """Enqueues the batch on a fresh database; seconds until `count` workers finish it."""
    worker = os.path.join(os.path.dirname(sys.executable), "procrastinate")
    with fresh_database(admin_url, "workers") as db:
        env = {**env, "GRAPH_DB": db}
        subprocess.run([sys.executable, "-m", "graph.batch", str(tasks), "--enqueue", "--live"],
                       env=env, check=True, capture_output=True)
        start = time.perf_counter()
        procs = [subprocess.Popen([worker, "--app=graph.queue.app", "worker"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(count)]
        try:
            while not _all_done(db, threads):
                time.sleep(0.2)
            return time.perf_counter() - start
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def measure(admin_url: str, threads: int, delay: float, counts: list[int]) -> dict[str, Any]:
    """Seconds per configuration and pass, as the JSON `bench.run_all` reads.

    Args:
        admin_url: A URL on the PostgreSQL server whose user may create databases.
        threads: Threads in the batch.
        delay: Seconds the fake model holds each request.
        counts: Worker counts to measure (1 must be among them: the ratios' base).
    """
    from tests.fake_mandapi import FakeMandApi

    with workdir("workers") as work:
        tasks = work / "tasks.jsonl"
        tasks.write_text("".join(json.dumps({"thread_id": f"w{i}", "task": f"[w{i}] shipping?"}) + "\n"
                                 for i in range(threads)))
        with FakeMandApi(work / "log.jsonl", hold_s=delay) as fake:
            env = {**os.environ, "MANDAPI_API_KEY": "sk-bench", "MANDAPI_MODEL_ID": "m",
                   "MANDAPI_BASE_URL": fake.base_url}
            env.pop("GRAPH_DB", None)
            variants: dict[str, Any] = {"sqlite": lambda i: _one_process(tasks, env)}
            seconds: dict[str, list[float]] = {}
            for count in counts:
                seconds[f"queue{count}"] = []
                variants[f"queue{count}"] = (lambda i, c=count: seconds[f"queue{c}"].append(
                    _queue(tasks, env, admin_url, c, threads)))
            timed = alternate(variants, PASSES)
    seconds["sqlite"] = timed["sqlite"]
    one = seconds["queue1"]
    return {"threads": threads, "delay": delay, "counts": counts, "seconds": seconds,
            "threads_per_s": {k: [threads / s for s in v] for k, v in seconds.items()},
            "x_one_worker": {k: [o / s for o, s in zip(one, v, strict=True)] for k, v in seconds.items()}}


def report(results: dict[str, Any]) -> str:
    """The table of `results` (from `measure`)."""
    labels = {"sqlite": "SQLite, one process (graph.batch)"}
    labels.update({f"queue{c}": f"PostgreSQL, {c} queue worker(s)" for c in results["counts"]})
    rows = [[label, per_pass(results["threads_per_s"][k], lambda v: f"{v:.2f}"),
             per_pass(results["x_one_worker"][k], lambda r: f"{r:.2f}")] for k, label in labels.items()]
    return table(f"{results['threads']} threads (2 requests each), fake model answering after "
                 f"{results['delay']} s, {PASSES} rounds alternated (cells: pass 1 / pass 2)",
                 ["what", "threads/s", "× one worker"], rows)


def main(argv: list[str] | None = None) -> None:
    """Measures and prints the report (and writes the results as JSON with `--json`)."""
    parser = cli_parser(__doc__)
    parser.add_argument("--postgres", required=True, help="an admin URL of the PostgreSQL server")
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated (with 1)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    counts = sorted({1, *(int(n) for n in args.workers.split(","))})
    results = measure(args.postgres, args.threads, args.delay, counts)
    write_json(args.json, results)
    print(report(results))


if __name__ == "__main__":
    main()
