"""Stored conversations that break the pairing rule are `damaged`, naming where to fork (I6).

Each conversation of `tests/pairing_corpus.py` is stored as an edit would store it (a
new checkpoint, written by LangGraph's own `update_state`, bypassing our checks as the
Studio server's does) into one SQLite database, one thread per case. `graph.verify`
lists every broken thread and no intact one; `graph.run` refuses each broken thread
(exit 4, `damaged`), names the checkpoint before the edit to fork from, sends nothing
and leaves the stored data as it was.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from graph.agent import build_graph
from graph.run import main as run_main
from graph.store import open_store
from graph.verify import main as verify_main
from nodes.state import REPLACE
from tests.pairing_corpus import BROKEN, INTACT

TASK = "How long does shipping take at the demo shop?"
STORED_INTACT = {k: v for k, v in INTACT.items()
                 if sum(m["role"] == "assistant" for m in v) <= 1}
"""Intact cases a one-attempt thread may hold (more replies than attempts is other damage)."""
CASES = {**{f"broken {k}": v for k, v in BROKEN.items()},
         **{f"intact {k}": v for k, v in STORED_INTACT.items()}}


def _thread_id(case: str) -> str:
    return "t" + str(sorted(CASES).index(case))


def _checkpoints(db: str, thread_id: str) -> int:
    with open_store(db, create=False, read_only=True) as store:
        return store.count_checkpoints(thread_id)


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """The database with one edited thread per case, and each thread's checkpoint before its edit."""
    db = str(tmp_path_factory.mktemp("pairing") / "edits.sqlite")
    before: dict[str, str] = {}
    for case in sorted(CASES):
        thread_id = _thread_id(case)
        assert run_main(["--thread", thread_id, "--task", TASK, "--once", "--db", db]) == 0
        with open_store(db, create=False) as store:
            graph = build_graph(store.checkpointer)
            config = {"configurable": {"thread_id": thread_id}}
            snapshot = graph.get_state(config)
            before[case] = snapshot.config["configurable"]["checkpoint_id"]
            task = snapshot.values["messages"][0]
            graph.update_state(config, {"messages": {REPLACE: [task, *CASES[case]]}}, as_node="tools")
    return db, before


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out)


def test_verify_lists_every_broken_conversation_and_no_intact_one(
        edited: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = edited
    assert len(BROKEN) >= 30
    assert verify_main(["--db", db, "--json"]) == 4
    problems = _json(capsys)["problems"]
    flagged = {p.split("thread '", 1)[1].split("'", 1)[0] for p in problems}
    assert flagged == {_thread_id(f"broken {k}") for k in BROKEN}, problems


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_run_refuses_a_broken_stored_conversation_naming_the_checkpoint_to_fork_from(
        edited: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str], case: str) -> None:
    db, before = edited
    thread_id = _thread_id(f"broken {case}")
    stored = _checkpoints(db, thread_id)
    code = run_main(["--thread", thread_id, "--once", "--db", db, "--json"])
    out = _json(capsys)
    assert (code, out["exit_code"], out["error_code"]) == (4, 4, "damaged"), out
    assert f"fork from checkpoint {before[f'broken {case}']}" in out["error"]
    assert out["attempts"] is None and _checkpoints(db, thread_id) == stored


@pytest.mark.parametrize("case", sorted(STORED_INTACT))
def test_run_continues_a_conversation_that_keeps_the_rule(
        edited: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str], case: str) -> None:
    db, _ = edited
    code = run_main(["--thread", _thread_id(f"intact {case}"), "--once", "--db", db, "--json"])
    out = _json(capsys)
    assert (code, out["error_code"]) == (0, None), out
