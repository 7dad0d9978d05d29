"""What a step reads and writes beyond its anchor: each read once, compaction stored as an edit."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from graph.checkpoints.load import graph_of
from graph.settings import Settings, ThreadSpec
from graph.step.advance import StepRequest, advance
from graph.store import open_store
from graph.store.saver import CheckedSaver
from graph.store.sql.ledger import SqlLedger
from nodes.compaction import compact, edit_script
from nodes.state import EDIT, append_messages
from tests.fakes import NeverFinishes
from tests.nodes.test_compaction_estimate import _conversation


def _step(store: Any, model: Any, *, task: str | None = None, **limits: Any) -> Any:
    request = StepRequest(ThreadSpec("t", task=task, **limits))
    return advance(store, request, Settings(db=store.location), model_factory=lambda m, s: model)


def test_an_edit_rebuilds_every_compacted_conversation_from_slices_of_the_stored_one() -> None:
    rng = random.Random(5)
    for _ in range(80):
        stored = _conversation(rng, rng.randint(2, 15))
        compacted = compact(stored, rng.randint(300, 8000))
        pieces = edit_script(stored, compacted)
        assert append_messages(stored, {EDIT: pieces}) == compacted
        kept = sum(p[1] - p[0] for p in pieces if isinstance(p, list))
        assert kept + sum(1 for p in pieces if isinstance(p, dict)) == len(compacted)


@pytest.mark.parametrize("piece", [[0, 9], [2, 1], [-1, 1], [0], [True, 1], ["0", "1"]])
def test_an_edit_naming_a_slice_the_list_does_not_have_is_refused(piece: list[Any]) -> None:
    with pytest.raises(ValueError, match="an edit keeps messages"):
        append_messages([{"role": "user", "content": "q"}] * 3, {EDIT: [piece]})


def test_a_compacting_step_stores_what_changed_not_the_whole_conversation(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    with open_store(str(db), create=True) as store:
        _step(store, NeverFinishes(), task="How long does shipping take?", max_attempts=40,
              context_tokens=1500, keep_checkpoints=3)
        for _ in range(12):
            assert _step(store, NeverFinishes()).error_code is None
        state = graph_of(store).get_state({"configurable": {"thread_id": "t"}}).values
    assert state["messages"][1]["content"].startswith("[compacted]")  # the evidence index
    with closing(sqlite3.connect(db)) as conn:
        checkpoint = conn.execute("SELECT max(length(checkpoint)) FROM checkpoints").fetchone()[0]
        writes = conn.execute("SELECT max(length(value)) FROM writes "
                              "WHERE channel = 'messages'").fetchone()[0]
    assert writes * 2 < checkpoint


def test_a_step_reads_the_thread_three_times_and_its_ledger_row_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = {"checkpoint": 0, "ledger": 0}
    get_tuple, row = CheckedSaver.get_tuple, SqlLedger.row

    def counted_get_tuple(self: Any, config: Any) -> Any:
        reads["checkpoint"] += 1
        return get_tuple(self, config)

    def counted_row(self: Any, thread_id: str) -> Any:
        reads["ledger"] += 1
        return row(self, thread_id)

    monkeypatch.setattr(CheckedSaver, "get_tuple", counted_get_tuple)
    monkeypatch.setattr(SqlLedger, "row", counted_row)
    with open_store(str(tmp_path / "c.sqlite"), create=True) as store:
        model = NeverFinishes()
        _step(store, model, task="How long does shipping take?", max_attempts=9)
        for _ in range(3):
            reads.update(checkpoint=0, ledger=0)
            assert _step(store, model).error_code is None
            # Loading it, LangGraph's own read when invoked, the outcome after it; the
            # ledger row when loading (the count returns the row it updated).
            assert reads == {"checkpoint": 3, "ledger": 1}


def test_writes_saved_late_for_a_checkpoint_out_of_the_window_go_with_it(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    with open_store(str(db), create=True) as store:
        _step(store, NeverFinishes(), task="How long does shipping take?", keep_checkpoints=1)
        latest = store.checkpointer.get_tuple({"configurable": {"thread_id": "t"}})
        assert latest is not None and latest.parent_config is not None
        # LangGraph saves a task's writes on a background thread and waits only for the
        # next checkpoint's put: these arrive for a checkpoint the put already trimmed.
        store.checkpointer.put_writes(latest.parent_config, [("progress", {})], "late")
        store.commit()  # as after every graph call
        with closing(sqlite3.connect(db)) as conn:
            ids = {r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints")}
            written = {r[0] for r in conn.execute("SELECT checkpoint_id FROM writes")}
            digested = {r[0] for r in conn.execute(
                "SELECT checkpoint_id FROM checkpoint_digests WHERE thread_id = 't'")}
    assert ids == {latest.config["configurable"]["checkpoint_id"]}
    assert written <= ids and digested <= ids


def test_a_compacting_reply_whose_routing_failed_is_kept_exactly(backend, monkeypatch) -> None:
    import graph.agent
    from nodes.request import prepare_request
    from tests.conftest import run_cli
    from tests.step.test_routing_failures import _flaky

    model = NeverFinishes()
    argv = ["--thread", "t", "--once", "--db", backend.db]
    run_cli([*argv, "--task", "How long does shipping take?", "--max-attempts", "20",
             "--context-tokens", "1500"], model_factory=lambda m, s: model)
    for _ in range(8):
        assert run_cli(argv, model_factory=lambda m, s: model)["exit_code"] == 0
    with open_store(backend.db, create=False, read_only=True) as store:
        before = graph_of(store).get_state({"configurable": {"thread_id": "t"}}).values
    monkeypatch.setattr(graph.agent, "route_after_reason",
                        _flaky(graph.agent.route_after_reason))
    out = run_cli(argv, model_factory=lambda m, s: model)  # tools, budget, reason: its router fails
    assert (out["exit_code"], out["error_code"], out["_next"]) == (6, "step_failed", ["tools"])
    with open_store(backend.db, create=False, read_only=True) as store:
        after = graph_of(store).get_state({"configurable": {"thread_id": "t"}}).values
    # What reason saw: the stored conversation after tools ran; it kept it compacted.
    seen = [*before["messages"], {"role": "tool", "tool_call_id": after["messages"][-2][
        "tool_call_id"], "content": after["messages"][-2]["content"]}]
    expected = prepare_request(before["thread"], seen).compacted
    assert expected != seen, "the step compacted"
    assert after["messages"][:-1] == expected
    assert after["messages"][-1]["tool_calls"][0]["id"] == f"call_{len(model.requests)}"
    assert run_cli(argv, model_factory=lambda m, s: model)["exit_code"] == 0
