"""Workers through procrastinate on PostgreSQL: several steps at once per worker, one per
thread, nothing double-counted, enqueue idempotent, no task text in the logs."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PYTHON, run_cli, subprocess_env
from tests.fake_mandapi import FakeMandApi, task_of
from tests.forked import ForkedProcess, forkserver

pytest.importorskip("procrastinate")
THREADS, WORKERS = 60, 3
MARKER = "ZEBRA-7f3c-MARKER"
"""Task text that must never reach a log."""
PROCRASTINATE = os.path.join(os.path.dirname(sys.executable), "procrastinate")
WORKER_ARGS = ["--app=graph.queue.app", "worker"]
"""`procrastinate WORKER_ARGS ...` starts a worker. The console script runs in a fresh
interpreter where its start is what a test is about (the first misconfigured worker, the
logging worker); the other workers are real processes forked from the preloaded
forkserver (`tests/forked.py`, `python -m procrastinate`), which skips the interpreter
start and procrastinate's imports (about 2.5 s of CPU each)."""
Worker = subprocess.Popen | ForkedProcess


def _forked_worker(argv: list[str], env: dict[str, str], cwd: Path) -> ForkedProcess:
    """`procrastinate WORKER_ARGS argv` forked from the preloaded forkserver."""
    return ForkedProcess(forkserver(), "procrastinate", [*WORKER_ARGS, *argv], env, cwd)


class CountingFake(FakeMandApi):
    """The fake MandAPI, also counting requests in flight (arrived, not yet answered)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._count_lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most_at_once = 0
        self.same_thread_overlaps: list[str] = []

    def _record(self, path: str, headers: dict[str, str], body: bytes) -> None:
        super()._record(path, headers, body)
        task = task_of(json.loads(body))
        with self._count_lock:
            self.now[task] += 1
            if self.now[task] > 1:
                self.same_thread_overlaps.append(task)
            self.most_at_once = max(self.most_at_once, sum(self.now.values()))

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._count_lock:
            self.now[task_of(body)] -= 1
        return super()._answer(body)


def _tasks(path: Path, ids: list[str], text: str = "shipping?") -> Path:
    path.write_text("".join(json.dumps({"thread_id": i, "task": f"[{i}] {text}"}) + "\n" for i in ids))
    return path


def _batch(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str],
           *argv: str) -> tuple[int, str]:
    """`python -m graph.batch ARGV` in process (`main(argv)`), with the environment `env` adds:
    its exit code and its stdout (stderr appended after a blank line). Enqueueing is the entry
    point's behaviour, not a process's."""
    from graph.batch import main as batch_main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = batch_main(list(argv))
    shown = capsys.readouterr()
    return code, f"{shown.out}\n{shown.err}"


def _statuses(db: str) -> dict[str, str]:
    from graph.store import open_store
    from graph.threads.history import list_threads

    with open_store(db, create=False, read_only=True) as store:
        return {t["thread_id"]: t["status"] for t in list_threads(store)}


def _wait_done(db: str, count: int, workers: Sequence[Worker], timeout_s: float = 180,
               recover: bool = False) -> None:
    from graph.fleet.jobs import recover_stalled

    deadline = time.monotonic() + timeout_s
    while True:
        statuses = _statuses(db)
        if len(statuses) == count and set(statuses.values()) <= {"done"}:
            return
        assert time.monotonic() < deadline, statuses
        assert all(w.poll() is None for w in workers), "a worker died"
        if recover:
            recover_stalled(db, seconds=2)  # what the periodic job does each minute
        time.sleep(0.5)


def _stop(workers: Sequence[Worker]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.terminate()
    for worker in workers:
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def test_procrastinate_job_records_show_our_jobs_by_thread_id_only(caplog) -> None:
    from procrastinate.jobs import Job

    from graph.fleet.queue_logs import ADVANCE_TASK, redact_procrastinate

    redact_procrastinate("w-redact")
    job = Job(id=7, queue="default", lock="t1", queueing_lock="thread:t1", task_name=ADVANCE_TASK,
              task_kwargs={"cap_id": None, "fields": {"task": MARKER}, "live": False,
                           "thread_id": "t1"})
    other = Job(id=8, queue="default", lock=None, queueing_lock=None, task_name="other",
                task_kwargs={"timestamp": 5})
    caplog.set_level(logging.INFO)
    loggers = [logging.getLogger(n) for n in ("procrastinate.worker.w-redact", "procrastinate.worker",
                                              "procrastinate.jobs")]
    loggers[0].info(f"Starting job {job.call_string}", extra={"job": job.log_context()})
    loggers[1].info(f"Job {job.call_string} ended with status: Success",
                    extra={"job": job.log_context(), "result": {"thread_id": "t1"}})
    loggers[2].info("Deferred 2 jobs", extra={"jobs": [job.log_context(), other.log_context()]})
    loggers[0].info(f"Waiting for job to finish: worker: {job.call_string} (started 1.0 s ago)")
    loggers[0].info(f"Starting job {other.call_string}", extra={"job": other.log_context()})
    records = caplog.records
    dumped = [json.dumps({**r.__dict__, "message": r.getMessage()}, default=repr) for r in records]
    assert len(dumped) == 5 and not [d for d in dumped if MARKER in d]
    assert records[0].getMessage() == f"Starting job {ADVANCE_TASK}[7](thread_id='t1')"
    assert records[2].jobs[0]["task_kwargs"] == {"thread_id": "t1"}  # type: ignore[attr-defined]
    assert records[2].jobs[1]["task_kwargs"] == {"timestamp": 5}  # type: ignore[attr-defined]
    assert records[3].getMessage() == f"Waiting for job to finish: worker: {ADVANCE_TASK}[7](…)"
    assert records[4].getMessage() == "Starting job other[8](timestamp=5)"


@pytest.mark.postgres
def test_running_jobs_never_share_a_store_so_the_thread_lock_excludes_the_second(pg) -> None:
    from graph.errors import BusyError
    from graph.fleet.worker import StorePool

    pool = StorePool(pg.db)
    with pool.lease() as first, pool.lease() as second:
        assert first is not second and first.keeps_pool and first.answers()
        with first.locks.hold("t1"):
            with first.locks.hold("t1"):  # a PostgreSQL session re-enters its own lock ...
                pass
            with pytest.raises(BusyError), second.locks.hold("t1"):  # ... another never does
                pass
    with pool.lease() as again:  # kept for the next job, not opened anew
        assert again in (first, second)
    assert pool.opened == 2
    with pytest.raises(RuntimeError), pool.lease() as failed:
        raise RuntimeError("a bug in a step")
    assert failed.sql.conn.closed  # type: ignore[attr-defined]
    pool.close()
    assert first.sql.conn.closed and second.sql.conn.closed  # type: ignore[attr-defined]


def test_a_pool_keeps_only_stores_that_say_they_are_worth_keeping(tmp_path) -> None:
    from graph.fleet.worker import StorePool

    pool = StorePool(str(tmp_path / "c.sqlite"))  # keep=None: each store decides (keeps_pool)
    with pool.lease() as first:
        assert first.keeps_pool is False and first.answers()
    with pool.lease() as second:
        assert second is not first
    assert pool.opened == 2
    pool.close()


@pytest.mark.postgres
def test_a_kept_store_whose_session_died_is_replaced_before_it_is_lent(pg) -> None:
    import psycopg

    from graph.fleet.worker import StorePool

    pool = StorePool(pg.db)
    with pool.lease() as store:
        pass
    with psycopg.connect(pg.admin_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                      (pg.dbname,))
    with pool.lease() as fresh:
        assert fresh is not store and fresh.ledger.read("nobody") is None
    assert pool.opened == 2
    pool.close()


@pytest.mark.postgres
def test_enqueueing_threads_twice_makes_one_job_chain_each_and_says_so(
        pg, tmp_path, capsys, caplog, monkeypatch) -> None:
    import psycopg

    from graph.batch import main as batch_main

    monkeypatch.setenv("GRAPH_DB", pg.db)
    caplog.set_level(logging.INFO)
    tasks = _tasks(tmp_path / "tasks.jsonl", ["e1", "e2"], text=MARKER)
    assert batch_main([str(tasks), "--enqueue", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"enqueued": 2, "already_queued": 0, "exit_code": 0}
    more = _tasks(tmp_path / "more.jsonl", ["e1", "e2", "e3"], text=MARKER)
    assert batch_main([str(more), "--enqueue"]) == 0
    assert capsys.readouterr().out.strip() == (
        "enqueued 1 thread(s); 2 already had a step waiting, left as they were")
    with psycopg.connect(pg.db) as conn:
        rows = conn.execute("SELECT args->>'thread_id', status FROM procrastinate_jobs "
                            "ORDER BY id").fetchall()
    assert rows == [("e1", "todo"), ("e2", "todo"), ("e3", "todo")]
    deferred = [r for r in caplog.records if r.name == "procrastinate.jobs"]
    assert deferred, "procrastinate's INFO records were not captured"
    assert not [r for r in caplog.records
                if MARKER in json.dumps({**r.__dict__, "m": r.getMessage()}, default=repr)]


@pytest.mark.postgres
def test_a_stalled_step_whose_thread_waits_again_is_failed_and_another_is_requeued(pg) -> None:
    import psycopg

    from graph.fleet.jobs import _next_step, _recover, ensure_schema, make_app

    ensure_schema(pg.db)
    app = make_app(pg.db)
    args = {"fields": {}, "live": False, "cap_id": None}

    async def scenario() -> int:
        async with app.open_async():
            for thread_id in ("s1", "s2"):
                await _next_step(app, thread_id, "default").defer_async(thread_id=thread_id, **args)
            worker_id = await app.job_manager.register_worker()
            for _ in range(2):  # both taken by a worker that then goes silent
                assert await app.job_manager.fetch_job(queues=None, worker_id=worker_id)
            assert await _next_step(app, "s1", "default").defer_async(thread_id="s1", **args)
            await asyncio.sleep(0.1)
            return await _recover(app, seconds=0.01)

    assert asyncio.run(scenario()) == 1
    with psycopg.connect(pg.db) as conn:
        rows = conn.execute("SELECT args->>'thread_id', status::text FROM procrastinate_jobs "
                            "ORDER BY id").fetchall()
    assert rows == [("s1", "failed"), ("s2", "todo"), ("s1", "todo")]


@pytest.mark.postgres
@pytest.mark.parametrize("waiting", [False, True], ids=["before-its-retry", "before-marked-failed"])
def test_a_stalled_step_that_finishes_during_its_recovery_is_left_as_it_is(pg, waiting) -> None:
    """Under load a worker's heartbeat came late: the recovery listed its job as stalled,
    then the worker finished it, and procrastinate's SQL refused the recovery's next call
    ("Job was not found or ..."), failing the 60-thread queue test. Without a waiting job
    the refusal comes from `retry_job` ("has an invalid status to retry"); with the
    thread's next job waiting, the retry meets its queueing lock and marking the stalled
    job failed is refused ('not in "doing" or "todo" status')."""
    import psycopg
    from procrastinate.jobs import Status

    from graph.fleet.jobs import _next_step, _recover, ensure_schema, make_app

    ensure_schema(pg.db)
    app = make_app(pg.db)
    args = {"fields": {}, "live": False, "cap_id": None}

    async def scenario() -> int:
        async with app.open_async():
            await _next_step(app, "f1", "default").defer_async(thread_id="f1", **args)
            worker_id = await app.job_manager.register_worker()
            job = await app.job_manager.fetch_job(queues=None, worker_id=worker_id)
            if waiting:
                assert await _next_step(app, "f1", "default").defer_async(thread_id="f1", **args)
            await asyncio.sleep(0.1)
            name = "finish_job" if waiting else "get_stalled_jobs"
            call = getattr(app.job_manager, name)
            finish = app.job_manager.finish_job

            async def finished_meanwhile(*a: Any, **kw: Any) -> Any:
                if not waiting:  # the listing comes first, then the slow worker finishes
                    listed = await call(*a, **kw)
                await finish(job, status=Status.SUCCEEDED, delete_job=False)
                return listed if not waiting else await call(*a, **kw)

            setattr(app.job_manager, name, finished_meanwhile)
            return await _recover(app, seconds=0.01)

    assert asyncio.run(scenario()) == 0
    with psycopg.connect(pg.db) as conn:
        rows = conn.execute("SELECT args->>'thread_id', status::text FROM procrastinate_jobs "
                            "ORDER BY id").fetchall()
    assert rows == [("f1", "succeeded"), *([("f1", "todo")] if waiting else [])]


@pytest.mark.slow
@pytest.mark.postgres
def test_one_worker_runs_steps_of_several_threads_at_once_one_per_thread_and_logs_no_task_text(
        pg, tmp_path, monkeypatch, capsys) -> None:
    """Concurrency 4 on 8 threads, a model holding each request 0.5 s: requests overlap
    (seen by the fake server, no clock assert), a thread's never do, even with an extra
    unlocked job for two threads, and the INFO log (every record, whole) never holds the
    task text."""
    import psycopg

    from graph.fleet.jobs import ensure_schema, make_app
    from graph.fleet.queue_logs import ADVANCE_TASK

    ids = [f"c{i}" for i in range(8)]
    log = tmp_path / "worker-log.jsonl"
    with CountingFake(tmp_path / "requests.jsonl", hold_s=0.5) as fake:
        ours = {"GRAPH_DB": pg.db, "MANDAPI_API_KEY": "sk-queue-0000000", "MANDAPI_MODEL_ID": "m",
                "MANDAPI_BASE_URL": fake.base_url}
        env = subprocess_env(**ours)
        tasks = _tasks(tmp_path / "tasks.jsonl", ids, text=f"{MARKER} shipping?")
        code, shown = _batch(monkeypatch, capsys, ours, str(tasks), "--enqueue", "--live")
        assert code == 0, shown
        ensure_schema(pg.db)
        app = make_app(pg.db)
        with app.open():  # an extra job without procrastinate's lock: only ours guards it
            for thread_id in ids[:2]:
                fields = {"task": f"[{thread_id}] {MARKER} shipping?"}
                app.configure_task(ADVANCE_TASK).defer(thread_id=thread_id, fields=fields, live=True,
                                                       cap_id=None)
        stderr = tmp_path / "worker-stderr.txt"
        with stderr.open("wb") as err:
            worker = subprocess.Popen([PYTHON, "-m", "tests.queue_worker_child", str(log), "worker",
                                       "--concurrency=4", "--name=w4"], env=env, cwd=tmp_path,
                                      stdout=subprocess.DEVNULL, stderr=err)
        try:
            _wait_done(pg.db, len(ids), [worker])
            with psycopg.connect(pg.db) as conn:  # the worker keeps its stores: one per slot
                kept = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                                    "application_name = 'mandapi-resume'", (pg.dbname,)).fetchone()[0]
        finally:
            _stop([worker])
        requests = fake.requests()
    assert fake.most_at_once >= 2, "no two model requests were ever in flight together"
    assert fake.same_thread_overlaps == []
    assert 1 <= kept <= 4
    for thread_id in ids:
        attempts, claimed, maximum = pg.ledger_row(thread_id)
        sent = [r for r in requests if f"[{thread_id}]" in task_of(r["body"])]
        assert len(sent) == claimed == attempts == 2 <= maximum, (thread_id, len(sent), claimed)
    text = log.read_text()
    assert f"{ADVANCE_TASK}[" in text and '"action": "thread_step"' in text
    assert MARKER not in text and MARKER not in stderr.read_text()


@pytest.mark.slow
@pytest.mark.postgres
def test_three_queue_workers_share_sixty_threads_and_survive_a_killed_worker(
        pg, tmp_path, monkeypatch, capsys) -> None:
    workers: list[ForkedProcess] = []
    try:
        with FakeMandApi(tmp_path / "requests.jsonl", hold_s=0.05) as fake:
            ours = {"GRAPH_DB": pg.db, "MANDAPI_API_KEY": "sk-queue-0000000", "MANDAPI_MODEL_ID": "m",
                    "MANDAPI_BASE_URL": fake.base_url}
            env = subprocess_env(**ours, GRAPH_QUEUE_HEARTBEAT_S="0.5", GRAPH_QUEUE_STALLED_S="2")
            tasks = _tasks(tmp_path / "tasks.jsonl", [f"q{i}" for i in range(THREADS)])
            code, shown = _batch(monkeypatch, capsys, ours, str(tasks), "--enqueue", "--live")
            assert code == 0, shown
            for n in range(WORKERS):
                workers.append(_forked_worker([f"--name=w{n}", "--concurrency=2"], env, tmp_path))
            deadline = time.monotonic() + 120
            while len(fake.requests()) < THREADS // 2:
                assert time.monotonic() < deadline, "workers made no progress"
                time.sleep(0.05)
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait(10)
            _wait_done(pg.db, THREADS, workers[1:], timeout_s=180, recover=True)
            requests = fake.requests()
    finally:
        _stop(workers)
    for i in range(THREADS):
        sent = [r for r in requests if f"[q{i}]" in task_of(r["body"])]
        attempts, claimed, maximum = pg.ledger_row(f"q{i}")
        assert len(sent) <= claimed <= attempts <= maximum == 4, (i, len(sent), claimed)
        # One writer at a time: a thread's requests never overlap (each is held 0.05 s).
        times = sorted(r["at"] for r in sent)
        assert all(b - a >= 0.045 for a, b in zip(times, times[1:], strict=False)), (i, times)
    # Requests received == attempts counted, except at most one per job slot of the killed
    # worker (concurrency 2) for a step it had claimed but not yet sent.
    lost = sum(pg.ledger_row(f"q{i}")[1] for i in range(THREADS)) - len(requests)
    assert 0 <= lost <= 2


def test_enqueueing_a_thread_that_exists_with_another_task_is_refused_before_any_job_is_stored(
        pg, tmp_path, capsys, monkeypatch) -> None:
    """A fresh user's report: `--enqueue` said `enqueued 3 thread(s)`, exit 0, and the workers
    then refused one (`identity_mismatch`), seen only in their log."""
    import psycopg

    from graph.batch import main as batch_main

    monkeypatch.setenv("GRAPH_DB", pg.db)
    run_cli(["--thread", "i1", "--task", "an older task", "--db", pg.db, "--once"])
    tasks = _tasks(tmp_path / "tasks.jsonl", ["i0", "i1", "i2"])
    capsys.readouterr()
    assert batch_main([str(tasks), "--enqueue", "--json"]) == 4
    out = json.loads(capsys.readouterr().out)
    assert out["error_code"] == "identity_mismatch" and "'i1'" in out["error"], out
    assert "'i0'" not in out["error"] and "nothing was queued" in out["error"]
    with psycopg.connect(pg.db) as conn:
        found = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        jobs = conn.execute("SELECT count(*) FROM procrastinate_jobs").fetchone() if found[0] else (0,)
    assert jobs == (0,)


def test_enqueueing_a_task_that_holds_the_api_key_is_refused_before_any_job_is_stored(
        pg, tmp_path, capsys, monkeypatch) -> None:
    import psycopg

    from graph.batch import main as batch_main

    key = "sk-QUEUEMARKER-91ab"
    monkeypatch.setenv("GRAPH_DB", pg.db)
    monkeypatch.setenv("MANDAPI_API_KEY", key)
    monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-large")
    tasks = _tasks(tmp_path / "tasks.jsonl", ["k1", "k2"])
    tasks.write_text(tasks.read_text().replace("shipping?", f"my key is {key}", 1))
    assert batch_main([str(tasks), "--enqueue", "--live"]) == 2
    shown = capsys.readouterr()
    assert "contains the API key" in shown.err and key not in shown.out + shown.err
    with psycopg.connect(pg.db) as conn:
        found = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        jobs = conn.execute("SELECT count(*) FROM procrastinate_jobs").fetchone() if found[0] else (0,)
    assert jobs == (0,)
    assert key.encode() not in pg.dump()


@pytest.mark.postgres
def test_a_redis_checkpoint_database_runs_its_queue_in_postgresql(
        pg, tmp_path, monkeypatch, capsys) -> None:
    """Checkpoints in Redis, the queue in PostgreSQL (`--queue-db`, `GRAPH_QUEUE_DB`): a
    worker runs every thread to done, each request counted once in the Redis ledger, and
    nothing of ours is written to the queue's database but procrastinate's jobs. A worker
    whose `GRAPH_DB` is another Redis database ends the jobs `identity_mismatch`: each
    names the database it was enqueued for (`Store.store_id`)."""
    import psycopg

    from tests.redis_server import start_server

    pytest.importorskip("redis")
    server, other = start_server(tmp_path / "redis"), start_server(tmp_path / "other")
    ids = [f"rq{i}" for i in range(4)]
    worker = None
    try:
        with FakeMandApi(tmp_path / "requests.jsonl") as fake:
            ours = {"GRAPH_DB": server.url, "MANDAPI_API_KEY": "sk-queue-0000000", "MANDAPI_MODEL_ID": "m",
                    "MANDAPI_BASE_URL": fake.base_url}
            env = subprocess_env(**ours)
            tasks = _tasks(tmp_path / "tasks.jsonl", ids)
            code, shown = _batch(monkeypatch, capsys, ours, str(tasks), "--enqueue", "--live", "--json")
            assert code == 2 and "--queue-db" in json.loads(shown.split("\n")[0])["error"], shown
            code, shown = _batch(monkeypatch, capsys, ours, str(tasks), "--enqueue", "--live",
                                 "--queue-db", pg.db)
            assert code == 0, shown
            # a worker whose GRAPH_DB is another database: each job ends identity_mismatch
            # there, creating nothing (the jobs were enqueued for `server`)
            wrong = {**env, "GRAPH_QUEUE_DB": pg.db, "GRAPH_DB": other.url}
            draining = _forked_worker(["--name=wrong", "--one-shot"], wrong, tmp_path)
            _, drained_err = draining.communicate(timeout=120)
            assert draining.returncode == 0, drained_err[-2000:]
            import redis as redis_client

            from graph.store.redis import keys
            assert not redis_client.Redis.from_url(other.url).keys(f"{keys.PREFIX}ledger:*")
            assert fake.requests() == []
            with psycopg.connect(pg.db) as conn:
                results = conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs "
                                       "WHERE task_name = 'graph.advance_thread' GROUP BY status"
                                       ).fetchall()
            assert results == [("succeeded", len(ids))], results  # each chain ended there
            assert drained_err.count("identity_mismatch") >= len(ids), drained_err[-3000:]
            code, shown = _batch(monkeypatch, capsys, ours, str(tasks), "--enqueue", "--live",
                                 "--queue-db", pg.db)
            assert code == 0, shown
            worker = _forked_worker(["--name=wr", "--concurrency=2"],
                                    {**env, "GRAPH_QUEUE_DB": pg.db}, tmp_path)
            _wait_done(server.url, len(ids), [worker])
            requests = fake.requests()
        client = redis_client.Redis.from_url(server.url)
        for thread_id in ids:
            sent = [r for r in requests if f"[{thread_id}]" in task_of(r["body"])]
            attempts, claimed = (int(v) for v in client.hmget(keys.ledger_key(thread_id),
                                                                "attempts", "claimed"))
            assert len(sent) == claimed == attempts == 2, (thread_id, len(sent), claimed)
        with psycopg.connect(pg.db) as conn:
            ours = conn.execute("SELECT count(*) FROM information_schema.tables WHERE "
                                "table_name IN ('attempt_ledger', 'attempt_log', "
                                "'checkpoints')").fetchone()[0]
            jobs = dict(conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs "
                                     "GROUP BY status").fetchall())
        assert ours == 0, "the checkpoints and the ledger stay in Redis"
        assert set(jobs) == {"succeeded"} and jobs["succeeded"] >= 3 * len(ids), jobs
    finally:
        if worker is not None:
            _stop([worker])
        server.stop()
        other.stop()


@pytest.mark.postgres
def test_a_misconfigured_worker_exits_2_naming_the_variable_and_takes_no_job(pg, tmp_path) -> None:
    """A Redis `GRAPH_DB` without `GRAPH_QUEUE_DB` retried the connection forever; a worker
    without `GRAPH_DB`, or with one no step can open, took every job and ended each chain;
    an unreachable queue was exit 1 after procrastinate's 30 s pool timeout. Each now ends
    at once, exit 2, naming what is wrong. The first runs the console script in a fresh
    interpreter (as a user starts it); the others are forked (`WORKER_ARGS`)."""
    from graph.fleet.jobs import ensure_schema, make_app
    from graph.fleet.queue_logs import ADVANCE_TASK

    ensure_schema(pg.db)
    with make_app(pg.db).open() as app:
        app.configure_task(ADVANCE_TASK).defer(thread_id="m1", fields={"task": "x"}, live=False,
                                               cap_id=None)
    dead = "postgresql://postgres@127.0.0.1:1/x"
    cases = [({"GRAPH_DB": "redis://127.0.0.1:1/0"}, "usage", "GRAPH_QUEUE_DB"),
             ({"GRAPH_QUEUE_DB": pg.db}, "usage", "needs GRAPH_DB"),
             ({"GRAPH_QUEUE_DB": dead, "GRAPH_DB": pg.db}, "db_unreachable", "127.0.0.1:1"),
             ({"GRAPH_QUEUE_DB": f"{pg.db}?connect_timeout=abc"}, "db_unreachable", "queue"),
             ({"GRAPH_QUEUE_DB": "postgresql://"}, "usage", "names no database"),
             ({"GRAPH_QUEUE_DB": pg.db, "GRAPH_DB": "redis://127.0.0.1:1/3"}, "usage", "database 0"),
             ({"GRAPH_QUEUE_DB": pg.db, "GRAPH_DB": "redis://127.0.0.1:1/0"}, "db_unreachable",
              "Redis")]
    for n, (extra, code, named) in enumerate(cases):
        env = subprocess_env(**extra)
        if n == 0:
            done = subprocess.run([PROCRASTINATE, *WORKER_ARGS, "--name=bad"], env=env, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=120)
            returncode, stderr = done.returncode, done.stderr
        else:
            worker = _forked_worker(["--name=bad"], env, tmp_path)
            _, stderr = worker.communicate(timeout=120)
            returncode = worker.returncode
        assert returncode == 2, (extra, stderr[-2000:])
        assert f"error ({code})" in stderr and named in stderr, stderr[-2000:]
    import psycopg

    with psycopg.connect(pg.db) as conn:
        statuses = conn.execute("SELECT status::text FROM procrastinate_jobs").fetchall()
    assert statuses == [("todo",)], "the job waits for a worker that can run it"


@pytest.mark.postgres
def test_enqueue_refuses_an_unreachable_queue_or_a_missing_queue_package_with_exit_2(
        pg, tmp_path, capsys, monkeypatch) -> None:
    """Both were other codes: an unreachable queue `db_lost` (exit 6, which schedulers
    retry), a malformed queue URL and procrastinate not installed exit 1."""
    import psycopg

    from graph.batch import main as batch_main

    tasks = _tasks(tmp_path / "tasks.jsonl", ["u1"])
    for queue, code in [("postgresql://postgres@127.0.0.1:1/x", "db_unreachable"),
                        ("postgresql://%zz", "db_unreachable"), ("postgresql://", "usage"),
                        (f"{pg.db}?connect_timeout=abc", "db_unreachable")]:
        assert batch_main([str(tasks), "--db", pg.db, "--enqueue", "--queue-db", queue,
                           "--json"]) == 2
        assert json.loads(capsys.readouterr().out)["error_code"] == code
    monkeypatch.setitem(sys.modules, "procrastinate", None)  # as without the postgres extra
    assert batch_main([str(tasks), "--db", pg.db, "--enqueue", "--json"]) == 2
    assert "postgres extra" in json.loads(capsys.readouterr().out)["error"]
    with psycopg.connect(pg.db) as conn:
        tables = conn.execute("SELECT count(*) FROM information_schema.tables WHERE "
                              "table_schema = 'public'").fetchone()[0]
    assert tables == 0, "nothing was written to the checkpoint database"
