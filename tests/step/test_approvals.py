"""Writes happen only after a person approves the exact call, and at most once in effect."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from graph.history import main as history_main
from graph.store import open_store
from nodes.context import ModelReply
from tests.conftest import run_cli, subprocess_env
from tests.crash_child import WRITE_KILL_POINTS, child_main
from tests.forked import forkserver

TASK = "Write the shipping summary to report.md and log it."


def write_call(call_id: str, name: str, path: str, text: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps({"path": path, "text": text})}}


class Writer:
    """Asks for two writes and one read in one message, then answers from the results."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[list[dict[str, Any]]] = []

    def complete(self, messages, tools) -> ModelReply:
        self.requests.append(messages)
        self.tools.append(tools)
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if len(self.requests) == 1:
            return ModelReply({"role": "assistant", "content": "Writing the report.", "tool_calls": [
                write_call("w1", "write_file", "report.md", "# Shipping\n3 to 5 days [ship-01]\n"),
                write_call("w2", "append_file", "log.txt", "report written\n"),
                {"id": "r1", "type": "function",
                 "function": {"name": "get_reference", "arguments": '{"ref_id": "ship-01"}'}}]},
                usage)
        results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        return ModelReply({"role": "assistant", "content": json.dumps(results)}, usage)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "log.txt").write_text("start\n")
    return folder


def waiting_thread(backend, out_dir: Path) -> tuple[Writer, Any]:
    model = Writer()
    factory = lambda m, s: model  # noqa: E731
    out = run_cli(["--thread", "w", "--task", TASK, "--allow-writes", str(out_dir), "--once",
                   "--db", backend.db], model_factory=factory)
    assert (out["status"], out["exit_code"]) == ("awaiting_approval", 7)
    return model, factory


@pytest.mark.parametrize("once", [True, False])
def test_the_invocation_whose_reply_asks_for_a_write_reports_it_at_once(backend, out_dir: Path,
                                                                        once: bool) -> None:
    model = Writer()
    out = run_cli(["--thread", "w", "--task", TASK, "--allow-writes", str(out_dir),
                   *(["--once"] if once else []), "--db", backend.db],
                  model_factory=lambda m, s: model)
    assert (out["status"], out["exit_code"], out["attempts"]) == ("awaiting_approval", 7, 1)
    assert [c["tool_call_id"] for c in out["pending_calls"]] == ["w1", "w2"]
    assert out["pending_calls"][0]["arguments"] == (
        '{"path":"report.md","text":"# Shipping\\n3 to 5 days [ship-01]\\n"}')
    assert len(model.requests) == 1 and backend.ledger_row("w")[:2] == (1, 1)
    assert not (out_dir / "report.md").exists()
    assert (out_dir / "log.txt").read_text() == "start\n"


def test_waiting_thread_exits_7_and_never_requests(backend, out_dir: Path) -> None:
    model, factory = waiting_thread(backend, out_dir)
    before = backend.fingerprint()
    for argv in ([], ["--once"], ["--task", TASK]):
        out = run_cli(["--thread", "w", "--db", backend.db, *argv], model_factory=factory)
        assert (out["status"], out["exit_code"]) == ("awaiting_approval", 7)
        assert [c["tool_call_id"] for c in out["pending_calls"]] == ["w1", "w2"]
        assert all(len(c["sha256"]) == 64 for c in out["pending_calls"])
    assert len(model.requests) == 1 and backend.fingerprint() == before
    assert not (out_dir / "report.md").exists()


def test_approved_writes_are_applied_once_with_the_approved_text(
        backend, out_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, factory = waiting_thread(backend, out_dir)
    out = run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])
    assert (out["exit_code"], [c["decision"] for c in out["pending_calls"]]) == (7, ["approve", None])
    assert not (out_dir / "report.md").exists(), "nothing is written before every call is decided"
    out = run_cli(["--thread", "w", "--approve", "w2", "--db", backend.db])
    assert (out["status"], out["exit_code"], out["attempts"]) == ("ready", 0, 1)
    assert len(model.requests) == 1, "an approval never makes a model request"
    assert {"write_file", "append_file"} <= {t["function"]["name"] for t in model.tools[0]}
    assert (out_dir / "report.md").read_text() == "# Shipping\n3 to 5 days [ship-01]\n"
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"
    out = run_cli(["--thread", "w", "--once", "--db", backend.db], model_factory=factory)
    assert out["status"] == "done"
    told = json.loads(out["answer"])
    assert told["w1"].startswith("Approved") and told["r1"].startswith("{")
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"
    capsys.readouterr()
    assert history_main(["--db", backend.db, "--thread", "w", "--json"]) == 0
    decisions = json.loads(capsys.readouterr().out)["decisions"]
    assert [(d["tool_call_id"], d["decision"], d["applied"]) for d in decisions] == [
        ("w1", "approve", True), ("w2", "approve", True)]


def test_rejected_write_is_never_done_and_the_model_is_told(backend, out_dir: Path) -> None:
    model, factory = waiting_thread(backend, out_dir)
    run_cli(["--thread", "w", "--reject", "w1", "--reason", "wrong title", "--db", backend.db])
    again = run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])
    assert again["exit_code"] == 2  # a rejected call is decided: approving it is refused
    out = run_cli(["--thread", "w", "--reject", "w2", "--db", backend.db])
    assert out["exit_code"] == 0
    out = run_cli(["--thread", "w", "--once", "--db", backend.db], model_factory=factory)
    told = json.loads(out["answer"])
    assert "REJECTED" in told["w1"] and "wrong title" in told["w1"]
    assert not (out_dir / "report.md").exists()
    assert (out_dir / "log.txt").read_text() == "start\n"


def test_unknown_or_already_decided_calls_are_usage_errors(backend, out_dir: Path) -> None:
    waiting_thread(backend, out_dir)
    out = run_cli(["--thread", "w", "--approve", "nope", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])
    out = run_cli(["--thread", "w", "--reject", "w1", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert "already decided" in out["error"]


def test_arguments_tampered_after_approval_are_refused(backend, out_dir: Path) -> None:
    waiting_thread(backend, out_dir)
    run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])

    def tamper(values: dict) -> None:
        call = values["messages"][-1]["tool_calls"][0]
        call["function"]["arguments"] = json.dumps({"path": "report.md", "text": "EVIL"})

    backend.edit_values("w", tamper)
    out = run_cli(["--thread", "w", "--approve", "w2", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "tampered")
    assert not (out_dir / "report.md").exists()
    assert (out_dir / "log.txt").read_text() == "start\n"


def test_paths_outside_the_writable_folder_are_never_touched(backend, out_dir: Path,
                                                            tmp_path: Path) -> None:
    class Escaper(Writer):
        def complete(self, messages, tools):
            self.requests.append(messages)
            return ModelReply({"role": "assistant", "content": None, "tool_calls": [
                write_call("e1", "write_file", "../escape.txt", "x"),
                write_call("e2", "write_file", "/tmp/abs.txt", "x")]},
                {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})

    model = Escaper()
    run_cli(["--thread", "e", "--task", TASK, "--allow-writes", str(out_dir), "--once",
             "--db", backend.db], model_factory=lambda m, s: model)
    # Writes that could never be applied are tool errors at once, never shown for review.
    out = run_cli(["--thread", "e", "--once", "--db", backend.db])
    assert out["exit_code"] == 0 and out["status"] != "awaiting_approval", out
    assert not (tmp_path / "escape.txt").exists() and not Path("/tmp/abs.txt").exists()
    with open_store(backend.db, create=False) as store:
        from graph.agent import build_graph

        values = build_graph(store.checkpointer).get_state(
            {"configurable": {"thread_id": "e"}}).values
    results = [m["content"] for m in values["messages"] if m["role"] == "tool"]
    assert len(results) == 2 and all(text.startswith("TOOL ERROR") for text in results), results


def test_without_allow_writes_no_write_tool_exists(backend) -> None:
    model = Writer()
    run_cli(["--thread", "n", "--task", TASK, "--once", "--db", backend.db],
            model_factory=lambda m, s: model)
    out = run_cli(["--thread", "n", "--once", "--db", backend.db], model_factory=lambda m, s: model)
    assert out["exit_code"] == 0 and out["status"] == "done"
    told = json.loads(out["answer"])
    assert "unknown tool" in told["w1"] and "unknown tool" in told["w2"]
    offered = {t["function"]["name"] for tools in model.tools for t in tools}
    assert "get_reference" in offered and not offered & {"write_file", "append_file"}


@pytest.mark.sql_only(
    "the kill points hook SQL savers and tables (tests/crash_child.py), and a killed holder's Redis "
    "lease keeps the thread busy until it runs out (graph.store.redis.locks, deliberate); Redis: tests/test"
    "_concurrency.py::test_a_killed_redis_holders_lease_is_taken_over_after_it_runs_out_and_not_"
    "before, "
    "tests/store/redis/test_saver.py::test_a_put_killed_after_its_digest_leaves_the_thread_resumable")
@pytest.mark.slow
@pytest.mark.parametrize("kill_at", WRITE_KILL_POINTS)
def test_sigkill_during_an_approved_write_applies_it_exactly_once(
    backend, out_dir: Path, tmp_path: Path, kill_at: str
) -> None:
    waiting_thread(backend, out_dir)
    run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])
    ctx = forkserver()
    proc = ctx.Process(target=child_main, args=(
        ["--thread", "w", "--approve", "w2", "--db", backend.db, "--json"], kill_at,
        subprocess_env(), str(tmp_path), str(tmp_path / "child.txt")))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    out = run_cli(["--thread", "w", "--db", backend.db, "--once"])  # resume after the crash
    assert (out["exit_code"], out["status"]) == (0, "ready"), out
    assert not list(out_dir.glob(".*.tmp")), "a killed writer's temporary file is swept"
    assert (out_dir / "report.md").read_text() == "# Shipping\n3 to 5 days [ship-01]\n"
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"
    out = run_cli(["--thread", "w", "--db", backend.db])
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"


def test_history_shows_each_decision(backend, out_dir: Path) -> None:
    from graph.threads.history import thread_history

    waiting_thread(backend, out_dir)
    run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])
    run_cli(["--thread", "w", "--reject", "w2", "--reason", "not needed", "--db", backend.db])
    with open_store(backend.db, create=False, read_only=True) as store:
        decisions = thread_history(store, "w")["decisions"]
    assert [(d["tool_call_id"], d["decision"], d["reason"], d["applied"]) for d in decisions] == [
        ("w1", "approve", None, True), ("w2", "reject", "not needed", False)]
    assert all(len(d["args_sha256"]) == 64 and d["decided_at"] for d in decisions)
    # a rejected write shows the path it asked for (history showed "-")
    assert [d["target"] for d in decisions] == ["report.md", "log.txt"]


def test_two_approved_writes_to_one_file_in_one_message_both_apply_once(backend, out_dir) -> None:
    class TwoAppends(Writer):
        def complete(self, messages, tools):
            self.requests.append(messages)
            return ModelReply({"role": "assistant", "content": None, "tool_calls": [
                write_call("a1", "append_file", "log.txt", "one\n"),
                write_call("a2", "append_file", "log.txt", "two\n")]},
                {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})

    model = TwoAppends()
    run_cli(["--thread", "two", "--task", TASK, "--allow-writes", str(out_dir), "--once",
             "--db", backend.db], model_factory=lambda m, s: model)
    run_cli(["--thread", "two", "--db", backend.db])
    out = run_cli(["--thread", "two", "--approve", "a2", "--approve", "a1", "--db", backend.db])
    assert out["exit_code"] == 0, out
    assert (out_dir / "log.txt").read_text() == "start\none\ntwo\n"
    run_cli(["--thread", "two", "--db", backend.db])
    assert (out_dir / "log.txt").read_text() == "start\none\ntwo\n"


def test_writes_keep_file_modes_and_never_follow_a_planted_link(backend, out_dir, tmp_path) -> None:
    import os

    (out_dir / "log.txt").chmod(0o600)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    waiting_thread(backend, out_dir)
    for pid_guess in range(os.getpid(), os.getpid() + 3):
        (out_dir / f".report.md.{pid_guess}.tmp").symlink_to(victim)
    run_cli(["--thread", "w", "--approve", "w1", "--approve", "w2", "--db", backend.db])
    assert victim.read_text() == "untouched"
    assert not (out_dir / "report.md").is_symlink()
    assert (out_dir / "log.txt").stat().st_mode & 0o777 == 0o600


class OneAppend(Writer):
    """Asks for one append, then answers."""

    def complete(self, messages, tools) -> ModelReply:
        self.requests.append(messages)
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if len(self.requests) == 1:
            return ModelReply({"role": "assistant", "content": "Logging.", "tool_calls": [
                write_call("a1", "append_file", "log.txt", "report written\n")]}, usage)
        return ModelReply({"role": "assistant", "content": "Logged."}, usage)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted", "truncated after the header",
                                    "flipped header byte (salt)"])
@pytest.mark.parametrize("kill_at", WRITE_KILL_POINTS)
def test_a_lost_wal_after_a_killed_approved_append_never_applies_it_twice(
    sqlite_db: Path, out_dir: Path, tmp_path: Path, kill_at: str, damage: str
) -> None:
    """The write's plan reaches the database file before the write (I1's rule for effects)."""
    from tests.wal_damage import DAMAGE

    model = OneAppend()
    out = run_cli(["--thread", "w", "--task", TASK, "--allow-writes", str(out_dir), "--once",
                   "--db", str(sqlite_db)], model_factory=lambda m, s: model)
    assert out["exit_code"] == 7, out
    ctx = forkserver()
    proc = ctx.Process(target=child_main, args=(
        ["--thread", "w", "--approve", "a1", "--db", str(sqlite_db), "--json"], kill_at,
        subprocess_env(), str(tmp_path), str(tmp_path / "child.txt")))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    wal = sqlite_db.with_name(sqlite_db.name + "-wal")
    if wal.exists():
        DAMAGE[damage](wal)
    out = run_cli(["--thread", "w", "--db", str(sqlite_db), "--once"])
    if out["status"] == "awaiting_approval":  # the decision was lost with the -wal: decide again
        run_cli(["--thread", "w", "--approve", "a1", "--db", str(sqlite_db)])
    assert (out_dir / "log.txt").read_text() == "start\nreport written\n"


def test_a_rejection_reason_holding_the_api_key_is_refused_and_nothing_is_stored(
        backend, out_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-REASONMARKER-0123456789"
    monkeypatch.setenv("MANDAPI_API_KEY", key)
    waiting_thread(backend, out_dir)
    before = backend.fingerprint()
    out = run_cli(["--thread", "w", "--reject", "w1", "--reason", f"leaked {key}",
                   "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert "contains the API key" in out["error"] and key not in json.dumps(out)
    assert backend.fingerprint() == before
    assert key.encode() not in backend.dump()


def test_a_rejection_reason_that_is_not_utf8_is_a_usage_error_changing_nothing(
        backend, out_dir: Path) -> None:
    waiting_thread(backend, out_dir)
    before = backend.fingerprint()
    out = run_cli(["--thread", "w", "--reject", "w1", "--reason", "bad\udcff",
                   "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert "--reason must be valid UTF-8" in out["error"]
    assert backend.fingerprint() == before
