"""pytest plugin: the `mandapi_replay` fixture, to replay recorded threads in your tests.

Installed with the package (entry point `pytest11`), so any project that installs
mandapi-resume with pytest can write::

    def test_shipping_thread_still_works(mandapi_replay):
        result = mandapi_replay("tests/recordings/ship_1.json")
        assert result.status == "done"

It adds nothing else to a test run: no marker, no autouse fixture, one ini option
(`mandapi_replay_match`, the default comparison: `exact` or `messages_and_tools`), and
hooks that only read failure reports (below). Nothing of `graph` is imported until a
test uses the fixture. See `graph.replay.session` for what a replay checks and
`graph.replay` for how a recording is made.

Why a top-level module with its own name: the package's modules live under `graph`
and `nodes`, and a LangGraph project usually has a `graph.py`, `graph/` or `nodes/` of
its own, which `python -m pytest` (current folder first on `sys.path`) imports
instead. A plugin under `graph` would then fail to load and stop every test; this one
always loads. Only what needs our `graph` fails: a test module that imports
`graph.api` (a collection error) or a test that uses `mandapi_replay`. When a failure
of the session is such an import (`_SHADOWED`) and `graph` or `nodes` is indeed not
ours, the session ends with one line naming the file that hides ours and the fix
(`shadow_line`), and exit status 2 instead of 1: a usage problem, not a failing test.
A session whose tests need nothing of ours is left alone, whatever its `graph.py`.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import pytest

__all__ = ["mandapi_replay", "pytest_addoption", "pytest_configure", "shadow_line"]

_HERE = Path(__file__).resolve().parent
_PACKAGES = ("graph", "nodes")
"""This distribution's packages; each sits beside this module, installed or editable."""

_SHADOWED = re.compile(r"No module named '(?:graph|nodes)\.|'(?:graph|nodes)' is not a package"
                       r"|cannot import name \S+ from '(?:graph|nodes)'|hides mandapi-resume's nodes "
                       r"package|mandapi-resume: `import (?:graph|nodes)` finds")
"""A failure that is an import of ours gone wrong: Python's words when a `graph.py` or
`graph/` (or `nodes`) of the project is found first, `graph/__init__.py`'s when a
`nodes/` hides ours, or the fixture's own."""

_USAGE = 2
"""The exit status of a session that failed on a hidden package (our exit code for usage)."""


def _foreign(name: str) -> str | None:
    """Where `import name` finds a module that is not this distribution's, else None.

    Looked up with `importlib.util.find_spec`, which runs none of the project's code.

    Returns:
        The path of the project's `graph.py`, `graph/`, `nodes/` (or `nodes.py`) that
        is found first, or None when ours is found, or none at all (not installed: a
        case for pip, not for this line).
    """
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    places = [Path(p).resolve() for p in spec.submodule_search_locations or []]
    if _HERE / name in places:
        return None
    return str(places[0] if places else spec.origin)


def shadow_line() -> str | None:
    """The one line that says which of our packages is hidden, by what, and the fix; or None.

    Returns:
        "mandapi-resume: `import graph` finds <path>, not mandapi-resume's graph
        package ...: Rename yours ...", for the first of `graph` and `nodes` hidden; None when
        both are ours.
    """
    for name in _PACKAGES:
        where = _foreign(name)
        if where is not None:
            mine = f"my_{name}.py" if where.endswith(".py") else f"my_{name}/"
            return (f"mandapi-resume: `import {name}` finds {where}, not mandapi-resume's {name} "
                    f"package ({_HERE / name}): a {name}.py or {name}/ of this project comes first on "
                    f"sys.path. Rename yours ({mine}), or run `pytest --import-mode=importlib` (not "
                    "`python -m pytest`); mandapi-resume's commands are not affected when run as the "
                    "console script (mandapi-resume run ...)")
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    """Registers the ini option `mandapi_replay_match`."""
    parser.addini("mandapi_replay_match", "default request comparison of the mandapi_replay "
                  "fixture: exact or messages_and_tools", default="exact")


class _ShadowWatch:
    """Reads the session's failure reports; ends a session that failed on a hidden package.

    Registered by `pytest_configure`. Under pytest-xdist the controller sees every
    worker's reports, and decides.
    """

    def __init__(self) -> None:
        self.seen = False
        self.line: str | None = None

    def _note(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.failed and _SHADOWED.search(report.longreprtext):
            self.seen = True

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Exit status 2 (usage), not 1, when a failure was a hidden package of ours."""
        self.line = shadow_line() if self.seen else None
        if self.line is not None and session.exitstatus in (pytest.ExitCode.TESTS_FAILED,
                                                           pytest.ExitCode.INTERRUPTED):
            session.exitstatus = _USAGE

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The one line, in the summary (before pytest's short test summary)."""
        if self.line is not None:
            terminalreporter.write_line(self.line)


_WATCH = "mandapi_replay_shadow_watch"


def pytest_configure(config: pytest.Config) -> None:
    """Registers the watch for failures caused by a project's own `graph` or `nodes`."""
    if not config.pluginmanager.has_plugin(_WATCH):  # once, however often this module is named
        config.pluginmanager.register(_ShadowWatch(), _WATCH)


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
        shadowed = shadow_line()
        if shadowed is not None:
            pytest.fail(shadowed, pytrace=False)
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
