"""A folder with its own `nodes/` package: the commands refuse it clearly (exit 2), never a traceback.

`python -m` puts the current folder first on `sys.path`, so there `import nodes` finds
the folder's own package and `graph` could not import ours (it crashed with exit 1).
`graph/__init__.py` refuses first, naming the folder. Real subprocesses: what is
tested is how Python resolves the imports of a new process started in that folder.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, subprocess_env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's LangGraph project folder with its own `nodes` package."""
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes/__init__.py").write_text("")
    return tmp_path


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, *args], cwd=folder, env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)


def test_run_json_in_a_folder_with_its_own_nodes_prints_a_json_usage_error_and_exits_2(
        project: Path) -> None:
    done = _run(project, "-m", "graph.run", "--json", "--thread", "t", "--task", "x", "--once",
                "--db", "c.sqlite")
    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)
    assert (report["error_code"], report["exit_code"]) == ("usage", 2)
    assert f"{project / 'nodes'} hides this project's nodes package" in report["error"]
    assert "Traceback" not in done.stderr and not (project / "c.sqlite").exists()


@pytest.mark.parametrize("face", ["graph.run", "graph.history", "graph.batch"])
def test_each_face_in_such_a_folder_prints_one_error_line_and_exits_2(project: Path, face: str) -> None:
    done = _run(project, "-m", face, "--help")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error (usage): ") and done.stderr.count("\n") == 1
    assert str(project / "nodes") in done.stderr and "mandapi-resume run" in done.stderr


def test_an_import_in_such_a_folder_raises_one_import_error_line_naming_it_and_the_fix(
        project: Path) -> None:
    """An import raises (a library never ends its importer); Python exits 1 for a script."""
    done = _run(project, "-c", "import graph.api")
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"ImportError: {project / 'nodes'} hides mandapi-resume's nodes package")
    assert "Rename yours (my_nodes)" in last and "console script (mandapi-resume run ...)" in last


def test_a_nodes_folder_without_init_hides_nothing_and_the_command_runs(tmp_path: Path) -> None:
    (tmp_path / "nodes").mkdir()  # a namespace portion: our regular package still wins
    done = _run(tmp_path, "-m", "graph.run", "--json", "--thread", "t", "--task", "x", "--once",
                "--db", "c.sqlite")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["status"] == "ready"
