"""What the commands say: headers, counts, what was deleted, progress, the parent's result."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from graph.batch import main as batch_main
from graph.history import LIST_HEADER
from graph.history import main as history_main
from graph.outcome import Outcome
from graph.prune import main as prune_main
from graph.verify import main as verify_main
from tests.conftest import SqliteBackend, run_cli

TASK = "How long does shipping take at the demo shop?"


def demo_db(tmp_path: Path, *threads: str, once: bool = False) -> str:
    db = str(tmp_path / "db.sqlite")
    for thread_id in threads:
        assert run_cli(["--thread", thread_id, "--task", TASK, "--db", db,
                        *(["--once"] if once else [])])["exit_code"] == 0
    return db


def tasks_file(tmp_path: Path, lines: list[dict], name: str = "tasks.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_history_list_starts_with_a_header(tmp_path: Path, capsys) -> None:
    db = demo_db(tmp_path, "a1", "a2")
    assert history_main(["--list", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == LIST_HEADER and lines[0].split()[:3] == ["thread", "status", "attempts"]
    assert [line.split()[:3] for line in lines[1:]] == [["a1", "done", "2/4"], ["a2", "done", "2/4"]]


def test_history_says_how_many_checkpoints_it_shows_of_how_many(tmp_path: Path, capsys) -> None:
    db = demo_db(tmp_path, "c1")
    stored = SqliteBackend(Path(db)).fingerprint()  # reading writes nothing
    assert history_main(["--thread", "c1", "--db", db, "--checkpoints", "3"]) == 0
    out = capsys.readouterr().out
    assert "checkpoints: the latest 3 of 7 stored (--checkpoints N shows more)" in out
    assert history_main(["--thread", "c1", "--db", db, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (len(data["checkpoints"]), data["checkpoints_total"]) == (7, 7)
    assert SqliteBackend(Path(db)).fingerprint() == stored


def test_history_list_refuses_checkpoints_instead_of_ignoring_it(tmp_path: Path, capsys) -> None:
    db = demo_db(tmp_path, "c1")
    assert history_main(["--list", "--checkpoints", "5", "--db", db]) == 2
    assert capsys.readouterr().err.startswith("error (usage): --checkpoints pages one thread")


def test_prune_names_each_thread_it_deleted(tmp_path: Path, capsys) -> None:
    db = demo_db(tmp_path, "old1", "old2")
    run_cli(["--thread", "live1", "--task", TASK, "--once", "--db", db])
    capsys.readouterr()
    assert prune_main(["--db", db, "--completed", "0s"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines[:2]] == [["pruned", "old1", "(done,"],
                                                       ["pruned", "old2", "(done,"]]
    assert lines[2].startswith("pruned 2 thread(s), trimmed ")
    assert "live1" not in "\n".join(lines)


def test_verify_says_how_many_threads_and_checkpoints_it_checked(tmp_path: Path, capsys) -> None:
    db = demo_db(tmp_path, "v1", "v2")
    assert verify_main(["--db", db]) == 0
    assert capsys.readouterr().out == ("ok: checked 2 thread(s) and 14 checkpoint(s); every "
                                       "thread reads back intact\n")
    assert verify_main(["--db", db, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["threads"], data["checkpoints"], data["ok"]) == (2, 14, True)


def test_verify_text_mode_ends_a_failure_with_the_error_line(tmp_path: Path, capsys) -> None:
    db = demo_db(tmp_path, "v1", "v2")
    SqliteBackend(Path(db)).execute("DELETE FROM attempt_ledger WHERE thread_id = 'v2'")
    assert verify_main(["--db", db]) == 4
    out, err = capsys.readouterr()
    assert "'v2'" in out and "'v1'" not in out
    assert len(err.splitlines()) == 1
    assert err.startswith("error (damaged): 1 problem(s) found (2 thread(s) and ")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_batch_progress_has_rate_and_time_left_on_a_terminal_and_plain_lines_otherwise() -> None:
    from graph.fleet.batch import Progress

    outcomes = [Outcome(f"t{i}", status="done") for i in range(3)]
    terminal, plain, quiet = Terminal(), io.StringIO(), Terminal()
    for stream, bar in ((terminal, True), (plain, True), (quiet, False)):
        progress = Progress(3, stream, bar=bar)
        for outcome in outcomes:
            progress.update(outcome)
        progress.close()
    assert "3/3" in terminal.getvalue() and "thread/s" in terminal.getvalue()
    assert "<00:00" in terminal.getvalue() or "?" in terminal.getvalue()  # tqdm's time left
    expected = "".join(f"[{i + 1}/3] t{i}: done (ok)\n" for i in range(3))
    assert plain.getvalue() == expected == quiet.getvalue()


def test_batch_json_never_draws_a_bar_on_stderr(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stderr", Terminal())
    path = tasks_file(tmp_path, [{"thread_id": f"j{i}", "task": TASK} for i in range(2)])
    assert batch_main([str(path), "--db", str(tmp_path / "db.sqlite"), "--once", "--json"]) == 0
    import sys

    assert sys.stderr.getvalue() == "[1/2] j0: ready (ok)\n[2/2] j1: ready (ok)\n"
    assert json.loads(capsys.readouterr().out)["statuses"] == {"ready": 2}


def test_batch_text_mode_ends_a_failure_with_the_error_line(tmp_path: Path, capsys) -> None:
    db = demo_db(tmp_path, "t1", once=True)
    path = tasks_file(tmp_path, [{"thread_id": "t1", "task": "another task"}])
    assert batch_main([str(path), "--db", db, "--once"]) == 4
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error (identity_mismatch): ")


def test_the_parent_result_is_stored_shown_by_history_and_written_to_out(tmp_path: Path,
                                                                          capsys) -> None:
    db = str(tmp_path / "db.sqlite")
    parts = tasks_file(tmp_path, [{"task": "How long does shipping take?"},
                                  {"task": "How do I return an item?"}], "parts.jsonl")
    out = tmp_path / "results.jsonl"
    assert batch_main([str(parts), "--db", db, "--parent", "P", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["thread_id"] for r in rows] == ["P:sub_0", "P:sub_1", "P"]
    assert rows[-1]["status"] == "done" and len(rows[-1]["answers"]) == 2
    capsys.readouterr()
    assert history_main(["--thread", "P", "--db", db, "--json"]) == 0
    stored = json.loads(capsys.readouterr().out)["parent_result"]
    assert stored == {k: v for k, v in rows[-1].items() if k != "thread_id"}
    assert "[ship-01]" in stored["answers"][0] and "[ret-01]" in stored["answers"][1]
    assert history_main(["--thread", "P", "--db", db]) == 0
    text = capsys.readouterr().out
    assert "status   done (2 of 2 subtasks finished)" in text and "[ret-01]" in text


def test_a_parent_with_a_subtask_still_running_is_running(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "db.sqlite")
    parts = tasks_file(tmp_path, [{"task": "How long does shipping take?"}], "parts.jsonl")
    assert batch_main([str(parts), "--db", db, "--parent", "Q", "--once"]) == 0
    capsys.readouterr()
    assert history_main(["--thread", "Q", "--db", db, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["parent_result"]
    assert result["status"] == "running" and "answers" not in result
    assert result["subtasks"] == [{"thread_id": "Q:sub_0", "status": "ready", "answer": None}]


@pytest.mark.parametrize("argv", [["--list"], ["--thread", "nobody"]])
def test_a_name_that_is_neither_thread_nor_parent_is_still_refused(tmp_path: Path, argv) -> None:
    db = demo_db(tmp_path, "x1")
    assert history_main([*argv, "--db", db]) == (0 if argv == ["--list"] else 4)


def test_outcome_to_json_is_exactly_what_run_json_prints_controls_escaped() -> None:
    from graph.cli import emit

    answer = "ship \u009b[31m in 3 days \u202eevil\u202c\x1b[0m"
    outcome = Outcome("t1", status="done", answer=answer, error="bad \u009b")
    printed = io.StringIO()
    emit(outcome.to_json(), printed)
    assert printed.getvalue() == outcome.to_json() + "\n"
    assert not {"\u009b", "\u202e", "\x1b"} & set(outcome.to_json())
    assert json.loads(outcome.to_json())["answer"] == answer


def test_an_id_starting_with_a_dash_works_joined_with_equals_as_the_readme_says(
        tmp_path: Path, capsys) -> None:
    """The README allows `-lead:dash`; argparse reads `--thread -lead:dash` as two flags (exit
    2, nothing stored), so the README gives the `=` form, which runs."""
    from graph.run import main as run_main

    db = str(tmp_path / "c.sqlite")
    assert run_main(["--thread", "-lead:dash", "--task", TASK, "--db", db, "--once"]) == 2
    assert "--thread: expected one argument (a value that starts with '-' is joined with '=': " \
        "--thread=VALUE)" in capsys.readouterr().err
    assert not Path(db).exists()
    out = run_cli(["--thread=-lead:dash", "--task", TASK, "--db", db, "--once"])
    assert (out["exit_code"], out["thread_id"]) == (0, "-lead:dash"), out
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "`--thread=-lead:dash`" in readme


def test_a_flag_joined_to_a_lone_double_dash_keeps_it_and_other_values_stay_as_given() -> None:
    """`--thread=--` names the legal id `--` (Python 3.11's argparse dropped it); a value
    that only ends in `=--` (`--task=a=--`) is the text as given."""
    from graph.cli import Parser

    parser = Parser("run", None)
    parser.add_argument("--thread")
    parser.add_argument("--task")
    parsed = parser.parse_args(["--thread=--", "--task=a=--"])
    assert (parsed.thread, parsed.task) == ("--", "a=--")
