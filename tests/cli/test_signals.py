"""SIGTERM or Ctrl-C mid-request: exit 130, the attempt stays counted, the thread is reported.

Real processes against a fake MandAPI that holds the request, on every backend: each
signalled command is `python -m` forked from a preloaded forkserver (`tests/forked.py`).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from graph.run import interrupted_outcome
from tests.conftest import run_cli, subprocess_env
from tests.fake_mandapi import FakeMandApi
from tests.forked import ForkedProcess, forkserver
from tests.store.test_concurrency import outcome, wait_for

pytestmark = pytest.mark.slow

TASK = "How long does shipping take at the demo shop?"


@pytest.fixture(scope="module")
def server() -> Any:
    return forkserver()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("existing", [False, True], ids=["new thread", "resumed thread"])
def test_signal_mid_request_reports_the_thread_as_it_stands(
        backend, server: Any, tmp_path: Path, sig: signal.Signals, existing: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The signalled step is a real process; a resumed thread's first step runs in this one."""
    with FakeMandApi(tmp_path / "requests.jsonl", never_finish=True) as fake:
        variables = {"MANDAPI_API_KEY": "sk-test-00000000", "MANDAPI_MODEL_ID": "mandapi-x",
                     "MANDAPI_BASE_URL": fake.base_url}
        env = subprocess_env(**variables)
        argv = ["--thread", "t1", "--task", TASK, "--db", backend.db, "--live", "--once",
                "--max-tokens", "1000"]
        if existing:
            with monkeypatch.context() as here:
                for name, value in variables.items():
                    here.setenv(name, value)
                assert run_cli(argv)["exit_code"] == 0
        fake.hold("shipping")
        proc = ForkedProcess(server, "graph.run", [*argv, "--json"], env, tmp_path)
        wait_for(lambda: len(fake.requests()) == 1 + existing)
        proc.send_signal(sig)
        result = outcome(proc)
        fake.release()
    attempts = 1 + existing
    assert (proc.returncode, result["exit_code"], result["error_code"]) == (130, 130, "interrupted")
    assert (result["thread_id"], result["status"], result["attempts"], result["max_attempts"],
            result["model"], result["max_tokens"]) == ("t1", "ready", attempts, 4, "mandapi-x", 1000)
    assert result["usage"]["total_tokens"] == 40 * existing
    assert "stays counted" in result["error"]
    assert backend.ledger_row("t1") == (attempts, attempts, 4)


def test_interrupted_report_says_why_when_the_thread_cannot_be_read(tmp_path: Path) -> None:
    missing = tmp_path / "gone.sqlite"
    out = interrupted_outcome(["--thread", "t1", "--db", str(missing), "--once"], "t1")
    assert (int(out.exit_code), out.error_code, out.thread_id) == (130, "interrupted", "t1")
    assert out.attempts is None and out.status is None
    assert "could not be read" in out.error
    assert not missing.exists(), "reading the report never creates a database"


def test_interrupted_report_of_a_thread_that_was_never_created_stays_null(backend) -> None:
    out = interrupted_outcome(["--thread", "nothing", "--db", backend.db], "nothing")
    assert (int(out.exit_code), out.status, out.attempts) == (130, None, None)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_batch_interrupted_mid_request_exits_130_in_one_json_object(
        sqlite_db: Path, server: Any, tmp_path: Path, sig: signal.Signals) -> None:
    import json

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"thread_id": "b1", "task": TASK, "model": "mandapi-x"}) + "\n")
    with FakeMandApi(tmp_path / "requests.jsonl", never_finish=True) as fake:
        env = subprocess_env(MANDAPI_API_KEY="sk-test-00000000", MANDAPI_BASE_URL=fake.base_url)
        fake.hold("shipping")
        proc = ForkedProcess(server, "graph.batch", [str(tasks), "--db", str(sqlite_db),
                                                     "--live", "--once", "--json"], env, tmp_path)
        wait_for(lambda: len(fake.requests()) == 1)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        fake.release()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Traceback" not in out
    (line,) = out.strip().splitlines()
    data = json.loads(line)
    assert (data["exit_code"], data["error_code"]) == (130, "interrupted")
    with __import__("sqlite3").connect(f"file:{sqlite_db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT attempts, claimed FROM attempt_ledger").fetchall() == [(1, 1)]


def test_the_interrupted_report_reads_the_thread_through_graph_api(backend, monkeypatch) -> None:
    from graph.api import Database

    run_cli(["--thread", "t1", "--task", "How long does shipping take?", "--once", "--db", backend.db])
    opened: list[str] = []
    enter = Database.__enter__

    def recording_enter(self):  # type: ignore[no-untyped-def]
        opened.append(self.settings.db)
        return enter(self)

    monkeypatch.setattr(Database, "__enter__", recording_enter)
    out = interrupted_outcome(["--thread", "t1", "--db", backend.db], "t1")
    assert opened == [backend.db]
    assert (int(out.exit_code), out.status, out.attempts, out.max_attempts) == (130, "ready", 1, 4)
