"""Queue workers on PostgreSQL: concurrency within one process, processes side by side, memory.

  python -m bench.workers --postgres URL [--redis URL] [--delay 0.5] [--concurrency 8]
                          [--processes 2] [--threads-per-slot 6] [--memory-jobs 100,1000]
                          [--quick] [--passes N] [--json PATH]

Against a loopback fake MandAPI answering after `--delay` seconds, each thread takes two
steps (two jobs). Throughput is steps per second from the first job's start to the last
job's end (procrastinate's own job events), so worker start-up is left out. Variants
on one fresh database (dropped afterwards), the order rotating, in two rounds (the two
passes, `--passes`):

- one worker process at `--concurrency 1`, and at `--concurrency C`;
- N worker processes (2 up to `--processes`), each at `--concurrency C`;
- with `--redis URL`: one worker process at `--concurrency C` whose checkpoints are in
  that Redis database, its queue still in the PostgreSQL one (`GRAPH_QUEUE_DB`); its
  threads' keys are deleted afterwards.

Each round starts the variant's worker processes, waits until they are up (start-up is
not timed), enqueues `--threads-per-slot` new threads per job slot on the variant's own
procrastinate queue, so its slots stay busy, and stops them. Last, one worker process at
`--concurrency C` runs the largest of `--memory-jobs` jobs
(fake model answering after `--memory-delay` s) and its peak memory (`VmHWM` of
/proc/PID/status) is read as each count of jobs is reached: flat means no growth per job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import PASSES, alternate, cli_parser, pass_names, per_pass, table, write_json
from bench.scratch import fresh_database, workdir

STEPS_PER_THREAD = 2
"""The fake model answers after one tool round: two steps (jobs) per thread."""
_PROGRESS_SQL = """
SELECT count(*) FILTER (WHERE e.type = 'succeeded'), min(e.at) FILTER (WHERE e.type = 'started'),
       max(e.at) FILTER (WHERE e.type = 'succeeded'), count(*) FILTER (WHERE e.type = 'failed')
FROM procrastinate_events e JOIN procrastinate_jobs j ON j.id = e.job_id
WHERE j.task_name = 'graph.advance_thread' AND j.queue_name = %s AND j.id > %s
"""
_LAST_JOB_SQL = "SELECT coalesce(max(id), 0) FROM procrastinate_jobs"
REDIS_NEEDS_POSTGRES = ("queue workers with Redis checkpoints: their queue is procrastinate's, "
                        "in PostgreSQL; give `--postgres` too")
"""Why `bench.run_all --redis` without `--postgres` has no worker rows."""


def _procrastinate() -> str:
    return os.path.join(os.path.dirname(sys.executable), "procrastinate")


def _enqueue(db: str, work: Path, queue: str, threads: int, checkpoints: str | None = None
             ) -> list[str]:
    """Enqueues `threads` new threads (ids unique to `queue` and this call) on `queue`.

    The queue is in PostgreSQL database `db`; the threads' checkpoints in `checkpoints`
    (default `db`). Returns the thread ids.
    """
    from graph.fleet.jobs import enqueue
    from graph.fleet.tasks_file import read_tasks

    tasks = work / f"{queue}.jsonl"
    start = sum(1 for _ in tasks.open()) if tasks.exists() else 0
    lines = [json.dumps({"thread_id": f"{queue}_{i}", "task": f"[{queue}_{i}] shipping?"}) + "\n"
             for i in range(start, start + threads)]
    with tasks.open("a") as fh:
        fh.writelines(lines)
    batch = work / f"{queue}-batch.jsonl"
    batch.write_text("".join(lines))
    enqueue(checkpoints or db, read_tasks(batch, live=True), live=True, cap_id=None,
            max_requests=None, queue=queue, queue_url=db)
    return [f"{queue}_{i}" for i in range(start, start + threads)]


@contextmanager
def _workers(env: dict[str, str], plan: dict[str, tuple[int, int]], logs: Path
             ) -> Iterator[dict[str, list[Any]]]:
    """Per queue name, its `(processes, concurrency)` worker processes, each taking that
    queue only; all started at once, stopped (SIGTERM, then SIGKILL) on exit. Each
    writes its log to `logs/QUEUE-N.log` (`_log_tails` shows them when a job fails)."""
    procs: dict[str, list[subprocess.Popen]] = {}
    try:
        for queue, (processes, concurrency) in plan.items():
            procs[queue] = []
            for n in range(processes):
                with (logs / f"{queue}-{n}.log").open("ab") as log:
                    procs[queue].append(subprocess.Popen(
                        [_procrastinate(), "--app=graph.queue.app", "worker", f"--queues={queue}",
                         f"--concurrency={concurrency}", f"--name={queue}-{n}"], env=env,
                        stdout=log, stderr=subprocess.STDOUT))
        yield procs
    finally:
        every = [p for group in procs.values() for p in group]
        for proc in every:
            proc.terminate()
        for proc in every:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _query(db: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()


def _wait_until_started(db: str, procs: dict[str, list[Any]], timeout_s: float = 300) -> None:
    """Waits until every worker process has registered with procrastinate (and those of
    the round before have left: they unregister when they stop, or stop beating)."""
    every = [p for group in procs.values() for p in group]
    deadline = time.monotonic() + timeout_s
    while _query(db, "SELECT count(*) FROM procrastinate_workers WHERE last_heartbeat > "
                 "now() - interval '15 seconds'")[0] != len(every):
        if any(p.poll() is not None for p in every) or time.monotonic() > deadline:
            raise RuntimeError("a worker did not start")
        time.sleep(0.2)


def _log_tails(logs: Path, queue: str, lines: int = 40) -> str:
    """The last `lines` lines of each of `queue`'s worker logs (`_workers`)."""
    return "\n".join(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace")
                                                      .splitlines()[-lines:])
                     for path in sorted(logs.glob(f"{queue}-*.log")))


def _wait_for(db: str, queue: str, after: int, steps: int, procs: list[Any], logs: Path,
              timeout_s: float = 900) -> float:
    """Waits until `steps` steps of jobs numbered above `after` on `queue` are done; returns
    seconds from the first one's start to the last one's end (procrastinate's job events).

    Raises:
        RuntimeError: A step job failed, a worker died, or the timeout passed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        done, first, last, failed = _query(db, _PROGRESS_SQL, (queue, after))
        if failed:
            raise RuntimeError(f"{failed} step job(s) failed on queue {queue}; its workers' "
                               f"logs end:\n{_log_tails(logs, queue)}")
        if done >= steps:
            return (last - first).total_seconds()
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise RuntimeError(f"workers of {queue} stopped or stalled at {done} of {steps} "
                               f"steps; their logs end:\n{_log_tails(logs, queue)}")
        time.sleep(0.2)


def _vm_hwm_mb(pid: int) -> float:
    """Peak resident memory of process `pid` so far (`VmHWM`), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc (Linux only)")


def _memory(db: str, work: Path, proc: Any, marks: list[int]) -> list[float]:
    """Peak memory (MB) of the `memory` queue's worker as each count of `marks` jobs is done."""
    _enqueue(db, work, "memory", -(-max(marks) // STEPS_PER_THREAD))
    peaks = []
    for mark in marks:
        done = 0
        while done < mark:
            done = _query(db, _PROGRESS_SQL, ("memory", 0))[0]
            if proc.poll() is not None:
                raise RuntimeError("the memory worker stopped")
            time.sleep(0.05)
        peaks.append(_vm_hwm_mb(proc.pid))
    return peaks


def measure(admin_url: str, *, delay: float, concurrency: int, processes: int,
            threads_per_slot: int, memory_jobs: list[int], memory_delay: float,
            redis: str | None = None, passes: int = PASSES) -> dict[str, Any]:
    """Throughput per variant and pass, and peak memory, as the JSON `bench.run_all` reads.

    A round starts one variant's worker processes (taking only the variant's own
    procrastinate queue), waits until they are up, enqueues new threads on that queue,
    waits for their steps and stops the workers: only one variant holds database
    sessions at a time (each job slot holds two).

    Args:
        admin_url: A URL on the PostgreSQL server whose user may create databases.
        delay: Seconds the fake model holds each request (throughput variants).
        concurrency: Jobs one worker process runs at once (besides 1, the anchor).
        processes: Largest number of worker processes (each at `concurrency`).
        threads_per_slot: Threads enqueued per job slot of a variant.
        memory_jobs: Job counts at which the worker's peak memory is read.
        memory_delay: Seconds the fake model holds each request in the memory run.
        redis: A Redis URL for the variant with checkpoints there (None: no such variant).
        passes: Rounds of every variant.
    """
    from graph.fleet.jobs import ensure_schema
    from graph.store import open_store
    from tests.fake_mandapi import FakeMandApi

    counts = list(range(2, processes + 1))
    plan = {"c1": (1, 1), f"c{concurrency}": (1, concurrency),
            **{f"p{n}": (n, concurrency) for n in counts},
            **({f"redis{concurrency}": (1, concurrency)} if redis else {})}
    speeds: dict[str, list[float]] = {key: [] for key in plan}
    on_redis: list[str] = []
    with workdir("workers") as work, fresh_database(admin_url, "workers") as db, \
            FakeMandApi(work / "log.jsonl", hold_s=delay) as fake:
        env = {**os.environ, "MANDAPI_API_KEY": "sk-bench-0000000", "MANDAPI_MODEL_ID": "m",
               "MANDAPI_BASE_URL": fake.base_url, "GRAPH_DB": db}
        with open_store(db, create=True):
            ensure_schema(db)

        def run(queue: str, n: int, c: int) -> None:
            after, steps = _query(db, _LAST_JOB_SQL)[0], n * c * threads_per_slot * STEPS_PER_THREAD
            checkpoints = redis if queue.startswith("redis") else None
            env_of = {**env, "GRAPH_DB": checkpoints, "GRAPH_QUEUE_DB": db} if checkpoints else env
            with _workers(env_of, {queue: (n, c)}, work) as procs:
                _wait_until_started(db, procs)
                ids = _enqueue(db, work, queue, n * c * threads_per_slot, checkpoints)
                on_redis.extend(ids if checkpoints else [])
                speeds[queue].append(steps / _wait_for(db, queue, after, steps, procs[queue], work))

        try:
            alternate({key: (lambda i, key=key, n=n, c=c: run(key, n, c))
                       for key, (n, c) in plan.items()}, passes)
            fake.hold_s = memory_delay
            with _workers(env, {"memory": (1, concurrency)}, work) as procs:
                _wait_until_started(db, procs)
                peaks = _memory(db, work, procs["memory"][0], sorted(memory_jobs))
        finally:
            if redis:
                from bench.redis_db import drop_thread

                for thread_id in on_redis:
                    drop_thread(redis, thread_id)
    one = speeds[f"c{concurrency}"]

    return {"delay": delay, "concurrency": concurrency, "passes": passes, "processes": [1, *counts],
            "threads_per_slot": threads_per_slot, "steps_per_s": speeds,
            "x_concurrency": [c / b for c, b in zip(one, speeds["c1"], strict=True)],
            "x_processes": {str(n): [p / o for p, o in zip(speeds[f"p{n}"], one, strict=True)]
                            for n in counts},
            "memory": {"jobs": sorted(memory_jobs), "delay": memory_delay, "vm_hwm_mb": peaks,
                       "ratio": peaks[-1] / peaks[0]},
            **({"x_redis": [r / o for r, o in zip(speeds[f"redis{concurrency}"], one,
                                                   strict=True)]} if redis else {})}


def report(r: dict[str, Any]) -> str:
    """The tables of `r` (from `measure`)."""
    c, ones = r["concurrency"], [1.0] * r["passes"]

    def speed(key: str) -> str:
        return per_pass(r["steps_per_s"][key], lambda v: f"{v:.2f}")

    def ratio(values: list[float]) -> str:
        return per_pass(values, lambda v: f"{v:.2f}")

    head = (f"fake model answering after {r['delay']} s, {r['threads_per_slot']} threads (2 steps "
            f"each) per job slot, {r['passes']} rounds alternated (cells: {pass_names(r['passes'])})")
    one = table(f"One queue worker process, concurrency 1 vs {c}; {head}",
                ["what", "steps/s", "× concurrency 1"],
                [["--concurrency 1", speed("c1"), ratio(ones)],
                 [f"--concurrency {c}", speed(f"c{c}"), ratio(r["x_concurrency"])]])
    many = table(f"Queue worker processes, each at concurrency {c}; {head}",
                 ["what", "steps/s", "× one worker"],
                 [[f"1 process × {c}", speed(f"c{c}"), ratio(ones)]]
                 + [[f"{n} processes × {c}", speed(f"p{n}"), ratio(r["x_processes"][str(n)])]
                    for n in r["processes"][1:]]
                 + ([[f"1 process × {c}, checkpoints in Redis", speed(f"redis{c}"),
                      ratio(r["x_redis"])]] if "x_redis" in r else []))
    m = r["memory"]
    memory = table(f"Peak memory (VmHWM) of one worker process at concurrency {c}, fake model "
                   f"answering after {m['delay']} s",
                   ["after jobs", "VmHWM MB", "× first"],
                   [[f"{jobs:,}", f"{mb:.1f}", f"{mb / m['vm_hwm_mb'][0]:.2f}"]
                    for jobs, mb in zip(m["jobs"], m["vm_hwm_mb"], strict=True)])
    return "\n\n".join([one, many, memory])


def main(argv: list[str] | None = None) -> None:
    """Measures and prints the report (and writes the results as JSON with `--json`)."""
    parser = cli_parser(__doc__, passes=True)
    parser.add_argument("--postgres", required=True, help="an admin URL of the PostgreSQL server")
    parser.add_argument("--redis", help="also a worker whose checkpoints are in this Redis database")
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads-per-slot", type=int, default=6)
    parser.add_argument("--memory-jobs", default="100,1000", help="job counts, comma-separated")
    parser.add_argument("--memory-delay", type=float, default=0.05)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.delay, args.concurrency, args.threads_per_slot = 0.05, 2, 1
        args.memory_jobs, args.memory_delay = "4,8", 0.0
    results = measure(args.postgres, delay=args.delay, concurrency=args.concurrency,
                      processes=args.processes, threads_per_slot=args.threads_per_slot,
                      memory_jobs=[int(n) for n in args.memory_jobs.split(",")],
                      memory_delay=args.memory_delay, redis=args.redis, passes=args.passes)
    write_json(args.json, results)
    print(report(results))


if __name__ == "__main__":
    main()
