"""pytest plugin: the `mandapi_replay` fixture, to replay recorded threads in your tests.

Installed with the package (entry point `pytest11`), so any project that installs
mandapi-resume with pytest can write::

    def test_shipping_thread_still_works(mandapi_replay):
        result = mandapi_replay("tests/recordings/ship_1.json")
        assert result.status == "done"

It adds nothing else to a test run: no marker, no autouse fixture, one ini option
(`mandapi_replay_match`, the default comparison: `exact` or `messages_and_tools`).
Nothing heavy is imported until a test uses the fixture. See `graph.replay_session`
for what a replay checks and `graph.replay` for how a recording is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


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

    def replay(recording: str | Path, *, match: str | None = None, db: str | None = None,
               workspace: str | Path | None = None, allow_writes: str | Path | None = None) -> Any:
        from graph.errors import RunError
        from graph.replay_format import load_recording
        from graph.replay_session import ReplayFailure
        from graph.replay_session import replay as run_replay

        number = next(counter)
        try:
            if allow_writes is None and load_recording(recording).thread.get("allow_writes"):
                allow_writes = tmp_path / f"replay-writes-{number}"
                allow_writes.mkdir()
            return run_replay(recording, match=match or default_match,
                              db=db or str(tmp_path / f"replay-{number}.sqlite"),
                              workspace=workspace, allow_writes=allow_writes)
        except (ReplayFailure, RunError) as exc:  # a bad recording file fails the test too
            failure = f"mandapi_replay: {getattr(exc, 'message', exc)}"
        pytest.fail(failure, pytrace=False)  # outside `except`: no chained traceback

    return replay
