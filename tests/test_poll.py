"""A thread with nothing to do is answered without LangGraph, exactly as the full path answers it.

`graph.poll` answers a finished (done, exhausted, cancelled), pruned or busy thread from
our own rows; anything unusual (a damaged or stale summary, identity flags, a database
from before summaries) takes the full path, which checks everything. `graph.run`'s
process ends with `os._exit` after flushing and closing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from graph.locks import ThreadLocks
from graph.poll import quick_answer
from graph.prune import main as prune_main
from tests.conftest import PYTHON, run_cli, subprocess_env
from tests.fakes import NeverFinishes

TASK = "How long does shipping take at the demo shop?"
HEAVY = ("langgraph", "langchain_core", "httpx", "psycopg")
"""Top-level packages the quick answer must not import (SQLite)."""


def _threads(db: Path) -> None:
    """p (pruned), d (done), e (exhausted), c (cancelled), r (ready) in `db`."""
    run_cli(["--thread", "p", "--task", TASK, "--db", str(db)])
    assert prune_main(["--db", str(db), "--completed", "0s"]) == 0
    assert run_cli(["--thread", "d", "--task", TASK, "--db", str(db)])["status"] == "done"
    model = NeverFinishes()
    out = run_cli(["--thread", "e", "--task", TASK, "--max-attempts", "2", "--db", str(db)],
                  model_factory=lambda m, s: model)
    assert out["status"] == "exhausted"
    run_cli(["--thread", "c", "--task", TASK, "--once", "--db", str(db)])
    assert run_cli(["--thread", "c", "--cancel", "--db", str(db)])["status"] == "cancelled"
    assert run_cli(["--thread", "r", "--task", TASK, "--once", "--db", str(db)])["status"] == "ready"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.sqlite"
    _threads(path)
    return path


@contextmanager
def _held(db: Path, thread_id: str) -> Iterator[None]:
    """Holds the thread's writer lock, as a process working on it does."""
    locks = ThreadLocks(db.resolve())
    try:
        with locks.hold(thread_id):
            yield
    finally:
        locks.close()


def _cli(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, list[str], set[str]]:
    """Runs `graph.run` under `-X importtime`: exit code, stdout, stderr lines, heavy imports."""
    done = subprocess.run([PYTHON, "-X", "importtime", "-m", "graph.run", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)
    lines = done.stderr.splitlines()
    imported = {line.split("|")[-1].strip().split(".")[0] for line in lines
                if line.startswith("import time:")}
    return (done.returncode, done.stdout,
            [line for line in lines if not line.startswith("import time:")],
            imported & set(HEAVY))


@pytest.mark.slow
@pytest.mark.parametrize("thread", ["d", "e", "c", "p", "busy"])
def test_nothing_to_do_is_answered_without_langgraph_byte_for_byte(db: Path, thread: str) -> None:
    thread_id = "r" if thread == "busy" else thread
    with _held(db, thread_id) if thread == "busy" else _nothing():
        for as_json, via_env in ((False, False), (True, True)):
            env = subprocess_env(**({"GRAPH_DB": str(db)} if via_env else {}))
            args = ["--thread", thread_id, "--once", *(["--json"] if as_json else []),
                    *([] if via_env else ["--db", str(db)])]
            quick = _cli(args, db.parent, env)
            full = _cli([*args, "--task", TASK], db.parent, env)  # a flag the full path checks
            assert quick[:3] == full[:3], (thread, as_json)
            assert quick[3] == set() and "langgraph" in full[3], (thread, as_json)
            assert quick[0] == {"d": 0, "e": 3, "c": 4, "p": 4, "busy": 5}[thread]


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_the_quick_answer_is_the_full_paths_answer(db: Path) -> None:
    for thread in ("d", "e", "c", "p"):
        quick = quick_answer(str(db), thread)
        assert quick is not None, thread
        full = run_cli(["--thread", thread, "--task", TASK, "--db", str(db)])  # the full path
        assert json.loads(quick.to_json()) == {k: v for k, v in full.items() if k != "_next"}
        assert quick.next_nodes == full["_next"] and quick.to_text(), thread
    assert quick_answer(str(db), "r") is None  # can continue: the full path runs it
    assert quick_answer(str(db), "unknown") is None
    with _held(db, "r"):
        busy = quick_answer(str(db), "r")
    assert busy is not None and (busy.exit_code, busy.error_code) == (5, "busy")


def _sql(db: Path, statement: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(statement)
    conn.close()


@pytest.mark.parametrize("change", [
    "UPDATE thread_summaries SET outcome = replace(outcome, 'Standard', 'Express')",
    "UPDATE thread_summaries SET fingerprint = CAST(fingerprint AS BLOB)",
    "UPDATE thread_summaries SET outcome = '{}'",
    "UPDATE attempt_ledger SET updated_at = '2030-01-01T00:00:00+00:00' WHERE thread_id = 'd'",
    "INSERT INTO write_approvals (thread_id, attempt, tool_call_id, tool, args_sha256, "
    "decision, decided_at, result) VALUES ('d', 1, 'w1', 'write_file', 'x', 'reject', "
    "'2030-01-01T00:00:00+00:00', 'rejected')",
])
def test_a_changed_summary_or_row_takes_the_full_path_which_renews_the_summary(
        db: Path, change: str) -> None:
    answer = quick_answer(str(db), "d")
    assert answer is not None
    _sql(db, change)
    assert quick_answer(str(db), "d") is None
    full = run_cli(["--thread", "d", "--once", "--db", str(db)])
    assert (full["status"], full["answer"], full["exit_code"]) == ("done", answer.answer, 0)
    renewed = quick_answer(str(db), "d")
    assert renewed is not None and renewed.to_json() == answer.to_json()


def test_a_damaged_checkpoint_behind_a_summary_is_refused_by_the_full_path(db: Path) -> None:
    _sql(db, "UPDATE checkpoints SET metadata = '[]' WHERE thread_id = 'd' AND checkpoint_id = "
             "(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'd')")
    assert quick_answer(str(db), "d") is None
    out = run_cli(["--thread", "d", "--once", "--db", str(db)])
    assert (out["exit_code"], out["error_code"]) == (4, "damaged")


def test_flags_checked_against_the_thread_take_the_full_path(db: Path) -> None:
    out = run_cli(["--thread", "d", "--model", "mandapi-large", "--db", str(db)])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")
    out = run_cli(["--thread", "d", "--max-attempts", "9", "--db", str(db)])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")


def test_a_database_from_before_summaries_gains_one_on_its_next_full_answer(db: Path) -> None:
    _sql(db, "DROP TABLE thread_summaries")
    assert quick_answer(str(db), "d") is None
    assert run_cli(["--thread", "d", "--db", str(db)])["status"] == "done"
    assert quick_answer(str(db), "d") is not None


def test_pruning_a_thread_deletes_its_summary(db: Path) -> None:
    assert prune_main(["--db", str(db), "--completed", "0s", "--failed", "0s"]) == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM thread_summaries").fetchone()[0] == 0
    conn.close()
    pruned = quick_answer(str(db), "d")
    assert pruned is not None and pruned.error_code == "pruned"


def test_a_postgres_url_or_a_file_others_can_read_takes_the_full_path(db: Path) -> None:
    assert quick_answer("postgresql://u@127.0.0.1:1/x", "d") is None
    db.chmod(0o644)
    assert quick_answer(str(db), "d") is None  # the full path warns about it on stderr


def test_graph_run_imports_no_langgraph_before_deciding() -> None:
    code = ("import sys, graph.run, graph.poll, graph.settings, graph.spec; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    done = subprocess.run([PYTHON, "-c", code], env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("args", "code"), [
    (["--thread", "n", "--task", TASK, "--once", "--json"], 0),  # a step: the full path
    (["--thread", "d", "--once", "--json"], 0),                   # the quick answer
    (["--thread", "missing", "--once", "--json"], 4),             # an error
])
def test_the_process_ends_with_its_exit_code_flushed_and_closed_even_into_a_closed_pipe(
        db: Path, args: list[str], code: int) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone, like `| head -0`
    done = subprocess.run([PYTHON, "-m", "graph.run", *args, "--db", str(db)],
                          env=subprocess_env(), stdout=write, stderr=subprocess.PIPE, timeout=300)
    os.close(write)
    assert done.returncode == code, done.stderr
    assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr
    wal = db.with_name(db.name + "-wal")  # closed: checkpointed (a reader leaves it empty)
    assert not wal.exists() or wal.stat().st_size == 0
    piped = subprocess.run([PYTHON, "-m", "graph.run", *args[:2], "--json", "--db", str(db)],
                           env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert piped.stdout.count("\n") == 1 and piped.stdout.endswith("}\n")  # whole, flushed
    if args[1] == "n":
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT attempts FROM attempt_ledger WHERE thread_id = 'n'"
                                ).fetchone() == (2,)
        conn.close()
