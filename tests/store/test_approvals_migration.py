"""Databases whose `write_approvals` table predates the per-turn key keep working (I4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from graph.store import open_store
from graph.threads.history import thread_history
from tests.conftest import run_cli
from tests.step.test_approvals import TASK, Writer

LEGACY_DDL = """
CREATE TABLE write_approvals (
    thread_id     TEXT NOT NULL,
    tool_call_id  TEXT NOT NULL,
    tool          TEXT NOT NULL,
    args_sha256   TEXT NOT NULL,
    decision      TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    reason        TEXT,
    decided_at    TEXT NOT NULL,
    target        TEXT,
    before_sha256 TEXT,
    after_sha256  TEXT,
    result        TEXT NOT NULL,
    applied_at    TEXT,
    PRIMARY KEY (thread_id, tool_call_id)
)"""
LEGACY = ("thread_id", "tool_call_id", "tool", "args_sha256", "decision", "reason", "decided_at",
          "target", "before_sha256", "after_sha256", "result", "applied_at")


def make_legacy(backend, rows: list[dict[str, Any]]) -> None:
    """Replaces the table by the old shape holding `rows` (as the old code wrote them)."""
    backend.execute("DROP TABLE write_approvals")
    backend.execute(LEGACY_DDL)
    for row in rows:
        backend.execute(f"INSERT INTO write_approvals ({', '.join(LEGACY)}) VALUES "
                        f"({', '.join('?' for _ in LEGACY)})", tuple(row[c] for c in LEGACY))


def legacy_paused_thread(backend, out_dir: Path) -> Writer:
    """A thread paused on w1, w2 whose w1 was approved by the old code, plus an old row
    of an earlier call the attempt log does not know."""
    model = Writer()
    run_cli(["--thread", "w", "--task", TASK, "--allow-writes", str(out_dir), "--once",
             "--db", backend.db], model_factory=lambda m, s: model)
    run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])
    with open_store(backend.db, create=False) as store:
        (row,) = store.approvals.rows("w").values()
    orphan = {**row, "tool_call_id": "old_call", "decision": "reject", "reason": "no",
              "target": None, "result": "REJECTED by the reviewer: no. Nothing was written."}
    make_legacy(backend, [row, orphan])
    return model


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "log.txt").write_text("start\n")
    return folder


@pytest.mark.sql_only(
    "the legacy write_approvals table exists only in SQL databases; Redis never had it")
def test_history_reads_an_old_approvals_table_without_changing_it(backend, out_dir) -> None:
    legacy_paused_thread(backend, out_dir)
    before = backend.fingerprint()
    with open_store(backend.db, create=False, read_only=True) as store:
        decisions = thread_history(store, "w")["decisions"]
    assert {(d["step"], d["tool_call_id"], d["decision"]) for d in decisions} == {
        (1, "w1", "approve"), (0, "old_call", "reject")}
    assert backend.fingerprint() == before


@pytest.mark.sql_only(
    "the legacy write_approvals table exists only in SQL databases; Redis never had it")
def test_a_thread_paused_under_the_old_table_finishes_its_review(backend, out_dir) -> None:
    model = legacy_paused_thread(backend, out_dir)
    out = run_cli(["--thread", "w", "--db", backend.db])
    assert [c["decision"] for c in out["pending_calls"]] == ["approve", None], out
    out = run_cli(["--thread", "w", "--approve", "w2", "--db", backend.db])
    assert (out["exit_code"], out["status"]) == (0, "ready"), out
    assert (out_dir / "report.md").read_text() == "# Shipping\n3 to 5 days [ship-01]\n"
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"
    out = run_cli(["--thread", "w", "--once", "--db", backend.db], model_factory=lambda m, s: model)
    told = json.loads(out["answer"])
    assert told["w1"].startswith("Approved") and told["w2"].startswith("Approved")
    with open_store(backend.db, create=False, read_only=True) as store:
        decisions = thread_history(store, "w")["decisions"]
    assert {(d["step"], d["tool_call_id"], d["applied"]) for d in decisions} == {
        (1, "w1", True), (1, "w2", True), (0, "old_call", False)}


@pytest.mark.sql_only(
    "the legacy write_approvals table exists only in SQL databases; Redis never had it")
def test_the_migration_runs_once_and_keeps_every_row(backend, out_dir) -> None:
    legacy_paused_thread(backend, out_dir)
    for _ in range(2):
        with open_store(backend.db, create=False) as store:
            store.approvals.mark_applied("w", 9, "none")  # any write migrates first
            rows = store.approvals.rows("w")
        assert sorted(rows) == [(0, "old_call"), (1, "w1")]
