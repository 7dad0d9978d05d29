"""Approvals on Redis end to end (I12): a reply asking for writes pauses for review, an approval
applies exactly the approved text once and makes no request, a rejection writes nothing and tells
the model, and history shows each decision."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from graph.history import main as history_main
from tests.conftest import run_cli
from tests.test_approvals import TASK, Writer


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "log.txt").write_text("start\n")
    return folder


def _waiting(redis_url: str, out_dir: Path) -> tuple[str, Writer]:
    thread_id, model = f"w-{uuid.uuid4().hex[:10]}", Writer()
    out = run_cli(["--thread", thread_id, "--task", TASK, "--allow-writes", str(out_dir), "--once",
                   "--db", redis_url], model_factory=lambda m, s: model)
    assert (out["status"], out["exit_code"]) == ("awaiting_approval", 7)
    return thread_id, model


def test_approved_writes_are_applied_once_on_redis_without_a_request(
        redis_url: str, out_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    thread_id, model = _waiting(redis_url, out_dir)
    out = run_cli(["--thread", thread_id, "--approve", "w1", "--db", redis_url])
    assert (out["exit_code"], [c["decision"] for c in out["pending_calls"]]) == (7, ["approve", None])
    assert not (out_dir / "report.md").exists()
    out = run_cli(["--thread", thread_id, "--approve", "w2", "--db", redis_url])
    assert (out["status"], out["exit_code"], out["attempts"]) == ("ready", 0, 1)
    assert len(model.requests) == 1
    assert (out_dir / "report.md").read_text() == "# Shipping\n3 to 5 days [ship-01]\n"
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"
    out = run_cli(["--thread", thread_id, "--once", "--db", redis_url],
                  model_factory=lambda m, s: model)
    assert out["status"] == "done" and json.loads(out["answer"])["w1"].startswith("Approved")
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"
    capsys.readouterr()
    assert history_main(["--db", redis_url, "--thread", thread_id, "--json"]) == 0
    decisions = json.loads(capsys.readouterr().out)["decisions"]
    assert [(d["tool_call_id"], d["decision"], d["applied"]) for d in decisions] == [
        ("w1", "approve", True), ("w2", "approve", True)]


def test_rejected_write_is_never_done_on_redis_and_a_second_decision_is_refused(
        redis_url: str, out_dir: Path) -> None:
    thread_id, model = _waiting(redis_url, out_dir)
    run_cli(["--thread", thread_id, "--reject", "w1", "--reason", "wrong title", "--db", redis_url])
    again = run_cli(["--thread", thread_id, "--approve", "w1", "--db", redis_url])
    assert again["exit_code"] == 2
    assert run_cli(["--thread", thread_id, "--reject", "w2", "--db", redis_url])["exit_code"] == 0
    out = run_cli(["--thread", thread_id, "--once", "--db", redis_url],
                  model_factory=lambda m, s: model)
    assert "REJECTED" in json.loads(out["answer"])["w1"]
    assert not (out_dir / "report.md").exists()
    assert (out_dir / "log.txt").read_text() == "start\n"
