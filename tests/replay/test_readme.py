"""The README's "Replay tests" example runs as shown, in a project folder of its own."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, ROOT


def readme_block(tag: str) -> str:
    """The fenced block right after `<!-- tag -->` in the README."""
    found = re.search(rf"<!-- {re.escape(tag)} -->\n```\w+\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert found, f"README lost its {tag} block"
    return found.group(1)


@pytest.mark.slow  # three processes, one of them pytest
def test_the_readme_replay_example_runs_as_shown(tmp_path: Path) -> None:
    commands = readme_block("ci:replay-example").splitlines()
    project, tools = tmp_path / "project", tmp_path / "bin"
    (project / "tests").mkdir(parents=True)
    tools.mkdir()
    (project / "tests/test_recorded_threads.py").write_text(readme_block("ci:replay-example-test"))
    python = tools / "python"  # `python` in the README is this environment's interpreter
    python.write_text(f'#!/bin/sh\nexec "{PYTHON}" "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("MANDAPI_", "GRAPH_", "PYTEST_"))}
    env["PATH"] = f"{tools}:{env['PATH']}"
    assert commands[0].startswith("pip install -e"), "the example starts by installing the package"
    outputs = []
    for command in commands[1:]:  # installed already: this is the environment it installs into
        done = subprocess.run(["sh", "-c", command], cwd=project, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    assert ("thread ship_1: 2 exchange(s) written to tests/recordings/ship_1.json (status done)"
            in "".join(outputs))
    assert "1 passed" in outputs[-1]


def test_the_readme_replay_install_brings_pytest_which_it_then_runs() -> None:
    import tomllib

    from packaging.requirements import Requirement

    commands = readme_block("ci:replay-example").splitlines()
    extras = re.search(r"\[([\w,]+)\]", commands[0])
    assert extras, "the example installs the package with an extra"
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    installed = {Requirement(req).name for extra in extras.group(1).split(",")
                 for req in optional[extra]}
    assert any("python -m pytest" in command for command in commands)
    assert {"pytest", "vcrpy"} <= installed
