"""One step checks and works out each thing once (issue 27: "check once per invocation").

A demo step of `graph.run` (in process, `main(argv)`) is run with counters on the
functions that check or work out a value: the thread id, the settings, the graph's
compilation, the SQLite file checks (made by the quick poll, then handed to the open
on a miss: `graph.store.sqlite.handoff`), the load of the thread's state and the
validation of each state. Each counter wraps the function wherever our modules
imported it, so a second call from anywhere is counted.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import graph.agent
import graph.checkpoints.load
import graph.settings
import graph.store.sqlite.access
import graph.store.sqlite.file
import graph.store.sqlite.names
from graph.run import main

TASK = "How long does shipping take at the demo shop?"

COUNTED: dict[str, Callable[..., Any]] = {
    "check_thread_id": graph.settings.check_thread_id,
    "resolve_settings": graph.settings.resolve_settings,
    "build_graph": graph.agent.build_graph,
    "check_sqlite_access": graph.store.sqlite.access.check_sqlite_access,
    "check_database": graph.store.sqlite.file.check_database,
    "check_one_name": graph.store.sqlite.names.check_one_name,
    "schema_needs_setup": graph.store.sqlite.file.schema_needs_setup,
    "load_thread": graph.checkpoints.load.load_thread,
    "check_values": graph.checkpoints.load.check_values,
}
"""What one step must do once (`check_values`: once per state it checks)."""


def _count_calls(monkeypatch: pytest.MonkeyPatch, calls: Counter[str],
                 validated: list[int]) -> None:
    """Wraps every function of `COUNTED` in every module of ours that holds it."""
    for name, func in COUNTED.items():
        def counted(*args: Any, _name: str = name, _func: Any = func, **kwargs: Any) -> Any:
            calls[_name] += 1
            if _name == "check_values":
                validated.append(id(args[0]))  # the state's values object
            return _func(*args, **kwargs)

        for module in list(sys.modules.values()):
            if module is not None and module.__name__.split(".")[0] in ("graph", "nodes") \
                    and getattr(module, name, None) is func:
                monkeypatch.setattr(module, name, counted)


def _step(capsys: pytest.CaptureFixture[str], db: Path, *extra: str) -> dict[str, Any]:
    code = main(["--thread", "t1", "--db", str(db), "--once", "--json", *extra])
    report = json.loads(capsys.readouterr().out)
    assert code == report["exit_code"] == 0, report
    return report


def test_a_demo_resume_step_checks_and_works_out_each_value_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "c.sqlite"
    _step(capsys, db, "--task", TASK)  # the README demo's first step creates the thread
    calls: Counter[str] = Counter()
    validated: list[int] = []
    _count_calls(monkeypatch, calls, validated)
    report = _step(capsys, db)  # its second: a resume that misses the quick poll
    assert report["status"] in ("ready", "done"), report
    final = 2 if report["status"] == "done" else 1  # a finished step checks its new state too
    assert dict(calls) == {
        "check_thread_id": 1, "resolve_settings": 1, "build_graph": 1,
        "check_sqlite_access": 1, "check_database": 1, "check_one_name": 1,
        "schema_needs_setup": 1, "load_thread": 1, "check_values": final,
    }
    assert len(set(validated)) == len(validated), "a state was validated twice"


def test_the_step_that_finishes_a_thread_checks_its_final_state_once_without_loading_it_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "c.sqlite"
    report = _step(capsys, db, "--task", TASK)
    for _ in range(10):
        calls: Counter[str] = Counter()
        validated: list[int] = []
        with monkeypatch.context() as patch:
            _count_calls(patch, calls, validated)
            report = _step(capsys, db)
        if report["status"] == "done":
            break
    assert report["status"] == "done", report
    assert calls["load_thread"] == 1 and calls["check_values"] == 2, calls
    assert len(set(validated)) == 2  # the state it resumed from, then the state it finished with
    again: Counter[str] = Counter()
    _count_calls(monkeypatch, again, [])
    assert _step(capsys, db)["status"] == "done"  # the summary it kept answers the poll
    assert again["load_thread"] == 0 and again["build_graph"] == 0, again


def test_a_poll_miss_hands_its_file_checks_only_for_the_same_unchanged_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from graph.store.sqlite import handoff

    db = tmp_path / "c.sqlite"
    _step(capsys, db, "--task", TASK)
    handoff.hand_on(str(db), read_only=False, checked=handoff.Checked(needs_setup=False))
    db.chmod(0o600)  # its change time moves: another file state than the one checked
    db.touch()
    calls: Counter[str] = Counter()
    _count_calls(monkeypatch, calls, [])
    assert handoff.take(str(db), read_only=False) is None  # changed since: checked again
    handoff.hand_on(str(db), read_only=False, checked=handoff.Checked(needs_setup=False))
    assert handoff.take(str(db), read_only=False) == handoff.Checked(needs_setup=False)
    assert handoff.take(str(db), read_only=False) is None  # taken once
