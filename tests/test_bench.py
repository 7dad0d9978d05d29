"""The benchmark scripts keep working and clean up after themselves (tiny sizes; no timing
is asserted)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.postgres  # bench.run_all also measures PostgreSQL
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

    main(["--quick", "--postgres", url])

    out = capsys.readouterr().out
    for title in ("Cold start", "One step in process, default configuration", "Claim checkpoint",
                  "Storage and resume on SQLite", "Storage and resume on PostgreSQL", "threads ×",
                  "queue worker", "README Performance table"):
        assert title in out, title
    for ratio in ("÷ import floor", "÷ InMemorySaver", "÷ bare", "× anchor speed", "× one worker"):
        assert ratio in out, ratio
    assert "commits/step" in out and "peak RSS of bench.storage" in out
    assert "| what | ours | anchor | ratio | what it means for you |" in out
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
