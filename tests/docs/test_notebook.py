"""The notebook uses only the public API, runs top to bottom in a fresh kernel, leaves no file
behind, and is committed with outputs cleared."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import graph.api
from tests.conftest import ROOT, subprocess_env

NOTEBOOK = ROOT / "notebooks" / "thread_history.ipynb"
OURS = ("graph", "nodes")


def code_of(notebook: nbformat.NotebookNode) -> str:
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")


def imports_of_ours(code: str) -> list[tuple[str, str]]:
    """`(module, name)` of every import of `graph` or `nodes` in `code` (`name` "*" for a module)."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [(alias.name, "*") for alias in node.names if alias.name.split(".")[0] in OURS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS:
            found += [(node.module or "", alias.name) for alias in node.names]
    return found


def non_public(code: str) -> list[str]:
    """Every import of ours in `code` that is not a name of `graph.api.__all__`."""
    return [f"{module}:{name}" for module, name in imports_of_ours(code)
            if module != "graph.api" or name not in graph.api.__all__]


def execute(notebook: nbformat.NotebookNode, folder: Path, temp: Path) -> None:
    """Runs `notebook` in a new kernel working in `folder`, its temporary files in `temp`."""
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute(
        env=subprocess_env(TMPDIR=str(temp)))


def test_notebook_is_committed_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_the_import_check_sees_internals_and_names_outside_the_public_api() -> None:
    assert non_public("from graph.api import open_database, RunError\nimport json\n") == []
    assert non_public("from graph.run import run\nimport nodes.tools\nfrom graph.api import Settings\n"
                      "import graph.api\nfrom graph import api\n") == [
        "graph.run:run", "nodes.tools:*", "graph.api:Settings", "graph.api:*", "graph:api"]


def test_the_notebook_imports_only_names_of_the_public_api() -> None:
    code = code_of(nbformat.read(NOTEBOOK, as_version=4))
    assert imports_of_ours(code), "the notebook imports graph.api"
    assert non_public(code) == []


@pytest.mark.slow
def test_notebook_executes_every_cell_and_leaves_no_file_behind(tmp_path: Path) -> None:
    folder, temp = tmp_path / "work", tmp_path / "tmp"
    folder.mkdir()
    temp.mkdir()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    execute(notebook, folder, temp)
    outputs = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                      for o in c.outputs)
    assert list(temp.iterdir()) == [] and list(folder.iterdir()) == []
    assert "done (attempts 2/4" in outputs and "[ship-01]" in outputs
    assert f"removed {temp}" in outputs  # its database was in the temporary folder
