"""The benchmark scripts keep working and clean up after themselves (tiny sizes; no timing
is asserted)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.redis_server import RedisServer


def _processes_naming(text: str) -> list[str]:
    """Command lines of the running processes that contain `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(line)
    return found


@pytest.mark.slow
@pytest.mark.postgres  # bench.run_all also measures PostgreSQL (and Redis on a private server)
def test_every_benchmark_runs_prints_its_ratios_and_leaves_nothing_behind(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bench import scratch
    from bench.run_all import main
    from tests.conftest import postgres_admin_url

    url = postgres_admin_url()
    scratch_dir = tmp_path / "scratch"
    scratch_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch_dir))  # the scripts' temporary folders go here
    monkeypatch.setattr(tempfile, "tempdir", None)  # so this process reads TMPDIR again
    monkeypatch.setenv(scratch.RUN_ENV, "test" + uuid.uuid4().hex[:8])  # this run's databases
    before = sorted(Path.cwd().iterdir())

    main(["--quick", "--postgres", url, "--redis"])

    out = capsys.readouterr().out
    for title in ("Cold start", "One step in process, default configuration", "Claim checkpoint",
                  "Storage and resume on SQLite", "Storage and resume on PostgreSQL", "threads ×",
                  "queue worker", "README Performance table"):
        assert title in out, title
    for ratio in ("÷ import floor", "÷ InMemorySaver", "÷ bare", "× anchor speed", "× one worker"):
        assert ratio in out, ratio
    assert "commits/step" in out and "peak RSS of bench.storage" in out
    assert "| what | ours | anchor | ratio | what it means for you |" in out
    from bench.redis_db import unavailable

    if unavailable() is None or os.environ.get("GRAPH_REQUIRE_REDIS") == "1":
        for redis_row in ("Storage and resume on Redis", "ours on Redis", "ours on PostgreSQL",
                          "| one step in process on Redis, same loop |",
                          "| one step in process on PostgreSQL, same loop |",
                          "| memory of one thread (`MEMORY USAGE` of its keys) after 5 / 10 steps, Redis |",
                          "to the append-only file", "--redis`",
                          "1 process × 2, checkpoints in Redis",
                          "checkpoints in Redis (queue in PostgreSQL)"):
            assert redis_row in out, redis_row
    else:
        assert "Redis rows skipped: " in out
    assert _processes_naming(str(scratch_dir)) == [], "the private Redis server still runs"
    if shutil.which("strace"):
        assert "commits n/a" not in out
    assert list(scratch_dir.iterdir()) == [], "temporary files left behind"
    assert sorted(Path.cwd().iterdir()) == before, "files left in the working directory"
    assert scratch.run_prefix().startswith("bench_test")
    assert scratch.bench_databases(url, scratch.run_prefix()) == [], "databases left on the server"


def test_commits_are_wal_syncs_after_frames_between_the_markers() -> None:
    from bench.syncs import parse

    log = """
1 fdatasync(3</w/ours.sqlite-wal>) = 0
1 fsync(9</w/sync-marker>) = 0
1 pwrite64(3</w/ours.sqlite-wal>, ""..., 24, 4152) = 24
1 pwrite64(3</w/ours.sqlite-wal>, ""..., 4096, 4176) = 4096
2 fdatasync(3</w/ours.sqlite-wal>) = 0
2 fdatasync(3</w/ours.sqlite-wal>) = 0
2 fdatasync(4</w/ours.sqlite>) = 0
2 pwrite64(3</w/ours.sqlite-wal>, ""..., 32, 0) = 32
2 fdatasync(3</w/ours.sqlite-wal>) = 0
2 pwrite64(3</w/ours.sqlite-wal>, ""..., 24, 32) = 24
2 fdatasync(3</w/ours.sqlite-wal>) = 0
1 fsync(9</w/sync-marker>) = 0
1 fdatasync(3</w/ours.sqlite-wal>) = 0
"""
    assert parse(log) == {"commits": 2, "wal_header": 1, "wal_checkpoint": 1, "db": 1, "other": 0,
                          "syncs": 5}


def test_run_all_says_the_redis_rows_were_skipped_and_why_when_valkey_is_missing(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.run_all
    import tests.redis_server

    monkeypatch.setattr(tests.redis_server, "valkey_server", lambda: None)
    monkeypatch.setattr(bench.run_all, "plan", lambda *args: {})  # no script: only the Redis decision

    bench.run_all.main(["--redis"])

    captured = capsys.readouterr()
    reason = "Redis rows skipped: valkey-server >= 8 is not installed"
    assert reason in captured.err
    before, table = captured.out.split("README Performance table", 1)
    assert reason in before and reason in table
    config = next(line for line in table.splitlines() if line.startswith("Measured with"))
    assert "--redis" not in config, "the configuration names a Redis it did not measure"


def test_a_threads_redis_keys_are_told_apart_from_other_threads_and_server_wide_keys() -> None:
    from bench.redis_db import _owner

    assert _owner("checkpoint:t1:__empty__:1f0") == ("t1", "langgraph")
    assert _owner("checkpoint_latest:t1:__empty__") == ("t1", "langgraph")
    assert _owner("checkpoint_write:t1:__empty__:1f0:task:0") == ("t1", "langgraph")
    assert _owner("write_keys_zset:t1:__empty__:1f0") == ("t1", "langgraph")
    assert _owner("mandapi-resume:log:t1") == ("t1", "log")
    assert _owner("mandapi-resume:ledger:t1") == ("t1", "ours")
    assert _owner("mandapi-resume:digest:t1\0\0001f0") == ("t1", "ours")
    assert _owner("mandapi-resume:fsync") is None
    assert _owner("checkpoint") is None
    assert _owner("someone:else:t1") is None


def test_window_and_step_cost_measure_redis_and_delete_their_threads_keys(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        redis_server: RedisServer) -> None:
    import redis

    from bench import scratch, step_cost, window

    monkeypatch.setenv(scratch.RUN_ENV, "test" + uuid.uuid4().hex[:8])
    window.main(["--steps", "2,3", "--redis", redis_server.url])
    results = step_cost.measure(2, redis=redis_server.url)

    out = capsys.readouterr().out
    assert "ours, Redis memory, keep 10" in out and "ours, Redis AOF appended, keep all" in out
    assert len(results["summaries"]["redis"]) == 2 and len(results["ratios"]["redis/memory"]) == 2
    assert "ours on Redis" in step_cost.report(results)
    with redis.Redis.from_url(redis_server.url) as client:
        left = list(client.scan_iter(match=f"*{scratch.run_prefix()}*", count=1000))
    assert left == [], "the benchmark's threads were left on the server"
