"""A thread keeps only its latest checkpoints; nothing it needs, and no step of its log, is lost."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from graph.checkpoints.load import graph_of
from graph.copy import main as copy_main
from graph.history import main as history_main
from graph.prune import main as prune_main
from graph.store import is_redis, open_store
from graph.threads.history import thread_history
from graph.verify import verify
from nodes.context import NoAttemptLog, StepContext
from nodes.state import DEFAULT_KEEP_CHECKPOINTS, SCHEMA_VERSION
from tests.conftest import ROOT, SqliteBackend, run_cli, subprocess_env
from tests.crash_child import child_main
from tests.fakes import NeverFinishes, ScriptedModel, answer_reply, tool_call_reply
from tests.forked import forkserver as preloaded_forkserver

TASK = "How long does shipping take at the demo shop?"
_WRITES = {"sqlite": "writes", "postgres": "checkpoint_writes"}


def _factory(model: Any) -> Any:
    return lambda model_id, settings: model


def _rows(backend: Any, sql: str, params: tuple = ()) -> list[tuple]:
    if backend.name == "sqlite":
        with sqlite3.connect(backend.db) as conn:
            return conn.execute(sql, params).fetchall()
    import psycopg

    with psycopg.connect(backend.db, autocommit=True) as conn:
        return conn.execute(sql.replace("?", "%s"), params).fetchall()


def _redis_stored(backend: Any, thread_id: str) -> dict[str, Any]:
    """`stored` on Redis: ids in the keys of LangGraph's documents and of our digest hashes."""
    from graph.store.redis.conn import connect

    def ids(pattern: str, cut: Any) -> set[str]:
        with connect(backend.db) as client:
            return {cut(key.decode()) for key in client.scan_iter(match=pattern.encode())}

    return {
        "checkpoints": ids(f"checkpoint:{thread_id}:__empty__:*", lambda k: k.split(":")[3]),
        "writes": ids(f"checkpoint_write:{thread_id}:__empty__:*", lambda k: k.split(":")[3]),
        "digests": ids(f"mandapi-resume:digest:{thread_id}\0*", lambda k: k.split("\0")[2]),
    }


def stored(backend: Any, thread_id: str) -> dict[str, Any]:
    """The thread's stored rows: checkpoint ids, ids its writes and digests belong to, blobs."""
    if backend.name == "redis":
        return _redis_stored(backend, thread_id)
    ids = {r[0] for r in _rows(backend, "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?",
                               (thread_id,))}
    found = {
        "checkpoints": ids,
        "writes": {r[0] for r in _rows(backend, f"SELECT checkpoint_id FROM {_WRITES[backend.name]}"
                                                " WHERE thread_id = ?", (thread_id,))},
        "digests": {r[0] for r in _rows(backend, "SELECT checkpoint_id FROM checkpoint_digests "
                                                 "WHERE thread_id = ?", (thread_id,))},
    }
    if backend.name == "postgres":
        referenced = {(k, v) for (versions,) in _rows(
            backend, "SELECT checkpoint -> 'channel_versions' FROM checkpoints WHERE thread_id = ?",
            (thread_id,)) for k, v in versions.items()}
        found["unreferenced_blobs"] = {
            (c, v) for c, v in _rows(backend, "SELECT channel, version FROM checkpoint_blobs "
                                              "WHERE thread_id = ?", (thread_id,))} - referenced
    return found


def assert_window(backend: Any, thread_id: str, keep: int) -> None:
    rows = stored(backend, thread_id)
    assert len(rows["checkpoints"]) == keep, rows
    assert rows["writes"] <= rows["checkpoints"] and rows["digests"] <= rows["checkpoints"]
    assert not rows.get("unreferenced_blobs"), rows


def long_thread(backend: Any, keep: str, attempts: int = 12, thread_id: str = "t") -> NeverFinishes:
    model = NeverFinishes()
    out = run_cli(["--thread", thread_id, "--task", TASK, "--max-attempts", str(attempts),
                   "--keep-checkpoints", keep, "--db", backend.db], model_factory=_factory(model))
    assert (out["status"], out["attempts"]) == ("exhausted", attempts), out
    return model


def test_the_window_holds_after_many_steps_and_the_log_keeps_every_step(backend) -> None:
    long_thread(backend, "3")
    assert_window(backend, "t", 3)
    for _ in range(3):  # resumed invocations of the finished thread change nothing
        assert run_cli(["--thread", "t", "--db", backend.db])["status"] == "exhausted"
    assert_window(backend, "t", 3)
    with open_store(backend.db, create=False, read_only=True) as store:
        history = thread_history(store, "t")
    assert [s["step"] for s in history["steps"]] == list(range(1, 13))
    assert all(s["outcome"] == "tool_calls" for s in history["steps"])
    assert all(s["tool_calls"][0]["observation"] for s in history["steps"][:-1])  # whole text
    assert history["checkpoints_trimmed"] and len(history["checkpoints"]) == 3
    assert history["header"]["keep_checkpoints"] == 3


def test_one_kept_checkpoint_is_enough_to_finish_a_thread(backend) -> None:
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2"), answer_reply("ok [ship-01]")])
    for argv in (["--task", TASK, "--keep-checkpoints", "1"], [], []):
        out = run_cli(["--thread", "t", "--once", "--db", backend.db, *argv],
                      model_factory=_factory(model))
        assert_window(backend, "t", 1)
    assert (out["status"], out["attempts"], len(model.requests)) == ("done", 3, 3)


def test_all_keeps_every_checkpoint(backend) -> None:
    long_thread(backend, "all", attempts=4)
    assert len(stored(backend, "t")["checkpoints"]) > 3 * 4
    with open_store(backend.db, create=False, read_only=True) as store:
        history = thread_history(store, "t")
    assert not history["checkpoints_trimmed"] and history["header"]["keep_checkpoints"] == "all"


def test_the_default_window_is_the_documented_one(backend) -> None:
    long_thread(backend, str(DEFAULT_KEEP_CHECKPOINTS), thread_id="given")
    model = NeverFinishes()
    run_cli(["--thread", "default", "--task", TASK, "--max-attempts", "12", "--db", backend.db],
            model_factory=_factory(model))
    assert len(stored(backend, "default")["checkpoints"]) == DEFAULT_KEEP_CHECKPOINTS
    assert f"default {DEFAULT_KEEP_CHECKPOINTS}" in (ROOT / "README.md").read_text()


def test_the_window_given_on_the_command_line_is_what_history_shows(backend, capsys) -> None:
    for argv in (["--task", TASK, "--keep-checkpoints", "2"], []):
        assert run_cli(["--thread", "t", "--once", "--db", backend.db, *argv])["exit_code"] == 0
    capsys.readouterr()
    assert history_main(["--db", backend.db, "--thread", "t", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoints_total"] == 2


@pytest.mark.parametrize(("created", "given"), [("10", "3"), ("10", "all"), ("all", "10")])
def test_another_window_on_resume_is_refused_and_the_same_one_accepted(
        backend, created: str, given: str) -> None:
    run_cli(["--thread", "t", "--task", TASK, "--once", "--keep-checkpoints", created,
             "--db", backend.db])
    out = run_cli(["--thread", "t", "--once", "--keep-checkpoints", given, "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")
    assert f"--keep-checkpoints {created}" in out["error"]
    out = run_cli(["--thread", "t", "--once", "--keep-checkpoints", created, "--db", backend.db])
    assert (out["exit_code"], out["status"]) == (0, "done")


def test_a_paused_approval_survives_trimming_to_one_checkpoint(backend, tmp_path: Path) -> None:
    from tests.step.test_approvals import Writer

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "log.txt").write_text("start\n")
    model = Writer()
    out = run_cli(["--thread", "w", "--task", TASK, "--allow-writes", str(out_dir), "--once",
                   "--keep-checkpoints", "1", "--db", backend.db], model_factory=_factory(model))
    assert (out["status"], out["exit_code"]) == ("awaiting_approval", 7)
    assert_window(backend, "w", 1)
    assert prune_main(["--db", backend.db]) == 0
    out = run_cli(["--thread", "w", "--db", backend.db], model_factory=_factory(model))
    assert [c["tool_call_id"] for c in out["pending_calls"]] == ["w1", "w2"]
    run_cli(["--thread", "w", "--approve", "w1", "--db", backend.db])
    out = run_cli(["--thread", "w", "--reject", "w2", "--reason", "no", "--db", backend.db])
    assert (out["status"], out["exit_code"], len(model.requests)) == ("ready", 0, 1)
    assert_window(backend, "w", 1)
    out = run_cli(["--thread", "w", "--once", "--db", backend.db], model_factory=_factory(model))
    assert out["status"] == "done" and json.loads(out["answer"])["w1"].startswith("Approved")
    assert (out_dir / "report.md").exists() and (out_dir / "log.txt").read_text() == "start\n"


class Boom(RuntimeError):
    """A bug in reason after its request went out."""


def test_a_reason_that_died_after_sending_resumes_through_budget_on_a_window_of_one(
        backend) -> None:
    model = ScriptedModel([tool_call_reply("c1"), Boom("after send"), answer_reply("ok [ship-01]")])
    run_cli(["--thread", "t", "--task", TASK, "--once", "--keep-checkpoints", "1",
             "--db", backend.db], model_factory=_factory(model))
    with pytest.raises(Boom):
        run_cli(["--thread", "t", "--once", "--db", backend.db], model_factory=_factory(model))
    assert backend.ledger_row("t") == (2, 2, 4)
    out = run_cli(["--thread", "t", "--once", "--db", backend.db], model_factory=_factory(model))
    assert (out["status"], out["attempts"], len(model.requests)) == ("done", 3, 3)
    assert backend.ledger_row("t") == (3, 3, 4)
    assert_window(backend, "t", 1)


def test_history_verify_and_copy_work_on_a_trimmed_thread(backend, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from graph.history import main as history_main

    long_thread(backend, "2")
    assert verify(backend.db) == []
    assert history_main(["--thread", "t", "--db", backend.db]) == 0
    text = capsys.readouterr().out
    assert "older checkpoints were trimmed: this thread keeps its latest 2" in text
    target = SqliteBackend(tmp_path / "copy.sqlite")
    assert copy_main(["--from", backend.db, "--to", target.db]) == 0
    assert verify(target.db) == [] and target.ledger_row("t") == backend.ledger_row("t")
    with open_store(backend.db, create=False, read_only=True) as s, \
            open_store(target.db, create=False, read_only=True) as d:
        before, after = thread_history(s, "t"), thread_history(d, "t")
    assert after["steps"] == before["steps"] and after["header"] == before["header"]
    assert [c["checkpoint_id"] for c in after["checkpoints"]] == [
        c["checkpoint_id"] for c in before["checkpoints"]]


def v5_thread(db: str, thread_id: str, invocations: int) -> None:
    """A thread written by schema v5 (no window): every checkpoint of `invocations` steps kept."""
    from tests.fixtures.build_fixtures import v5_input

    state = v5_input(TASK, thread_id)
    state["thread"]["max_attempts"] = 40
    with open_store(db, create=True) as store:
        store.ledger.create(thread_id, 40)
        # Redis came after the attempt log: its threads always have one, and a log short of
        # the replies is refused there (`RedisAttemptLog.covers`).
        log = store.log if is_redis(db) else NoAttemptLog()
        ctx = StepContext(thread_id, store.ledger, NeverFinishes(), log=log)
        config = {"configurable": {"thread_id": thread_id}}
        graph_input: Any = state
        for _ in range(invocations):
            graph_of(store).invoke(graph_input, config, context=ctx, durability="sync")
            graph_input = None


def test_a_v5_thread_with_many_checkpoints_is_trimmed_by_prune_or_by_its_next_step(
        backend) -> None:
    v5_thread(backend.db, "by_prune", 20)
    assert len(stored(backend, "by_prune")["checkpoints"]) > 3 * 20
    assert prune_main(["--db", backend.db]) == 0
    assert_window(backend, "by_prune", DEFAULT_KEEP_CHECKPOINTS)
    v5_thread(backend.db, "by_step", 20)
    assert len(stored(backend, "by_step")["checkpoints"]) > 3 * 20
    out = run_cli(["--thread", "by_step", "--once", "--db", backend.db],
                  model_factory=_factory(NeverFinishes()))
    assert (out["status"], out["attempts"]) == ("ready", 21)
    assert_window(backend, "by_step", DEFAULT_KEEP_CHECKPOINTS)
    with open_store(backend.db, create=False, read_only=True) as store:
        thread = graph_of(store).get_state({"configurable": {"thread_id": "by_step"}}).values["thread"]
        assert len(thread_history(store, "by_step")["steps"]) == 21
    assert (thread["schema_version"], thread["keep_checkpoints"]) == (
        SCHEMA_VERSION, DEFAULT_KEEP_CHECKPOINTS)
    assert verify(backend.db) == []


@pytest.fixture(scope="module")
def forkserver() -> Any:
    return preloaded_forkserver()


@pytest.mark.sql_only(
    "the kill point hooks the SQL trim statements (tests/crash_child.py), and a killed holder's Redis"
    " lease keeps the thread busy until it runs out (deliberate); Redis window: "
    "tests/store/test_checkpoint_window.py::test_the_window_given_on_the_command_line_is_what_history_"
    "shows[redis]")
@pytest.mark.slow
@pytest.mark.parametrize("keep", ["1", "2"])
def test_a_sigkill_during_the_trim_leaves_a_loadable_thread_whose_budget_holds(
        backend, forkserver, tmp_path: Path, keep: str) -> None:
    argv = ["--thread", "t", "--task", TASK, "--once", "--keep-checkpoints", keep,
            "--db", backend.db, "--json"]
    # On SQLite the trim runs in the reason checkpoint's own transaction, so the kill
    # loses that checkpoint with the trim: its attempt is spent and the rerun counts
    # another (the demo model asks for its tool again). On PostgreSQL the trim follows
    # the stored step, and the kill loses nothing.
    lost = 1 if backend.name == "sqlite" else 0
    for round_ in range(2):
        proc = forkserver.Process(target=child_main, args=(
            argv, "mid_trim", subprocess_env(), str(tmp_path), str(tmp_path / f"out{round_}")))
        proc.start()
        proc.join(60)
        assert proc.exitcode == -signal.SIGKILL
        assert backend.ledger_row("t") == (round_ + 1, round_ + 1, 4)
        assert verify(backend.db) == []
        if lost:
            assert len(stored(backend, "t")["checkpoints"]) <= int(keep)
        argv = argv[:2] + argv[4:5] + argv[7:]  # resume: --thread t --once --db ... --json
    out = run_cli(["--thread", "t", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("done", 2 + 2 * lost)  # never a fresh budget
    assert backend.ledger_row("t") == (2 + 2 * lost, 2 + 2 * lost, 4)
    assert_window(backend, "t", int(keep))
