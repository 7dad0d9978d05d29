"""Documented module names that moved keep working for one release, with a warning (issue 27)."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = {
    "graph.thread_history": ("graph.threads.history", "thread_history"),
    "graph.tasks_file": ("graph.fleet.tasks_file", "read_tasks"),
    "graph.replay_session": ("graph.replay.session", "replay"),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_name_warns_and_gives_the_same_objects(old: str) -> None:
    new, name = MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018 - a name the new module lacks is missing here too


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_star_import_of_a_moved_name_gives_the_documented_names(old: str) -> None:
    new, name = MOVED[old]
    sys.modules.pop(old, None)
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning):
        exec(f"from {old} import *", namespace)  # noqa: S102 - the import form users write
    assert namespace[name] is getattr(importlib.import_module(new), name)
