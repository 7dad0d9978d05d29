"""The README's examples run as shown.

Every ```sh block after a `<!-- ci:demo -->` or `<!-- ci:example NAME -->` comment is
run, in README order, in one new folder, offline (no MandAPI variables), with
`python -m` (and `.venv/bin/python -m`) replaced by this interpreter; the set-up steps
of the `ci:demo` block (`python3 -m venv`, `pip install`) are left out, since this
interpreter already has the project. What it prints must equal the ```text block that
follows it, after `normalized`: times, checkpoint ids and the absolute path of the
example folder may differ, and a shown line `…` stands for any lines left out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, subprocess_env

README = ROOT / "README.md"
_MARKER = re.compile(r"<!-- ci:(demo|example [\w-]+) -->")
_SETUP = re.compile(r"^\s*(python3? -m venv\b|\S*pip install\b)")
_PYTHON = re.compile(r"(?:\.venv/bin/)?\bpython3? -m ")
_NORMAL = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<checkpoint>"),
    (re.compile(r"(?:/[^\s/]+)+/(?=my-project\b)"), "<dir>/"),
]
ELIDED = "…"


def marked_blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """`(name, shell script, shown output lines)` of each marked block, in README order.

    The shown output is the ```text block right after the ```sh block (blank lines
    between them allowed); a block without one must print nothing.
    """
    lines, blocks, index = text.splitlines(), [], 0
    while index < len(lines):
        found = _MARKER.fullmatch(lines[index].strip())
        index += 1
        if not found:
            continue
        script, index = _fence(lines, index, "```sh")
        shown: list[str] = []
        after = index
        while after < len(lines) and not lines[after].strip():
            after += 1
        if after < len(lines) and lines[after].startswith("```text"):
            shown, index = _fence(lines, after, "```text")
        blocks.append((found.group(1).removeprefix("example "), "\n".join(script), shown))
    return blocks


def _fence(lines: list[str], index: int, opening: str) -> tuple[list[str], int]:
    """The lines of the first fenced block opening with `opening` at or after `index`."""
    while not lines[index].startswith(opening):
        assert not lines[index].startswith("```"), f"line {index + 1}: expected {opening}"
        index += 1
    end = lines.index("```", index + 1)
    return lines[index + 1:end], end + 1


def runnable(script: str) -> str:
    """`script` with the set-up steps left out and `python -m` run by this interpreter."""
    steps = [step for step in script.split("&&") if not _SETUP.match(step)]
    return _PYTHON.sub(f"{sys.executable} -m ", "&&".join(steps).strip())


def normalized(lines: list[str]) -> list[str]:
    """Lines with times, checkpoint ids and the example folder's path made uniform."""
    out = []
    for line in lines:
        for pattern, replacement in _NORMAL:
            line = pattern.sub(replacement, line)
        out.append(line.rstrip())
    return out


def matches(shown: list[str], printed: list[str]) -> bool:
    """True when `printed` is `shown`, each `…` line standing for zero or more lines."""
    if not shown:
        return not printed
    if shown[0] == ELIDED:
        return any(matches(shown[1:], printed[skip:]) for skip in range(len(printed) + 1))
    return bool(printed) and shown[0] == printed[0] and matches(shown[1:], printed[1:])


def test_marked_blocks_are_found_with_their_output() -> None:
    blocks = {name: (script, shown) for name, script, shown in marked_blocks(README.read_text())}
    assert {"demo", "abroad", "folder", "folder-history", "approval"} <= set(blocks)
    assert "done (attempts 2/4" in "\n".join(blocks["demo"][1])  # what .ci/run greps
    assert runnable(blocks["demo"][0]).startswith(f"{sys.executable} -m graph.run --thread task_abc")


def test_matching_allows_elision_and_nothing_else() -> None:
    assert matches(["a", ELIDED, "d"], ["a", "b", "c", "d"])
    assert matches(["a", ELIDED], ["a"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert normalized(["at 2026-11-29T21:56:30.755949+00:00 in /tmp/pytest-7/my-project  "]) == [
        "at <time> in <dir>/my-project"]


@pytest.mark.slow
def test_every_marked_readme_block_prints_what_the_readme_shows(tmp_path: Path) -> None:
    for name, script, shown in marked_blocks(README.read_text()):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", runnable(script)], cwd=tmp_path,
                              env=subprocess_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"README block {name!r} failed:\n{done.stdout}{done.stderr}"
        printed = normalized(done.stdout.splitlines())
        assert matches(normalized(shown), printed), (
            f"README block {name!r} printed (normalized):\n" + "\n".join(printed))
