"""A project's own `graph.py` or `nodes/` hides this package: where our code runs, one line says
so and names the fix, and the README has the section.

Real folders and real processes: what is tested is how Python resolves imports in a new
process (pytest, a notebook's kernel, a script) started beside such a file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.conftest import PYTHON, ROOT
from tests.docs.test_notebook import NOTEBOOK
from tests.replay.test_plugin import user_env

PYTHONS_OWN = "No module named 'graph.api'; 'graph' is not a package"
USES_OURS = {
    "collecting": ("from graph.api import open_database\n\n\n"
                   "def test_uses_ours():\n    assert open_database\n"),
    "running": "def test_uses_ours():\n    from graph.api import open_database\n\n    assert open_database\n",
}
"""A test module of the user's that needs our `graph`: imported as pytest collects it, or in a test."""
SECTION = "A graph.py or nodes/ of your own"


def project(tmp_path: Path, hiding: str) -> Path:
    """A user's project with its own `graph.py` or `nodes/` package, and a tests folder."""
    if hiding == "graph.py":
        (tmp_path / "graph.py").write_text("GRAPH = 1\n")
    else:
        (tmp_path / "nodes").mkdir()
        (tmp_path / "nodes/__init__.py").write_text("")
    (tmp_path / "tests").mkdir()
    return tmp_path


def pytest_there(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=folder,
                          env=user_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("hiding", "name", "renamed", "when"), [
    ("graph.py", "graph", "my_graph.py", "collecting"), ("graph.py", "graph", "my_graph.py", "running"),
    ("nodes", "nodes", "my_nodes/", "running")])
def test_pytest_beside_a_module_of_the_same_name_ends_with_one_line_naming_the_fix_and_exit_2(
        tmp_path: Path, hiding: str, name: str, renamed: str, when: str) -> None:
    folder = project(tmp_path, hiding)
    (folder / "tests/test_mine.py").write_text(USES_OURS[when])
    (folder / "tests/test_other.py").write_text("def test_other():\n    pass\n")
    done = pytest_there(folder)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("mandapi-resume: ")]
    assert lines == [
        f"mandapi-resume: `import {name}` finds {folder / hiding}, not mandapi-resume's {name} package "
        f"({ROOT / name}): a {name}.py or {name}/ of this project comes first on sys.path. Rename yours "
        f"({renamed}), or run `pytest --import-mode=importlib` (not `python -m pytest`); mandapi-resume's "
        "commands are not affected when run as the console script (mandapi-resume run ...)"], done.stdout


def test_a_session_that_needs_nothing_of_ours_keeps_its_own_result_beside_a_graph_py(
        tmp_path: Path) -> None:
    folder = project(tmp_path, "graph.py")
    (folder / "tests/test_mine.py").write_text(
        "import graph\n\n\ndef test_mine():\n    assert graph.GRAPH == 2\n")
    done = pytest_there(folder)
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    assert "mandapi-resume" not in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("hiding", "says"), [
    ("graph.py", f"{PYTHONS_OWN}: a graph.py or graph/ in this notebook's folder hides mandapi-resume's "
                 "graph package; rename yours (my_graph.py), or open the notebook from another folder"),
    ("nodes", "hides mandapi-resume's nodes package: "),
])
def test_the_notebooks_first_cell_beside_a_module_of_the_same_name_stops_with_one_line(
        tmp_path: Path, hiding: str, says: str) -> None:
    folder = project(tmp_path, hiding)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    with pytest.raises(CellExecutionError) as failed:
        NotebookClient(notebook, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute(env=user_env())
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    [error] = [o for o in first.outputs if o.output_type == "error"]
    assert failed.value.ename == "ImportError" and "\n" not in error.evalue
    assert says in error.evalue
    if hiding == "nodes":
        assert error.evalue.startswith(f"{folder / 'nodes'} hides")
        assert "Rename yours (my_nodes)" in error.evalue


def test_a_script_beside_a_graph_py_gets_pythons_own_error_and_one_elsewhere_works(tmp_path: Path) -> None:
    """None of our code runs when a `graph.py` hides ours: the README says what Python prints."""
    (tmp_path / "graph.py").write_text("GRAPH = 1\n")
    (tmp_path / "scripts").mkdir()
    script = "from graph.api import open_database\nprint('imported')\n"
    (tmp_path / "notebook_like.py").write_text(script)
    (tmp_path / "scripts/elsewhere.py").write_text(script)
    beside = subprocess.run([PYTHON, "notebook_like.py"], cwd=tmp_path, env=user_env(),
                            capture_output=True, text=True, timeout=60)
    assert beside.returncode == 1 and PYTHONS_OWN in beside.stderr
    moved = subprocess.run([PYTHON, "scripts/elsewhere.py"], cwd=tmp_path, env=user_env(),
                           capture_output=True, text=True, timeout=60)
    assert moved.returncode == 0 and moved.stdout == "imported\n", moved.stderr


def test_the_readme_has_a_section_naming_each_message_and_the_fixes() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0]
    for said in (PYTHONS_OWN, "``mandapi-resume: `import graph` finds", "pytest exits 2",
                 "hides mandapi-resume's nodes package", "first cell", "`mandapi-resume run ...`",
                 "rename your module (`my_graph.py`, `my_nodes/`)",
                 "a `scripts/` folder of your project does"):
        assert said in section, said
    assert "(#a-graphpy-or-nodes-of-your-own)" in readme.split(f"\n## {SECTION}\n", 1)[0]
