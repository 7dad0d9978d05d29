"""An approval tried offline, as the README shows it: the demo model asks to write, the thread
waits (exit 7), `--approve` writes the file once, the next run answers.

The main path runs the real commands in a new folder (what a user types, what they read);
the rejection and the tasks that ask for no write run in process (`run_cli`).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from nodes.demo_model import OfflineDemoModel, save_target
from nodes.tool_specs import tool_specs
from tests.conftest import PYTHON, run_cli, subprocess_env

TASK = "Save the shipping times to shipping.md"
ANSWER = ("Standard shipping takes 3 to 5 business days; express shipping takes 1 to 2 business "
          "days. Orders placed before 14:00 on a business day leave the warehouse the same day. [ship-01]")


def command(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "graph.run", "--thread", "save_demo", *args], cwd=folder,
                          env=subprocess_env(), capture_output=True, text=True, timeout=120)


def test_the_offline_demo_pauses_a_write_applies_it_once_on_approve_and_then_answers(
        tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    paused = command(tmp_path, "--task", TASK, "--allow-writes", "./notes")
    assert paused.returncode == 7, paused.stdout + paused.stderr
    assert paused.stdout.startswith("thread save_demo: awaiting_approval (attempts 2/4")
    call_id = re.search(r"^pending write (\S+) \(undecided\): write_file ", paused.stdout, re.M)
    assert call_id is not None, paused.stdout
    shown = re.search(r"^  arguments: (.*)$", paused.stdout, re.M)
    assert shown is not None and json.loads(shown.group(1)) == {"path": "shipping.md", "text": ANSWER + "\n"}
    assert list(notes.iterdir()) == []

    again = command(tmp_path)  # waits, without a request
    assert again.returncode == 7 and "(attempts 2/4" in again.stdout and list(notes.iterdir()) == []

    approved = command(tmp_path, "--approve", call_id.group(1))
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert approved.stdout.startswith("thread save_demo: ready (attempts 2/4")
    written = notes / "shipping.md"
    assert written.read_text() == ANSWER + "\n"
    first = written.stat()

    done = command(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("thread save_demo: done (attempts 3/4")
    assert f"answer: I saved the answer to shipping.md: {ANSWER}" in done.stdout
    twice = command(tmp_path, "--approve", call_id.group(1))
    assert twice.returncode == 2 and "not waiting for approval" in twice.stderr
    after = written.stat()  # one write: a second one would be a new file renamed into place
    assert (after.st_ino, after.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    assert [p.name for p in notes.iterdir()] == ["shipping.md"]


def test_a_rejected_demo_write_leaves_the_folder_as_it_was_and_the_answer_says_so(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    db = str(tmp_path / "c.sqlite")
    paused = run_cli(["--thread", "t", "--task", TASK, "--allow-writes", str(notes), "--db", db])
    assert (paused["status"], paused["exit_code"]) == ("awaiting_approval", 7)
    [call] = paused["pending_calls"]
    run_cli(["--thread", "t", "--reject", call["tool_call_id"], "--reason", "not now", "--db", db])
    done = run_cli(["--thread", "t", "--db", db])
    assert (done["status"], done["attempts"]) == ("done", 3)
    assert done["answer"].startswith("I did not save the answer to shipping.md. REJECTED by the "
                                     "reviewer: not now. Nothing was written.")
    assert ANSWER in done["answer"] and list(notes.iterdir()) == []


def test_a_task_that_names_no_file_to_save_to_is_answered_without_a_write(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    done = run_cli(["--thread", "t", "--task", "How long does shipping take at the demo shop?",
                    "--allow-writes", str(notes), "--db", str(tmp_path / "c.sqlite")])
    assert (done["status"], done["attempts"], done["pending_calls"]) == ("done", 2, None)
    assert list(notes.iterdir()) == []


def test_the_file_to_save_to_follows_to_or_into_and_is_a_md_or_txt_path() -> None:
    assert save_target(TASK) == "shipping.md"
    assert save_target("Write the return policy into notes/returns.TXT please") == "notes/returns.TXT"
    assert save_target("Summarize README.md") is None  # a file named, not one to save to
    assert save_target("Save the shipping times to shipping.py") is None
    assert save_target("Save it to ../outside.md") is None


def test_the_demo_model_asks_for_a_write_only_when_write_tools_are_offered() -> None:
    messages = [{"role": "user", "content": TASK}]
    for with_writes, calls in ((False, 0), (True, 1)):
        first = OfflineDemoModel().complete(messages, tool_specs(False, with_writes)).message
        assert first["tool_calls"][0]["function"]["name"] == "search_references"
        result = json.dumps({"hits": [{"id": "ship-01", "text": "Fast."}]})
        conversation = [*messages, first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"],
                                           "content": result}]
        reply = OfflineDemoModel().complete(conversation, tool_specs(False, with_writes)).message
        assert len(reply.get("tool_calls") or []) == calls


def test_an_approved_write_that_can_no_longer_be_applied_shows_its_path_in_history(
        tmp_path: Path, capsys) -> None:
    from graph.history import main as history

    notes = tmp_path / "notes"
    notes.mkdir()
    db = str(tmp_path / "c.sqlite")
    paused = run_cli(["--thread", "t", "--task", TASK, "--allow-writes", str(notes), "--db", db])
    [call] = paused["pending_calls"]
    notes.rmdir()  # the folder is gone by the time the person approves
    approved = run_cli(["--thread", "t", "--approve", call["tool_call_id"], "--db", db])
    assert (approved["status"], approved["exit_code"]) == ("ready", 0)
    capsys.readouterr()
    assert history(["--thread", "t", "--db", db]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines()
              if line.startswith(f"  step 2  {call['tool_call_id']}  ")]
    assert f"{call['tool_call_id']}  write_file shipping.md  approve" in line and "not applied: " in line


def test_history_shows_a_thread_waiting_for_review_as_awaiting_approval_with_its_calls(
        tmp_path: Path, capsys) -> None:
    """A fresh user read `status ready` in history (the stored status of a paused thread)
    for a thread graph.run reported `awaiting_approval`, exit 7, and thought it needed
    only another run."""
    from graph.history import main as history_main

    notes = tmp_path / "notes"
    notes.mkdir()
    db = str(tmp_path / "c.sqlite")
    paused = run_cli(["--thread", "t", "--task", TASK, "--allow-writes", str(notes), "--db", db])
    assert paused["status"] == "awaiting_approval"
    capsys.readouterr()
    assert history_main(["--db", db, "--thread", "t", "--json"]) == 0
    header = json.loads(capsys.readouterr().out)["header"]
    assert header["status"] == "awaiting_approval"
    assert [c["tool_call_id"] for c in header["pending_calls"]] == [
        c["tool_call_id"] for c in paused["pending_calls"]]
    assert history_main(["--db", db, "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed["threads"] if isinstance(listed, dict) else listed
    assert [r["status"] for r in rows if r["thread_id"] == "t"] == ["awaiting_approval"]
    assert history_main(["--db", db, "--thread", "t"]) == 0
    assert "status   awaiting_approval" in capsys.readouterr().out
