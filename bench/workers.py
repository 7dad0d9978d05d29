"""Throughput of 1, 2 and 4 queue workers on PostgreSQL beside one process on SQLite.

  python -m bench.workers --postgres URL [--threads 40] [--delay 0.2]

The same batch each time, against a loopback fake MandAPI that answers after a fixed
delay (seconds); threads per second and the ratio to one worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import table


def _fresh_db(url: str) -> str:
    import psycopg

    name = f"bench_workers_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name


def _all_done(db: str, threads: int) -> bool:
    from graph.storage import open_store
    from graph.thread_history import list_threads

    with open_store(db, create=False, read_only=True) as store:
        rows = list_threads(store)
    return len(rows) == threads and all(r["status"] == "done" for r in rows)


def run(url: str, threads: int, delay: float) -> str:
    """Measures and returns the report."""
    from tests.fake_mandapi import FakeMandApi

    work = Path(tempfile.mkdtemp())
    tasks = work / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"thread_id": f"w{i}", "task": f"[w{i}] shipping?"}) + "\n"
                             for i in range(threads)))
    results = {}
    with FakeMandApi(work / "log.jsonl", hold_s=delay) as fake:
        base_env = {**os.environ, "MANDAPI_API_KEY": "sk-bench", "MANDAPI_MODEL_ID": "m",
                    "MANDAPI_BASE_URL": fake.base_url}
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "graph.batch", str(tasks), "--live", "--db",
                        str(work / "one.sqlite")], env=base_env, check=True, capture_output=True)
        results["SQLite, one process"] = time.perf_counter() - start
        worker = os.path.join(os.path.dirname(sys.executable), "procrastinate")
        for count in (1, 2, 4):
            db = _fresh_db(url)
            env = {**base_env, "GRAPH_DB": db}
            subprocess.run([sys.executable, "-m", "graph.batch", str(tasks), "--enqueue", "--live"],
                           env=env, check=True, capture_output=True)
            start = time.perf_counter()
            procs = [subprocess.Popen([worker, "--app=graph.queue.app", "worker"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for _ in range(count)]
            while not _all_done(db, threads):
                time.sleep(0.2)
            results[f"PostgreSQL, {count} queue worker(s)"] = time.perf_counter() - start
            for proc in procs:
                proc.terminate()
                proc.wait(10)
    one = results["PostgreSQL, 1 queue worker(s)"]
    rows = [[name, f"{threads / seconds:.2f}", f"{one / seconds:.2f}"]
            for name, seconds in results.items()]
    return table(f"{threads} threads (2 requests each), fake model answering after {delay} s",
                 ["what", "threads/s", "× one worker"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", required=True)
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.2)
    args = parser.parse_args(argv)
    print(run(args.postgres, args.threads, args.delay))


if __name__ == "__main__":
    main()
