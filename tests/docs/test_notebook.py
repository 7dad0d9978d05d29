"""The notebook runs top to bottom in a fresh kernel, and is committed with outputs cleared."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "thread_history.ipynb"


def test_notebook_is_committed_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.slow
def test_notebook_executes_every_cell(tmp_path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                      for o in c.outputs)
    assert "done (attempts 2/4" in outputs and "[ship-01]" in outputs
