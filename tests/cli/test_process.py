"""The command run as a real process, the way a scheduler calls it.

What a process adds nothing to (a failed request's report) runs in this process. Each
kind of run starts a fresh interpreter once (`cli`); its repeats on the other backends
and inputs are `python -m graph.run` forked from the preloaded forkserver (`forked_cli`,
`tests/forked.py`): the same real process and streams, without another interpreter start.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, ROOT, SqliteBackend, subprocess_env
from tests.fake_mandapi import FakeMandApi
from tests.forked import ForkedProcess, forkserver

TASK = "How long does shipping take at the demo shop?"


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run([PYTHON, "-m", "graph.run", *args], capture_output=True, text=True,
                          env=env or subprocess_env(), cwd=cwd, timeout=120)


def forked_cli(*args: str, env: dict[str, str] | None = None, cwd: Path
               ) -> subprocess.CompletedProcess[str]:
    """`cli(*args)` as a process forked from the preloaded forkserver."""
    proc = ForkedProcess(forkserver(), "graph.run", list(args), env or subprocess_env(), cwd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_two_offline_processes_share_the_thread_through_the_checkpoint(tmp_path: Path) -> None:
    first = cli("--thread", "task_abc", "--task", TASK, "--once", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "ready (attempts 1/4" in first.stdout
    assert SqliteBackend(tmp_path / "checkpoints.sqlite").ledger_row("task_abc") == (1, 1, 4)
    second = cli("--thread", "task_abc", "--once", "--json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    out = json.loads(second.stdout)
    assert (out["status"], out["attempts"]) == ("done", 2)
    assert "[ship-01]" in out["answer"]


def test_live_process_against_a_loopback_fake_server_keeps_the_key_private(
    tmp_path: Path, backend, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A live run to the end as a real process (a fresh interpreter on SQLite, forked on
    the other backends); a failed request's report (exit 6) in this process through
    `main(argv)`, every byte it writes captured."""
    from graph.run import main

    key = "sk-marker-process-91"
    with FakeMandApi(tmp_path / "requests.jsonl") as fake:
        env = subprocess_env(MANDAPI_API_KEY=key, MANDAPI_MODEL_ID="mandapi-large",
                             MANDAPI_BASE_URL=fake.base_url)
        run = cli if isinstance(backend, SqliteBackend) else forked_cli
        runs = [run("--thread", "live1", "--task", TASK, "--live", "--db", backend.db, env=env,
                    cwd=tmp_path)]
        requests = fake.requests()
    assert runs[0].returncode == 0, runs[0].stderr
    assert "done (attempts 2/4, model mandapi-large)" in runs[0].stdout
    assert len(requests) == 2 == backend.ledger_row("live1")[1]
    assert all(r["headers"]["Authorization"] == f"Bearer {key}" for r in requests)
    with FakeMandApi(tmp_path / "failed.jsonl", status=503) as failing:
        for name in ("MANDAPI_API_KEY", "MANDAPI_MODEL_ID"):
            monkeypatch.setenv(name, env[name])
        monkeypatch.setenv("MANDAPI_BASE_URL", failing.base_url)
        capfd.readouterr()
        code = main(["--thread", "live2", "--task", TASK, "--live", "--db", backend.db, "--json"])
        failed = subprocess.CompletedProcess("main", code, *capfd.readouterr())
    assert failed.returncode == 6
    assert json.loads(failed.stdout)["error_code"] == "http_status"
    assert key.encode() not in backend.dump()
    for run in [*runs, failed]:
        assert key not in run.stdout and key not in run.stderr


def test_json_output_is_one_object_for_usage_errors(tmp_path: Path) -> None:
    for n, args in enumerate((["--json"], ["--thread", "a b", "--json"],
                              ["--thread", "x", "--json", "--bogus"])):
        result = (cli if n == 0 else forked_cli)(*args, cwd=tmp_path)
        assert result.returncode == 2, args
        lines = result.stdout.strip().splitlines()
        assert len(lines) == 1
        assert json.loads(lines[0])["error_code"] == "usage"


def test_help_documents_the_exit_codes() -> None:
    result = cli("--help")
    assert result.returncode == 0
    assert "exit codes" in result.stdout and "--once" in result.stdout


def test_readme_exit_code_table_matches_the_code() -> None:
    from graph.errors import ExitCode

    readme = (ROOT / "README.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} |" in readme, code
