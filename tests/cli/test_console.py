"""The `mandapi-resume` console script and the habits every command shares (`--version`)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import PYTHON, subprocess_env

TASK = "How long does shipping take at the demo shop?"
ENTRY_POINTS = ("run", "history", "prune", "verify", "copy", "batch")
VERSION = f"mandapi-resume {version('mandapi-resume')}"
SCRIPT = Path(sys.executable).parent / "mandapi-resume"


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_command_prints_its_version_and_exits_0(
        entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    main = importlib.import_module(f"graph.{entry}").main
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (VERSION + "\n", "")


def test_the_console_runs_each_command_by_name(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from graph.console import main

    db = str(tmp_path / "db.sqlite")
    assert main(["--version"]) == 0 and capsys.readouterr().out == VERSION + "\n"
    assert main(["run", "--thread", "t1", "--task", TASK, "--once", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ready"
    assert main(["history", "--thread", "nope", "--db", db]) == 4  # the command's own code
    assert capsys.readouterr().err.startswith("error (no_such_thread): ")
    assert main(["history", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: mandapi-resume history ")
    assert main(["verify", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


@pytest.mark.parametrize("argv", [[], ["bogus"], ["--bogus"]])
def test_a_missing_or_unknown_command_is_a_usage_error(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from graph.console import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error (usage): ") and len(err.splitlines()) == 1
    assert "run, history, prune, verify, copy, batch, replay" in err


def test_a_command_not_in_this_installation_is_a_usage_error_in_json_too(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import graph.console

    monkeypatch.setitem(graph.console.COMMANDS, "replay", "graph.no_such_module_here")
    assert graph.console.main(["replay", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert (out["error_code"], out["exit_code"]) == ("usage", 2)
    assert "not part of this installation" in out["error"]


def test_the_script_ignores_a_local_graph_module_that_breaks_python_m(tmp_path: Path) -> None:
    """A LangGraph project of the user's own, with `graph.py` and `nodes/`, in the current folder."""
    (tmp_path / "graph.py").write_text("builder = 'the user own StateGraph'\n")
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "__init__.py").write_text("NODES = ['the user own nodes']\n")
    assert SCRIPT.is_file(), f"install the package (pip install -e .) to get {SCRIPT}"
    env = subprocess_env()
    env.pop("PYTHONPATH")  # the installed package only, as a user runs it
    argv = ["--thread", "t1", "--task", TASK, "--once", "--json", "--db", "db.sqlite"]
    script = subprocess.run([str(SCRIPT), "run", *argv], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert script.returncode == 0, script.stderr
    assert json.loads(script.stdout)["status"] == "ready"
    shadowed = subprocess.run([PYTHON, "-m", "graph.run", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
    assert shadowed.returncode == 1
    assert "ModuleNotFoundError" in shadowed.stderr and "'graph'" in shadowed.stderr


def test_the_replay_subcommand_runs_the_replay_face(capsys: pytest.CaptureFixture[str]) -> None:
    import graph.console

    assert graph.console.main(["replay", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: mandapi-resume replay ")
