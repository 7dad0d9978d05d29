"""A workspace file name that is not UTF-8 never wedges a thread (INVARIANTS I13).

Tools show such a name with `\\xNN` escapes and open the file by the name shown; every
tool result enters state through `nodes.redaction.stored_text`, which turns any lone
surrogate left into U+FFFD, so neither the checkpoint nor the attempt log can fail on it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import graph.run
from graph.history import main as history
from nodes.redaction import stored_text
from nodes.tools import run_tool_call
from nodes.workspace import Workspace

BAD = os.fsdecode(b"bad\x9bname.txt")
"""A file name holding byte 0x9b, not UTF-8 (a lone surrogate once decoded)."""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / BAD).write_text("timeout: 5\n")
    (root / "good.txt").write_text("timeout: 7\n")
    return root


def run(root: Path, name: str, **args: object) -> str:
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    text = run_tool_call(call, Workspace(root))
    text.encode("utf-8")  # valid Unicode: raises on a lone surrogate
    return text


def test_a_non_utf8_name_is_listed_escaped_and_opened_by_that_name(folder: Path) -> None:
    listed = json.loads(run(folder, "list_files"))
    assert [f["path"] for f in listed["files"]] == ["bad\\x9bname.txt", "good.txt"]
    read = json.loads(run(folder, "read_file", path="bad\\x9bname.txt"))
    assert read["text"] == "timeout: 5" and read["path"] == "bad\\x9bname.txt"
    found = json.loads(run(folder, "search_text", query="timeout"))
    assert [m["path"] for m in found["matches"]] == ["bad\\x9bname.txt", "good.txt"]
    assert "does not exist" in run(folder, "read_file", path="bad\\x9cname.txt")


def test_stored_text_replaces_lone_surrogates_and_the_key() -> None:
    assert stored_text("a\udc9bb \ud800 sk-1", ["sk-1"]) == "a\ufffdb \ufffd [redacted: API key]"
    assert stored_text("plain é", ["sk-1"]) == "plain é"


def test_a_demo_thread_over_a_non_utf8_name_runs_on_and_reads_back(
        folder: Path, sqlite_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--thread", "u1", "--db", str(sqlite_db), "--once"]
    assert graph.run.main([*argv, "--task", "Which files set a timeout?",
                           "--workspace", str(folder)]) == 0
    assert graph.run.main(argv) == 0  # the tools step that used to end in exit 1
    assert graph.run.main(argv[:-1]) == 0
    assert history(["--thread", "u1", "--db", str(sqlite_db), "--json"]) == 0
    shown = capsys.readouterr().out
    assert "bad\\\\x9bname.txt" in shown


def test_a_workspace_folder_whose_name_is_not_utf8_is_refused_before_anything_is_stored(
        tmp_path, capsys) -> None:
    import os

    import graph.run

    folder = os.fsencode(tmp_path) + b"/w\xff"
    os.mkdir(folder)
    db = tmp_path / "n.sqlite"
    code = graph.run.main(["--thread", "t1", "--task", "Which files set a timeout?",
                           "--workspace", os.fsdecode(folder), "--db", str(db), "--json"])
    out = capsys.readouterr().out
    assert code == 2 and '"error_code": "usage"' in out and "not valid UTF-8" in out
    if db.exists():  # the file may be made; the thread never is
        from graph.api import open_database

        with open_database(str(db)) as opened:
            assert opened.threads() == []
