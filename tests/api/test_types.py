"""Every public call of `graph.api` refuses a wrongly typed or unknown argument up front.

Each refusal is a `UsageError` (`usage`, exit 2) naming the keyword and what it got,
never a `TypeError`/`AttributeError` (exit 1) nor a wrong value taken as truthy, and the
database is left exactly as it was (INVARIANTS I13).
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from graph.api import Database, open_database, verify_database
from graph.errors import ErrorCode, ExitCode, UsageError
from graph.fleet.tasks_file import BatchItem
from graph.settings import Settings, ThreadSpec
from graph.step.advance import StepRequest

TASK = "How long does shipping take at the demo shop?"

Call = Callable[[Database, Database, Path], Any]
"""A call on the open source database, an open target database and the source's path."""


def _enter_invocation(db: Database, thread_id: Any) -> None:
    with db.invocation(thread_id):
        pass


def _item() -> BatchItem:
    return BatchItem(1, ThreadSpec(thread_id="t_new", task=TASK, source="line"))


# (id, call, the keyword the message names, what it shows it got or None)
CASES: list[tuple[str, Call, str, str | None]] = [
    # open_database and verify_database: nothing is opened
    ("open-db-int", lambda db, o, p: open_database(5), "db", "5"),
    ("open-db-bytes", lambda db, o, p: open_database(str(p).encode()), "db", "b'"),
    ("open-create-str", lambda db, o, p: open_database(p, create="yes"), "create", "'yes'"),
    ("open-create-int", lambda db, o, p: open_database(p, create=1), "create", "1"),
    ("open-read-only-none", lambda db, o, p: open_database(p, read_only=None), "read_only",
     "None"),
    ("open-live-str", lambda db, o, p: open_database(p, live="no"), "live", "'no'"),
    ("open-timeout-str", lambda db, o, p: open_database(p, timeout_s="5"), "timeout_s", "'5'"),
    ("open-timeout-bool", lambda db, o, p: open_database(p, timeout_s=True), "timeout_s",
     "True"),
    ("open-factory", lambda db, o, p: open_database(p, model_factory="demo"), "model_factory",
     "'demo'"),
    ("open-unknown", lambda db, o, p: open_database(p, creat=True), "creat", None),
    ("verify-db-list", lambda db, o, p: verify_database([str(p)]), "db", "["),
    ("verify-source", lambda db, o, p: verify_database(p, source="cli"), "source", "'cli'"),
    ("verify-unknown", lambda db, o, p: verify_database(p, full=True), "full", None),
    ("database-settings", lambda db, o, p: Database(str(p)), "settings", "'"),
    ("database-create", lambda db, o, p: Database(Settings(db=str(p)), create="yes"), "create",
     "'yes'"),
    # run (t1 exists and can advance: a wrong value taken as truthy would advance it)
    ("run-thread-none", lambda db, o, p: db.run(None), "thread_id", "None"),
    ("run-thread-int", lambda db, o, p: db.run(5), "thread_id", "5"),
    ("run-once-str", lambda db, o, p: db.run("t1", once="yes"), "once", "'yes'"),
    ("run-once-int", lambda db, o, p: db.run("t1", once=0), "once", "0"),
    ("run-once-none", lambda db, o, p: db.run("t1", once=None), "once", "None"),
    ("run-restart-str", lambda db, o, p: db.run("t1", restart_pruned="no"), "restart_pruned",
     "'no'"),
    ("run-attempts-str", lambda db, o, p: db.run("n", task=TASK, max_attempts="4"),
     "max_attempts", "'4'"),
    ("run-attempts-bool", lambda db, o, p: db.run("n", task=TASK, max_attempts=True),
     "max_attempts", "True"),
    ("run-attempts-float", lambda db, o, p: db.run("n", task=TASK, max_attempts=4.0),
     "max_attempts", "4.0"),
    ("run-tokens-str", lambda db, o, p: db.run("n", task=TASK, max_tokens="100"), "max_tokens",
     "'100'"),
    ("run-context-bool", lambda db, o, p: db.run("n", task=TASK, context_tokens=False),
     "context_tokens", "False"),
    ("run-keep-str", lambda db, o, p: db.run("n", task=TASK, keep_checkpoints="5"),
     "keep_checkpoints", "'5'"),
    ("run-task-int", lambda db, o, p: db.run("n", task=5), "task", "5"),
    ("run-model-list", lambda db, o, p: db.run("n", task=TASK, model=["offline-demo"]), "model",
     "["),
    ("run-workspace-int", lambda db, o, p: db.run("n", task=TASK, workspace=3), "workspace",
     "3"),
    ("run-unknown", lambda db, o, p: db.run("t1", onse=True), "onse", None),
    ("run-extra-positional", lambda db, o, p: db.run("t1", TASK), "run()", None),
    # advance, cancel, decide
    ("advance-request", lambda db, o, p: db.advance("t1"), "request", "'t1'"),
    ("advance-now", lambda db, o, p: db.advance(StepRequest(ThreadSpec("t1")), now="12:00"),
     "now", "'12:00'"),
    ("advance-unknown", lambda db, o, p: db.advance(StepRequest(ThreadSpec("t1")), clock=None),
     "clock", None),
    ("cancel-none", lambda db, o, p: db.cancel(None), "thread_id", "None"),
    ("reopen-none", lambda db, o, p: db.reopen(None), "thread_id", "None"),
    ("cancel-unknown", lambda db, o, p: db.cancel("t1", reason="x"), "reason", None),
    ("decide-approve-str", lambda db, o, p: db.decide("t1", approve="c1"), "approve", "'c1'"),
    ("decide-reject-int", lambda db, o, p: db.decide("t1", reject=("c1", 2)), "reject",
     "('c1', 2)"),
    ("decide-reason-int", lambda db, o, p: db.decide("t1", reject=["c1"], reason=5), "reason",
     "5"),
    ("decide-unknown", lambda db, o, p: db.decide("t1", approved=["c1"]), "approved", None),
    # batch (t_new would be created by a batch that went ahead)
    ("batch-items-str", lambda db, o, p: db.batch("tasks.jsonl"), "items", "'tasks.jsonl'"),
    ("batch-items-dicts", lambda db, o, p: db.batch([{"thread_id": "t_new", "task": TASK}]),
     "items", "["),
    ("batch-once-str", lambda db, o, p: db.batch([_item()], once="no"), "once", "'no'"),
    ("batch-cap-int", lambda db, o, p: db.batch([_item()], cap_id=7), "cap_id", "7"),
    ("batch-max-str", lambda db, o, p: db.batch([_item()], cap_id="c", max_requests="9"),
     "max_requests", "'9'"),
    ("batch-max-bool", lambda db, o, p: db.batch([_item()], cap_id="c", max_requests=True),
     "max_requests", "True"),
    ("batch-progress", lambda db, o, p: db.batch([_item()], progress=print), "progress",
     "<built-in"),
    ("batch-unknown", lambda db, o, p: db.batch([_item()], max_request=3), "max_request", None),
    # invocation
    ("invocation-none", lambda db, o, p: _enter_invocation(db, None), "thread_id", "None"),
    ("invocation-unknown", lambda db, o, p: db.invocation(thread="t1"), "thread", None),
    # reading, pruning, verifying, copying (done1 is old enough to prune at 0s)
    ("history-thread-none", lambda db, o, p: db.history(None), "thread_id", "None"),
    ("history-checkpoints-str", lambda db, o, p: db.history("t1", "5"), "checkpoints", "'5'"),
    ("history-checkpoints-bool", lambda db, o, p: db.history("t1", True), "checkpoints", "True"),
    ("history-unknown", lambda db, o, p: db.history("t1", limit=5), "limit", None),
    ("threads-unknown", lambda db, o, p: db.threads(status="done"), "status", None),
    ("prune-dry-run-int", lambda db, o, p: db.prune(completed="0s", dry_run=0), "dry_run", "0"),
    ("prune-dry-run-str", lambda db, o, p: db.prune(completed="0s", dry_run="no"), "dry_run",
     "'no'"),
    ("prune-completed-int", lambda db, o, p: db.prune(completed=0), "completed", "0"),
    ("prune-failed-none", lambda db, o, p: db.prune(completed="0s", failed=None), "failed",
     "None"),
    ("prune-unknown", lambda db, o, p: db.prune(complete="0s"), "complete", None),
    ("prune-report-dry-run", lambda db, o, p: db.prune_report(completed="0s", dry_run=[]),
     "dry_run", "[]"),
    ("verify-unknown-method", lambda db, o, p: db.verify(full=True), "full", None),
    ("copy-target-str", lambda db, o, p: db.copy_to(str(p)), "target", "'"),
    ("copy-target-none", lambda db, o, p: db.copy_to(None), "target", "None"),
    ("copy-ids-str", lambda db, o, p: db.copy_to(o, thread_ids="t1"), "thread_ids", "'t1'"),
    ("copy-ids-int", lambda db, o, p: db.copy_to(o, [1]), "thread_ids", "[1]"),
    ("copy-unknown", lambda db, o, p: db.copy_to(o, threads=["t1"]), "threads", None),
    # the async variants: the same checks
    ("arun-once-str", lambda db, o, p: db.arun("t1", once="yes"), "once", "'yes'"),
    ("arun-unknown", lambda db, o, p: db.arun("t1", onse=True), "onse", None),
    ("acancel-none", lambda db, o, p: db.acancel(None), "thread_id", "None"),
    ("areopen-none", lambda db, o, p: db.areopen(None), "thread_id", "None"),
    ("adecide-approve-str", lambda db, o, p: db.adecide("t1", approve="c1"), "approve", "'c1'"),
    ("abatch-items-str", lambda db, o, p: db.abatch("tasks.jsonl"), "items", "'tasks.jsonl'"),
    ("ahistory-checkpoints", lambda db, o, p: db.ahistory("t1", "5"), "checkpoints", "'5'"),
    ("athreads-unknown", lambda db, o, p: db.athreads(status="done"), "status", None),
    ("aprune-dry-run", lambda db, o, p: db.aprune(completed="0s", dry_run=0), "dry_run", "0"),
    ("aprune-report-completed", lambda db, o, p: db.aprune_report(completed=0), "completed",
     "0"),
    ("averify-unknown", lambda db, o, p: db.averify(full=True), "full", None),
    ("acopy-target-str", lambda db, o, p: db.acopy_to("other.sqlite"), "target",
     "'other.sqlite'"),
]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with `t1` (one attempt, can continue) and `done1` (done): made once."""
    path = tmp_path_factory.mktemp("template") / "checkpoints.sqlite"
    with open_database(str(path), create=True) as db:
        db.run("t1", task=TASK)
        db.run("done1", task=TASK, once=False)
    return path


def stored(path: Path) -> tuple[bytes, list[str]]:
    """The database file's bytes and every row of every table (read without writing)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = list(conn.iterdump())
    conn.close()
    return path.read_bytes(), rows


@pytest.mark.parametrize(("call", "keyword", "got"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_wrongly_typed_or_unknown_argument_is_a_usage_error_that_changes_nothing(
        template: Path, tmp_path: Path, call: Call, keyword: str, got: str | None) -> None:
    path, other_path = tmp_path / "checkpoints.sqlite", tmp_path / "other.sqlite"
    shutil.copy(template, path)
    before = stored(path)
    with open_database(str(path)) as db, open_database(str(other_path), create=True) as other:
        with pytest.raises(UsageError) as refused:
            result = call(db, other, path)
            if inspect.iscoroutine(result):
                asyncio.run(result)
    error = refused.value
    assert (error.error_code, error.exit_code) == (ErrorCode.USAGE, ExitCode.USAGE)
    assert keyword in error.message
    if got is not None:
        assert f"not {got}" in error.message
    assert stored(path) == before
    with open_database(str(other_path)) as other:
        assert other.threads() == []


def test_a_path_is_accepted_wherever_a_database_or_folder_is_named(
        template: Path, tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.sqlite"
    shutil.copy(template, path)
    assert verify_database(path).problems == []
    with open_database(path) as db:
        outcome = db.run("t_path", task=TASK, workspace=tmp_path)
        assert db.location == str(path)
    assert outcome.exit_code == ExitCode.OK
    with open_database(path, read_only=True) as db:
        assert db.history("t_path")["header"]["workspace"] == str(tmp_path.resolve())


def test_the_message_says_what_the_keyword_takes_and_what_it_got(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as once, open_database(tmp_path / "x.sqlite",
                                                          create=True) as db:
        db.run("t1", task=TASK, once="yes")
    with pytest.raises(UsageError) as unknown:
        open_database(tmp_path / "x.sqlite", timeout=5)
    assert once.value.message == "once must be True or False, not 'yes'"
    assert unknown.value.message.startswith("open_database() has no keyword 'timeout'; "
                                            "it takes db, create, read_only, live, timeout_s")


def test_a_closed_database_is_a_usage_error(tmp_path: Path) -> None:
    with open_database(tmp_path / "x.sqlite", create=True) as db:
        pass
    with pytest.raises(UsageError) as closed:
        db.threads()
    assert closed.value.exit_code == ExitCode.USAGE
    assert "not open" in closed.value.message


class _Lying(str):
    """A str whose `__str__`, `__eq__` and `__hash__` say something else."""

    def __str__(self) -> str:
        return "EVIL"

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0


class _OddInt(int):
    def __index__(self) -> int:
        return 99

    def __int__(self) -> int:
        return 99


def test_a_str_or_int_subclass_is_taken_as_the_value_it_holds(template: Path,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.sqlite"
    shutil.copy(template, path)
    with open_database(path) as db:
        outcome = db.run(_Lying("t9"), task=_Lying(TASK), max_attempts=_OddInt(3))
        assert outcome.exit_code == ExitCode.OK
        mine = [t for t in db.threads() if t["thread_id"] not in ("done1", "t1")]
        assert [(t["thread_id"], t["max_attempts"]) for t in mine] == [("t9", 3)]
        assert db.run("t9").exit_code == ExitCode.OK  # the same thread, resumed
    assert verify_database(path).problems == []
