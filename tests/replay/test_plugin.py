"""The `mandapi_replay` pytest plugin: what it adds to a test run, and how a failure reads."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, ROOT

pytest_plugins = ["pytester"]

RECORDING = ROOT / "tests/fixtures/recordings/shipping.json"


def user_env() -> dict[str, str]:
    """A user's environment: this virtualenv's packages, no PYTHONPATH, no MandAPI variables."""
    return {k: v for k, v in os.environ.items()
            if k != "PYTHONPATH" and not k.startswith(("MANDAPI_", "GRAPH_", "PYTEST_"))}


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = ("import sys, mandapi_resume_pytest; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'langgraph', 'langchain_core', 'httpx', 'vcr', 'yaml', 'nodes', 'graph'}))")
    done = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=user_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_plugin_adds_no_marker_no_autouse_fixture_and_only_hooks_that_read_failures(
        request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("mandapi_replay")  # loaded by its entry point
    assert not [m for m in request.config.getini("markers") if "replay" in m]
    tree = ast.parse((ROOT / "mandapi_resume_pytest.py").read_text())
    hooks = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("pytest_")]
    assert hooks == ["pytest_addoption", "pytest_configure"]  # the ini option; the watch below
    [watch] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_ShadowWatch"]
    assert sorted(n.name for n in watch.body if isinstance(n, ast.FunctionDef)
                  and n.name.startswith("pytest_")) == [
        "pytest_collectreport", "pytest_runtest_logreport", "pytest_sessionfinish", "pytest_terminal_summary"]
    assert not [k for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "autouse"]
    assert request.config.getini("mandapi_replay_match") == "exact"


def test_a_failing_replay_reads_as_a_diff_and_the_ini_option_loosens_the_match(
        pytester: pytest.Pytester) -> None:
    """Two pytest sessions in this process: what a failure reads like is pytest's report,
    not the interpreter's (the sessions below that depend on `sys.path` run as processes)."""
    data = json.loads(RECORDING.read_text())
    for item in data["interactions"]:
        item["request"]["body"]["json"]["model"] = "another-model"
    (pytester.path / "renamed.json").write_text(json.dumps(data))
    pytester.makepyfile(test_renamed=(
        "def test_renamed(mandapi_replay):\n"
        "    assert mandapi_replay('renamed.json').status == 'done'\n"))

    failed = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    assert failed.ret == 1, failed.stdout.str()
    out = failed.stdout.str()
    headline = "mandapi_replay: request 1 of 3 (attempt 1) differs from renamed.json (match=exact):"
    assert headline in out
    assert '-model: "another-model"' in out and '+model: "mandapi-large"' in out
    assert "During handling" not in out and "Traceback" not in out
    passed = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider",
                                          "-o", "mandapi_replay_match=messages_and_tools")
    assert passed.ret == 0 and "1 passed" in passed.stdout.str(), passed.stdout.str()


def test_a_projects_own_graph_module_fails_only_the_tests_that_replay_with_a_clear_message(
        tmp_path: Path) -> None:
    (tmp_path / "graph.py").write_text("from langgraph.graph import StateGraph\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_x.py").write_text(
        "def test_unrelated():\n    assert 1 + 1 == 2\n\n"
        f"def test_replays(mandapi_replay):\n    mandapi_replay({str(RECORDING)!r})\n")
    done = subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr  # tests ran; one failed (not 3: no start)
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    assert (f"mandapi-resume: `import graph` finds {tmp_path / 'graph.py'}, not mandapi-resume's graph "
            "package") in done.stdout
    assert "run `pytest --import-mode=importlib`" in done.stdout
    assert "Traceback" not in done.stdout


@pytest.mark.slow  # a pytest process
@pytest.mark.parametrize("layout", ["plain", "package-and-conftest"])
def test_pytest_in_importlib_mode_replays_next_to_a_projects_own_graph_module(
        tmp_path: Path, layout: str) -> None:
    (tmp_path / "graph.py").write_text("from langgraph.graph import StateGraph\n")
    (tmp_path / "tests").mkdir()
    if layout == "package-and-conftest":  # both make pytest's default mode add the folder
        (tmp_path / "tests/__init__.py").write_text("")
        (tmp_path / "conftest.py").write_text("")
    (tmp_path / "tests/test_x.py").write_text(
        "def test_replays(mandapi_replay):\n"
        f"    assert mandapi_replay({str(RECORDING)!r}).status == 'done'\n")
    done = subprocess.run([str(Path(PYTHON).parent / "pytest"), "-q", "-p", "no:cacheprovider",
                           "--import-mode=importlib", "tests"],
                          cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
