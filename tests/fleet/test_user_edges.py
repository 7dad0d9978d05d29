"""Edges a fresh user found: batch output paths, queue timing settings, folders in tasks lines.

Each is a refusal with its own code and exit 2, given before anything runs where it can be.
"""

from __future__ import annotations

import json

import pytest

from graph.batch import main as batch_main
from graph.errors import UsageError
from graph.run import main as run_main
from tests.fleet.test_batch import tasks_file

TASK = "How long does shipping take?"


@pytest.mark.parametrize("out", ["folder", "missing/results.jsonl"])
def test_batch_out_that_cannot_be_written_is_refused_before_anything_runs(tmp_path, capsys, out):
    (tmp_path / "folder").mkdir()
    db = tmp_path / "c.sqlite"
    tasks = tasks_file(tmp_path, [{"thread_id": "b1", "task": TASK}])
    code = batch_main([str(tasks), "--db", str(db), "--out", str(tmp_path / out), "--json"])
    assert code == 2
    assert not db.exists()  # nothing ran, nothing was created
    error = json.loads(capsys.readouterr().out)
    assert error["error_code"] == "usage" and "--out" in error["error"]


@pytest.mark.parametrize("value", ["abc", "-1", "0", "nan", "inf", "1e999"])
def test_a_queue_timing_setting_that_is_not_a_positive_number_is_a_usage_error(monkeypatch, value):
    pytest.importorskip("procrastinate")
    from graph.fleet.queue_db import env_seconds

    monkeypatch.setenv("GRAPH_QUEUE_HEARTBEAT_S", value)
    with pytest.raises(UsageError) as caught:
        env_seconds("GRAPH_QUEUE_HEARTBEAT_S", 5)
    assert caught.value.exit_code == 2 and "GRAPH_QUEUE_HEARTBEAT_S" in caught.value.message


def test_queue_timing_settings_default_when_unset_and_read_when_set(monkeypatch) -> None:
    pytest.importorskip("procrastinate")
    from graph.fleet.queue_db import env_seconds

    monkeypatch.delenv("GRAPH_QUEUE_STALLED_S", raising=False)
    assert env_seconds("GRAPH_QUEUE_STALLED_S", 30) == 30
    monkeypatch.setenv("GRAPH_QUEUE_STALLED_S", "2.5")
    assert env_seconds("GRAPH_QUEUE_STALLED_S", 30) == 2.5


@pytest.mark.parametrize("field", ["workspace", "allow_writes"])
def test_a_missing_folder_is_no_such_workspace_in_run_and_in_a_tasks_line(tmp_path, capsys, field):
    missing = str(tmp_path / "nonexistent")
    db = tmp_path / "c.sqlite"
    flag = "--workspace" if field == "workspace" else "--allow-writes"
    assert run_main(["--thread", "r1", "--task", TASK, flag, missing, "--db", str(db), "--json"]) == 2
    from_run = json.loads(capsys.readouterr().out)
    tasks = tasks_file(tmp_path, [{"thread_id": "b1", "task": TASK, field: missing}])
    assert batch_main([str(tasks), "--db", str(db), "--json"]) == 2
    from_batch = json.loads(capsys.readouterr().out)
    assert from_run["error_code"] == from_batch["error_code"] == "no_such_workspace"


def test_refusals_of_a_step_name_the_database_and_the_thread_once(tmp_path, capsys) -> None:
    db = str((tmp_path / "c.sqlite").resolve())
    assert run_main(["--thread", "r1", "--task", TASK, "--db", db, "--json"]) == 0
    capsys.readouterr()
    assert run_main(["--thread", "r1", "--max-attempts", "5", "--db", db, "--json"]) == 4
    error = json.loads(capsys.readouterr().out)["error"]
    assert error.startswith(f"{db}: thread 'r1': ") and error.count(db) == 1
    assert error.count("'r1'") == 1


def test_a_thread_whose_ledger_row_is_gone_is_refused_by_copy_and_listed_as_damaged(
        tmp_path, capsys) -> None:
    import sqlite3

    from graph.copy import main as copy_main
    from graph.history import main as history_main

    db, target = tmp_path / "c.sqlite", tmp_path / "t.sqlite"
    for thread_id in ("d1", "d2"):
        assert run_main(["--thread", thread_id, "--task", TASK, "--db", str(db)]) == 0
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM attempt_ledger WHERE thread_id = 'd2'")
    capsys.readouterr()
    assert copy_main(["--from", str(db), "--to", str(target), "--json"]) == 4
    assert json.loads(capsys.readouterr().out)["error_code"] == "damaged"
    assert history_main(["--list", "--db", str(db), "--json"]) == 0
    listed = {row["thread_id"]: row["status"] for row in json.loads(capsys.readouterr().out)["threads"]}
    assert listed == {"d1": "done", "d2": "unreadable: damaged"}


@pytest.mark.parametrize("flag", ["--max-attempts", "--max-tokens", "--context-tokens",
                                  "--keep-checkpoints"])
@pytest.mark.parametrize("text", ["1_0", " 5", "+5", "\uff11", "5 "])
def test_a_number_flag_takes_only_ascii_digits_like_a_tasks_line(tmp_path, capsys, flag, text):
    db = tmp_path / "c.sqlite"
    assert run_main(["--thread", "n1", "--task", TASK, flag, text, "--db", str(db)]) == 2
    assert not db.exists()
    assert "invalid whole number" in capsys.readouterr().err


def test_a_summary_with_a_lone_surrogate_is_left_to_the_full_path(tmp_path, capsys) -> None:
    import sqlite3

    from graph.store.poll import quick_answer
    from graph.store.sql.conn import SqliteSql
    from graph.store.sql.summaries import SqlSummaries

    db = tmp_path / "c.sqlite"
    for _ in range(2):
        assert run_main(["--thread", "s1", "--task", TASK, "--once", "--db", str(db)]) == 0
    assert quick_answer(str(db), "s1") is not None  # finished: answered from its summary
    with sqlite3.connect(db) as conn:
        text = conn.execute("SELECT outcome FROM thread_summaries WHERE thread_id = 's1'").fetchone()[0]
        forged = json.dumps({**json.loads(text), "answer": "\udc80"})  # an escape JSON allows
        fingerprint = SqlSummaries(SqliteSql(conn)).fingerprint("s1", forged)
        conn.execute("UPDATE thread_summaries SET outcome = ?, fingerprint = ? WHERE thread_id = 's1'",
                     (forged, fingerprint))
    assert quick_answer(str(db), "s1") is None


def test_read_tasks_takes_a_path_as_a_str_or_a_pathlike(tmp_path) -> None:
    """The README's import (`read_tasks("tasks.jsonl")`) raised AttributeError on a str."""
    from graph.fleet.tasks_file import read_tasks

    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"thread_id": "s1", "task": "How long does shipping take?"}) + "\n")
    by_str, by_path = read_tasks(str(path)), read_tasks(path)
    assert [i.spec.thread_id for i in by_str] == [i.spec.thread_id for i in by_path] == ["s1"]
    with pytest.raises(UsageError) as refused:
        read_tasks(str(tmp_path / "missing.jsonl"))
    assert refused.value.exit_code == 2 and "missing.jsonl" in str(refused.value.location)


def test_python_m_graph_queue_says_how_to_start_a_worker_instead_of_nothing(capsys) -> None:
    """`python -m graph.queue` printed nothing and exited 0; it is procrastinate's app."""
    from graph.queue import main as queue_main

    assert queue_main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error (usage): ") and "procrastinate --app=graph.queue.app worker" in err
    assert queue_main(["--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error_code"] == "usage"
    assert queue_main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("mandapi-resume ")
    assert queue_main(["--help"]) == 0
    assert "GRAPH_QUEUE_DB" in capsys.readouterr().out
