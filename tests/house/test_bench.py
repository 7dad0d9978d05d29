"""The benchmark scripts keep working and clean up after themselves (tiny sizes; no timing
is asserted).

Each script runs in process through its `main(argv)`, with the arguments
`bench.run_all --quick` gives it, so every variant of every script runs end to end and
each printed ratio is checked; `bench.run_all` itself, whose promise is one process per
script (its peak memory), runs one script as a process.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import pytest

from bench.run_all import SCRIPTS
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


def _children() -> set[int]:
    """Ids of this process's child processes (zombies included)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


@dataclass
class Scratch:
    """Where a benchmark may write, and what it must leave as it found it."""

    folder: Path
    """`$TMPDIR` of the run: every temporary folder of the scripts goes here."""
    cwd: Path
    """The working directory, empty."""
    children: set[int]
    """This process's child processes before the run."""

    def left_behind(self, postgres: str | None, redis: str | None) -> list[str]:
        """Temporary files, files in the working directory, child processes, this run's
        databases and Redis keys still there."""
        from bench import scratch

        left = [str(path) for path in (*self.folder.iterdir(), *self.cwd.iterdir())]
        left += [f"process {pid}" for pid in _children() - self.children]
        if postgres:
            left += scratch.bench_databases(postgres, scratch.run_prefix())
        if redis:
            import redis as redis_py

            with redis_py.Redis.from_url(redis) as client:
                left += [key.decode() for key in client.scan_iter(match=f"*{scratch.run_prefix()}*",
                                                                  count=1000)]
        return left


@pytest.fixture
def bench_scratch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Scratch:
    """A run of its own: `$TMPDIR`, working directory and database names of this test only."""
    from bench import scratch

    folder, cwd = tmp_path / "scratch", tmp_path / "cwd"
    folder.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))  # the scripts' temporary folders go here
    monkeypatch.setattr(tempfile, "tempdir", None)  # so this process reads TMPDIR again
    monkeypatch.setenv(scratch.RUN_ENV, "test" + uuid.uuid4().hex[:8])  # this run's databases
    assert scratch.run_prefix().startswith("bench_test")
    monkeypatch.chdir(cwd)
    return Scratch(folder, cwd, _children())


def _redis_url(request: pytest.FixtureRequest) -> str | None:
    """The session's Redis server, or None where none can start (and none is required)."""
    from bench.redis_db import unavailable

    if unavailable() is None or os.environ.get("GRAPH_REQUIRE_REDIS") == "1":
        return str(request.getfixturevalue("redis_url"))
    return None


def _rows(out: str, title: str) -> list[dict[str, str]]:
    """The rows of the table printed under the line containing `title`: column -> cell.

    The columns are those of the dashes under the header.
    """
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if title in line)
    rule = next(n for n in range(start, len(lines)) if re.fullmatch(r"[- ]+", lines[n]))
    spans = list(pairwise([m.start() for m in re.finditer(r"-+", lines[rule])] + [None]))

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    header, rows = cells(lines[rule - 1]), []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        rows.append(dict(zip(header, cells(line), strict=True)))
    return rows


def _ratios(cell: str) -> list[float]:
    """The ratios of one cell, one per pass (`1.32 / 1.18`); fails unless each is a number.

    A ratio may print as 0.00 (`python -c pass` beside the import floor on a busy host).
    """
    values = [float(value) for value in cell.split(" / ")]
    assert values and all(math.isfinite(v) and v >= 0 for v in values), cell
    return values


class Ratios(NamedTuple):
    """A printed table whose `column` gives a ratio in each row named by `rows` (first cells):
    one per pass, or one in all when not `per_pass`."""

    title: str
    column: str
    rows: tuple[str, ...]
    per_pass: bool = True


def _expected(script: str, redis: bool) -> tuple[list[Ratios], list[str]]:
    """The ratio tables `script` prints, and the README rows made from its results."""
    from bench import startup, step_cost

    servers = ("postgres", "redis") if redis else ("postgres",)
    backends = ("SQLite", "PostgreSQL", "Redis") if redis else ("SQLite", "PostgreSQL")
    if script == "startup":
        return ([Ratios("Cold start, whole process", "÷ import floor",
                        (*startup.LABELS.values(), *startup.POSTGRES_LABELS.values()))],
                ["| cold start of one `--once` step (whole process) |",
                 "| an invocation with nothing to do (thread done) |"])
    if script == "step_cost":
        labels = tuple(label for name, label in step_cost.LABELS.items()
                       if name not in step_cost.SERVERS or name in servers)
        return ([Ratios("One step in process, default configuration", column, labels)
                 for column in ("÷ InMemorySaver", "CPU ÷ InMemorySaver")]
                + [Ratios("Claim checkpoint", "ratio", (step_cost.LABELS["ours"],
                                                        step_cost.LABELS["ours_no_claim"]))],
                ["| one step in process, default `--context-tokens`", "The claim checkpoint costs **",
                 "| one step in process on PostgreSQL, same loop |"]
                + (["| one step in process on Redis, same loop |"] if redis else []))
    if script == "storage":
        return ([Ratios(f"Storage and resume on {backend}", "÷ bare", ("ours", "bare"), per_pass=False)
                 for backend in backends],
                [f"| database after 1 / 2 steps, {backend} |" for backend in backends[:2]]
                + [f"| `get_state` / full history after 2 steps, {backend} |" for backend in backends]
                + (["| memory of one thread (`MEMORY USAGE` of its keys) after 1 / 2 steps, Redis |",
                    "MB to the append-only file"] if redis else []))
    if script == "threads":
        labels = ("InMemorySaver, graph compiled once (anchor)",
                  "LangGraph's SqliteSaver, synchronous=FULL (floor)", "ours: advance on one SQLite store")
        return ([Ratios("2 threads × 2 steps, one process", column, labels)
                 for column in ("× anchor speed", "× anchor CPU speed")],
                ["| 2 threads × 2 steps, one process, SQLite |", "| one `--once` step, peak RSS |"])
    assert script == "workers", script
    return ([Ratios("One queue worker process, concurrency 1 vs 2", "× concurrency 1",
                    ("--concurrency 1", "--concurrency 2")),
             Ratios("Queue worker processes, each at concurrency 2", "× one worker",
                    ("1 process × 2", "2 processes × 2")
                    + (("1 process × 2, checkpoints in Redis",) if redis else ())),
             Ratios("Peak memory (VmHWM) of one worker process", "× first", ("4", "8"), per_pass=False)],
            ["| one queue worker process, `--concurrency 2` vs 1,",
             "| 2 worker processes × `--concurrency 2`,", "| worker peak memory (VmHWM) after 4 / 8 jobs |"]
            + (["checkpoints in Redis (queue in PostgreSQL)"] if redis else []))


NEEDS_POSTGRES = ("startup", "step_cost", "storage", "workers")
"""The scripts `bench.run_all --postgres` also runs on PostgreSQL (`bench.workers` only there)."""
NEEDS_REDIS = ("step_cost", "storage", "workers")
"""The scripts `bench.run_all --redis` also runs on Redis."""


@pytest.mark.slow
@pytest.mark.parametrize("script", [
    pytest.param(name, marks=[pytest.mark.postgres] if name in NEEDS_POSTGRES else [])
    for name in SCRIPTS])
def test_every_benchmark_runs_prints_its_ratios_and_leaves_nothing_behind(
        script: str, bench_scratch: Scratch, capsys: pytest.CaptureFixture[str],
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    import importlib

    from bench.readme_table import render
    from bench.run_all import plan
    from tests.conftest import postgres_admin_url

    url = postgres_admin_url() if script in NEEDS_POSTGRES else None
    redis = _redis_url(request) if script in NEEDS_REDIS else None
    bench_scratch.children = _children()  # the session's Redis server (maybe just started) is not ours
    results_path = tmp_path / f"{script}.json"

    importlib.import_module(f"bench.{script}").main([*plan(True, url, False, redis)[script],
                                                     "--json", str(results_path)])

    out = capsys.readouterr().out
    results = json.loads(results_path.read_text())
    tables, readme_rows = _expected(script, redis is not None)
    for expected in tables:
        rows = _rows(out, expected.title)
        for label in expected.rows:
            cells = [row[expected.column] for row in rows if next(iter(row.values())) == label]
            assert cells, (expected, label)
            for cell in cells:
                assert len(_ratios(cell)) == (results["passes"] if expected.per_pass else 1), (expected, cell)
    readme = render({script: results}, {script: None}, "configuration")
    for row in readme_rows:
        assert row in readme, row
    if script == "step_cost":
        assert results["passes"] == 2, "a second pass starts from scratch: new databases, new Redis threads"
        assert "commits/step" in out
        if shutil.which("strace"):
            assert "commits n/a" not in readme
    assert bench_scratch.left_behind(url, redis) == [], "left behind"


@pytest.mark.slow
@pytest.mark.postgres
def test_run_all_runs_a_script_as_its_own_process_prints_the_readme_table_and_leaves_nothing_behind(
        bench_scratch: Scratch, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.redis_db import unavailable
    from bench.run_all import main
    from tests.conftest import postgres_admin_url

    url = postgres_admin_url()

    main(["--quick", "--only", "storage", "--postgres", url, "--redis"])  # a private Redis server

    out = capsys.readouterr().out
    assert re.search(r"^peak RSS of bench\.storage \(its largest process\): [1-9]\d* MB$", out, re.M)
    before, table = out.split("README Performance table", 1)
    assert "Storage and resume on SQLite" in before and "Storage and resume on PostgreSQL" in before
    assert "| what | ours | anchor | ratio | what it means for you |" in table
    config = next(line for line in table.splitlines() if line.startswith("Measured with"))
    assert "`python -m bench.run_all --quick --only storage --postgres URL" in config
    assert "| database after 1 / 2 steps, PostgreSQL |" in table
    assert re.search(r"^Peak RSS of each script's largest process: `bench.storage` [1-9]\d* MB\.$", table,
                     re.M)
    if unavailable() is None or os.environ.get("GRAPH_REQUIRE_REDIS") == "1":
        assert "Redis: a private valkey-server at redis://127.0.0.1:" in before
        assert "Storage and resume on Redis" in before and "--redis`" in config
        assert "| memory of one thread (`MEMORY USAGE` of its keys) after 1 / 2 steps, Redis |" in table
    else:
        assert "Redis rows skipped: " in table
    assert _processes_naming(str(bench_scratch.folder)) == [], "the private Redis server still runs"
    assert bench_scratch.left_behind(url, None) == [], "left behind"


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


def test_window_measures_redis_and_deletes_its_threads_keys(
        capsys: pytest.CaptureFixture[str], redis_server: RedisServer, bench_scratch: Scratch) -> None:
    from bench import window

    window.main(["--steps", "2,3", "--redis", redis_server.url])

    out = capsys.readouterr().out
    rows = {row["variant"]: row for row in _rows(out, "Database size of one thread")}
    for keep in ("10", "all"):
        for what in ("memory", "AOF appended"):
            assert _ratios(rows[f"ours, Redis {what}, keep {keep}"]["bare/ours 3"].removesuffix("x"))
    assert bench_scratch.left_behind(None, redis_server.url) == [], "the benchmark's threads were left"
