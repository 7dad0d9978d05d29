"""A Python without the project's dependencies gets an install hint and exit 2, not a traceback.

`python3 -m graph.run` run with the system's Python instead of the virtual environment's
printed a `ModuleNotFoundError` traceback (exit 1, which the exit-code table keeps for our
bugs). A real interpreter without the packages (a new virtual environment made with
`--without-pip`, so it holds nothing) runs the commands here, from the project folder as a
user would; `graph/__init__.py` refuses before any face imports a dependency.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from graph.errors import missing_dependency
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    return str(folder / "bin" / "python")


def _run(python: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    return subprocess.run([python, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize("face", ["graph.run", "graph.history", "graph.verify"])
def test_a_command_on_a_python_without_the_dependencies_exits_2_with_the_install_hint(
        bare_python: str, face: str, tmp_path: Path) -> None:
    db = str(tmp_path / "c.sqlite")
    done = _run(bare_python, "-m", face, "--db", db, *(["--thread", "t"] if face == "graph.run" else []))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.startswith("error (usage): this Python (") and "cannot import 'langgraph'" \
        in done.stderr and "pip install -e ." in done.stderr, done.stderr
    as_json = _run(bare_python, "-m", face, "--db", db, "--json")
    assert as_json.returncode == 2 and as_json.stderr == ""
    shown = json.loads(as_json.stdout)
    assert (shown["error_code"], shown["exit_code"]) == ("usage", 2)
    assert not Path(db).exists(), "nothing was written"


def test_an_import_on_a_python_without_the_dependencies_raises_import_error_with_the_hint(
        bare_python: str) -> None:
    done = _run(bare_python, "-c", "import graph.api")
    assert done.returncode == 1  # an uncaught ImportError in the user's own script
    assert done.stderr.rstrip().splitlines()[-1].startswith(
        "ImportError: this Python (") and "pip install -e ." in done.stderr


def test_a_missing_extra_names_the_extra_and_a_missing_project_module_stays_a_bug() -> None:
    for name, extra in [("psycopg", "postgres"), ("langgraph.checkpoint.postgres", "postgres"),
                        ("procrastinate", "postgres"), ("redis", "redis"),
                        ("langgraph.checkpoint.redis.aio", "redis"), ("vcr", "replay"),
                        ("langgraph_api", "studio")]:
        usage = missing_dependency(ModuleNotFoundError(f"No module named {name!r}", name=name))
        assert usage is not None and usage.exit_code == 2
        assert f"pip install -e '.[{extra}]' (the {extra} extra)" in usage.message, name
    base = missing_dependency(ModuleNotFoundError("No module named 'httpx'", name="httpx"))
    assert base is not None and base.message.endswith("pip install -e .")
    assert sys.executable in base.message
    for ours in ("graph.store.redis", "nodes.ranking", "graph"):
        assert missing_dependency(ModuleNotFoundError("gone", name=ours)) is None
    assert missing_dependency(ValueError("not an import")) is None
