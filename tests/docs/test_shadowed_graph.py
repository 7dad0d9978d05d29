"""A project's own `graph.py` shadows this package for imports: the README says so, and what to do."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import PYTHON, ROOT
from tests.replay.test_plugin import user_env

MESSAGE = "No module named 'graph.api'; 'graph' is not a package"


def test_the_readme_names_the_error_a_local_graph_module_causes_and_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "graph.py").write_text("GRAPH = 1\n")
    (tmp_path / "scripts").mkdir()
    script = "from graph.api import open_database\nprint('imported')\n"
    (tmp_path / "notebook_like.py").write_text(script)
    (tmp_path / "scripts/elsewhere.py").write_text(script)
    beside = subprocess.run([PYTHON, "notebook_like.py"], cwd=tmp_path, env=user_env(),
                            capture_output=True, text=True, timeout=60)
    assert beside.returncode == 1 and MESSAGE in beside.stderr
    moved = subprocess.run([PYTHON, "scripts/elsewhere.py"], cwd=tmp_path, env=user_env(),
                           capture_output=True, text=True, timeout=60)
    assert moved.returncode == 0 and moved.stdout == "imported\n", moved.stderr
    section = (ROOT / "README.md").read_text().split("## From Python", 1)[1].split("\n## ", 1)[0]
    assert MESSAGE in section and "a `scripts/` folder of your project does" in section
