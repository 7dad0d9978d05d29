"""pytest plugin: the `mandapi_replay` fixture, to replay recorded threads in your tests.

Installed with the package (entry point `pytest11`), so any project that installs
mandapi-resume with pytest can write::

    def test_shipping_thread_still_works(mandapi_replay):
        result = mandapi_replay("tests/recordings/ship_1.json")
        assert result.status == "done"

It adds nothing else to a test run: no marker, no autouse fixture, one ini option
(`mandapi_replay_match`, the default comparison: `exact` or `messages_and_tools`).
Nothing of `graph` is imported until a test uses the fixture. See `graph.replay.session`
for what a replay checks and `graph.replay` for how a recording is made.

Why a top-level module with its own name: the package's modules live under `graph`,
and a LangGraph project usually has a `graph.py` or `graph/` of its own, which
`python -m pytest` (current folder first on `sys.path`) imports instead. A plugin
under `graph` would then fail to load and stop every test; this one always loads, and
only a test that uses `mandapi_replay` fails, saying which `graph` was found.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

__all__ = ["mandapi_replay", "pytest_addoption"]

_OURS = Path(__file__).resolve().parent / "graph"
"""Where this distribution's `graph` package is (beside this module, installed or editable)."""


def _shadowing_graph() -> str | None:
    """Where the importable `graph` is when it is not this package's, else None.

    Returns:
        The path of the module or folder that `import graph` finds instead of ours
        (a project's `graph.py` or `graph/`), or a sentence when none is found.
    """
    try:
        module = importlib.import_module("graph")
    except ImportError as exc:  # a broken local graph.py, or ours not installed
        return f"none that imports ({exc})"
    folders = [Path(p).resolve() for p in getattr(module, "__path__", [])]
    if _OURS in folders:
        return None
    return str(getattr(module, "__file__", None) or (folders[0] if folders else module))


def _shadowed_message(where: str) -> str:
    return (f"mandapi_replay: `import graph` finds {where}, not the mandapi-resume package ({_OURS}). "
            "A graph.py or graph/ in this project shadows it: `python -m pytest` puts the current "
            "folder first on sys.path, and bare `pytest` adds it too when a conftest.py sits at "
            "the project root or tests/ has an __init__.py. Run `pytest --import-mode=importlib` "
            "(or add it to addopts in your pytest configuration: pytest then leaves sys.path "
            "alone), run from another folder, or rename your graph module.")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Registers the ini option `mandapi_replay_match`."""
    parser.addini("mandapi_replay_match", "default request comparison of the mandapi_replay "
                  "fixture: exact or messages_and_tools", default="exact")


@pytest.fixture
def mandapi_replay(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Replays a recording against the current graph, offline; fails the test on a difference.

    Returns a function `replay(recording, *, match=None, db=None, workspace=None,
    allow_writes=None) -> ReplayResult`: `match` defaults to the ini option
    `mandapi_replay_match` (`exact`), `db` to a new SQLite file in `tmp_path`,
    `allow_writes` (for a thread that could write) to a new empty folder in `tmp_path`,
    and `workspace` to the recorded folder. The result has `status`, `answer`, `final`
    (the last `--json` outcome), `outcomes` and `requests` (each body sent).
    """
    default_match = request.config.getini("mandapi_replay_match")
    counter = iter(range(1_000_000))

    def replay(recording: str | Path, *, match: str | None = None,
               db: str | os.PathLike[str] | None = None,
               workspace: str | Path | None = None, allow_writes: str | Path | None = None) -> Any:
        shadow = _shadowing_graph()
        if shadow is not None:
            pytest.fail(_shadowed_message(shadow), pytrace=False)
        # Imported only now, after the check above: a project's own `graph` may shadow ours.
        from graph.errors import RunError  # noqa: PLC0415 - nothing of graph before the fixture is used
        from graph.replay.format import load_recording  # noqa: PLC0415 - as above
        from graph.replay.session import ReplayFailure  # noqa: PLC0415 - as above
        from graph.replay.session import replay as run_replay  # noqa: PLC0415 - as above

        number = next(counter)
        try:
            if allow_writes is None and load_recording(recording).thread.get("allow_writes"):
                allow_writes = tmp_path / f"replay-writes-{number}"
                allow_writes.mkdir()
            return run_replay(recording, match=match or default_match,
                              db=os.fspath(db) if db is not None else
                              str(tmp_path / f"replay-{number}.sqlite"),
                              workspace=workspace, allow_writes=allow_writes)
        except (ReplayFailure, RunError) as exc:  # a bad recording file fails the test too
            failure = f"mandapi_replay: {getattr(exc, 'message', exc)}"
        pytest.fail(failure, pytrace=False)  # outside `except`: no chained traceback

    return replay
