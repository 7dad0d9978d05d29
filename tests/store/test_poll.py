"""A thread with nothing to do is answered without LangGraph, exactly as the full path answers it.

`graph.store.poll` answers a finished (done, exhausted, cancelled), pruned or busy thread from
our own rows, on a SQLite file and on PostgreSQL; anything unusual (a damaged or stale
summary, any fingerprinted row changed, identity flags, a database from before
summaries) takes the full path, which checks everything. `graph.run`'s process ends
with `os._exit` after flushing and closing.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from graph.prune import main as prune_main
from graph.store.poll import quick_answer
from tests.conftest import _CLEARED, PYTHON, postgres_admin_url, run_cli, subprocess_env
from tests.fakes import NeverFinishes
from tests.forked import ForkedProcess, forkserver
from tests.main_child import run_in_one_child

TASK = "How long does shipping take at the demo shop?"
HEAVY = ("langgraph", "langchain_core", "httpx", "psycopg")
"""Top-level packages the quick answer must not import (psycopg is PostgreSQL's driver)."""
EXIT = {"d": 0, "e": 3, "c": 4, "p": 4, "busy": 5}


def _threads(db: str) -> None:
    """p (pruned), d (done), e (exhausted), c (cancelled), r (ready) in `db`."""
    run_cli(["--thread", "p", "--task", TASK, "--db", db])
    assert prune_main(["--db", db, "--completed", "0s"]) == 0
    assert run_cli(["--thread", "d", "--task", TASK, "--db", db])["status"] == "done"
    model = NeverFinishes()
    out = run_cli(["--thread", "e", "--task", TASK, "--max-attempts", "2", "--db", db],
                  model_factory=lambda m, s: model)
    assert out["status"] == "exhausted"
    run_cli(["--thread", "c", "--task", TASK, "--once", "--db", db])
    assert run_cli(["--thread", "c", "--cancel", "--db", db])["status"] == "cancelled"
    assert run_cli(["--thread", "r", "--task", TASK, "--once", "--db", db])["status"] == "ready"


class Db:
    """One copy of the template database: its `--db` value, and raw access to its rows."""

    def __init__(self, backend: str, db: str) -> None:
        self.backend, self.db = backend, db

    def execute(self, statement: str) -> None:
        if self.backend == "sqlite":
            with sqlite3.connect(self.db) as conn:
                conn.execute(statement)
            conn.close()
            return
        import psycopg

        with psycopg.connect(self.db, autocommit=True) as pg:
            pg.execute(statement)

    def value(self, query: str) -> Any:
        if self.backend == "sqlite":
            with sqlite3.connect(self.db) as conn:
                row = conn.execute(query).fetchone()
            conn.close()
            return row[0]
        import psycopg

        with psycopg.connect(self.db, autocommit=True) as pg:
            return pg.execute(query).fetchone()[0]

    @contextmanager
    def held(self, thread_id: str) -> Iterator[None]:
        """Holds the thread's writer lock, as a process working on it does."""
        if self.backend == "sqlite":
            from graph.store.sqlite.locks import ThreadLocks

            locks = ThreadLocks(Path(self.db).resolve())
            try:
                with locks.hold(thread_id):
                    yield
            finally:
                locks.close()
            return
        import psycopg

        from graph.store.postgres.locks import AdvisoryThreadLocks

        with psycopg.connect(self.db, autocommit=True) as pg, \
                AdvisoryThreadLocks(pg).hold(thread_id):
            yield


def _pg_create(template: str | None = None) -> str:
    """A new database of this test process (`tests.pg_pool.create_database`), maybe a copy."""
    import psycopg

    from tests.pg_pool import create_database, own_name

    name = own_name("poll")
    with psycopg.connect(postgres_admin_url(), autocommit=True) as conn:
        for _ in range(50):  # a template is refused while a session is still closing on it
            try:
                create_database(conn, name, template)
                return name
            except psycopg.errors.ObjectInUse:
                time.sleep(0.1)
        create_database(conn, name, template)
    return name


def _pg_drop(name: str) -> None:
    import psycopg

    with psycopg.connect(postgres_admin_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def template(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Db]:
    """The five threads of `_threads`, made once per backend (copied for each test)."""
    folder = tmp_path_factory.mktemp("template")
    with pytest.MonkeyPatch.context() as env:
        for name in _CLEARED:
            env.delenv(name, raising=False)
        env.chdir(folder)
        if request.param == "sqlite":
            made = Db("sqlite", str(folder / "checkpoints.sqlite"))
            _threads(made.db)
            yield made
            return
        name = _pg_create()
        try:
            made = Db("postgres", postgres_admin_url().rsplit("/", 1)[0] + "/" + name)
            _threads(made.db)
            yield made
        finally:
            _pg_drop(name)


@pytest.fixture
def db(template: Db, tmp_path: Path) -> Iterator[Db]:
    """A fresh copy of the template (a file copied, or `CREATE DATABASE ... TEMPLATE`)."""
    if template.backend == "sqlite":
        path = tmp_path / "checkpoints.sqlite"
        shutil.copy2(template.db, path)  # mode 0600 kept
        yield Db("sqlite", str(path))
        return
    source = template.db.rsplit("/", 1)[1]
    name = _pg_create(source)
    try:
        yield Db("postgres", template.db.rsplit("/", 1)[0] + "/" + name)
    finally:
        _pg_drop(name)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _full_path(argv: list[str], monkeypatch: pytest.MonkeyPatch,
               capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`graph.run`'s `main(argv)` in this process: exit code, stdout, stderr.

    Fails unless `graph.run` went past the quick answer (`_quick_answer`'s answer is None).
    """
    import graph.run

    asked: list[object] = []

    def quick_answer(*args: Any) -> Any:
        answer, settings = quick(*args)
        asked.append(answer)
        return answer, settings

    quick = graph.run._quick_answer
    with monkeypatch.context() as patched:
        patched.setattr(graph.run, "_quick_answer", quick_answer)
        capfd.readouterr()
        code = graph.run.main(argv)
        out, err = capfd.readouterr()
    assert asked == [None], "the full path was not taken"
    return code, out, err


@pytest.mark.slow
@pytest.mark.parametrize("thread", ["d", "e", "c", "p", "busy"])
def test_nothing_to_do_is_answered_without_langgraph_byte_for_byte(
        db: Db, thread: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    """The quick answers run in a fresh interpreter, which must not import LangGraph (or
    httpx; psycopg only for PostgreSQL); the full path, given a flag it checks against
    the thread, runs in this process. Both print the same bytes with the same exit code."""
    thread_id = "r" if thread == "busy" else thread
    driver = [] if db.backend == "sqlite" else ["psycopg"]
    variants = [(False, False), (True, True)]  # (--json, the database in GRAPH_DB)

    def args(as_json: bool, via_env: bool) -> list[str]:
        return ["--thread", thread_id, "--once", *(["--json"] if as_json else []),
                *([] if via_env else ["--db", db.db])]

    with db.held(thread_id) if thread == "busy" else _nothing():
        child = run_in_one_child(
            [{"module": "graph.run", "argv": args(*variant),
              "env": {"GRAPH_DB": db.db} if variant[1] else {}} for variant in variants],
            subprocess_env(), cwd=tmp_path)
        assert sorted(set(child["modules"]) & set(HEAVY)) == driver
        for variant, quick in zip(variants, child["results"], strict=True):
            if variant[1]:
                monkeypatch.setenv("GRAPH_DB", db.db)
            full = _full_path([*args(*variant), "--task", TASK], monkeypatch, capfd)
            monkeypatch.delenv("GRAPH_DB", raising=False)
            assert (quick["code"], quick["stdout"], quick["stderr"]) == full, (thread, variant)
            assert quick["code"] == EXIT[thread]


def test_the_quick_answer_is_the_full_paths_answer(db: Db) -> None:
    for thread in ("d", "e", "c", "p"):
        quick = quick_answer(db.db, thread)
        assert quick is not None, thread
        full = run_cli(["--thread", thread, "--task", TASK, "--db", db.db])  # the full path
        assert json.loads(quick.to_json()) == {k: v for k, v in full.items() if k != "_next"}
        assert quick.next_nodes == full["_next"] and quick.to_text(), thread
        assert quick.exit_code == EXIT[thread]
    assert quick_answer(db.db, "r") is None  # can continue: the full path runs it
    assert quick_answer(db.db, "unknown") is None
    with db.held("r"):
        busy = quick_answer(db.db, "r")
        full = run_cli(["--thread", "r", "--task", TASK, "--db", db.db])
    assert busy is not None and (busy.exit_code, busy.error_code) == (5, "busy")
    assert json.loads(busy.to_json()) == {k: v for k, v in full.items() if k != "_next"}


def test_every_finished_thread_has_its_summary_written_by_the_full_path(db: Db) -> None:
    assert db.value("SELECT count(*) FROM thread_summaries") == 3  # d, e, c
    for thread in ("d", "e", "c"):
        assert db.value(f"SELECT count(*) FROM thread_summaries WHERE thread_id = '{thread}'") == 1


_LATEST = ("(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'd' "
           "AND checkpoint_ns = '')")
_WRITES = {"sqlite": "writes", "postgres": "checkpoint_writes"}
_VALUE = {"sqlite": "value", "postgres": "blob"}
_BYTES = {"sqlite": "x'7b7d'", "postgres": "'\\x7b7d'::bytea"}
CHANGES: dict[str, tuple[str | None, str]] = {
    # name: (statement, with `{writes}`, `{value}`, `{bytes}` named per backend; None: a
    # trigger), then "renewed" (answered as before) or the full path's refusal
    "summary text": ("UPDATE thread_summaries SET outcome = replace(outcome, 'Standard', "
                     "'Express')", "renewed"),
    "summary emptied": ("UPDATE thread_summaries SET outcome = '{}'", "renewed"),
    "summary fingerprint": ("UPDATE thread_summaries SET fingerprint = 'x' || fingerprint",
                            "renewed"),
    "ledger row": ("UPDATE attempt_ledger SET updated_at = '2030-01-01T00:00:00+00:00' "
                   "WHERE thread_id = 'd'", "renewed"),
    "a decision": ("INSERT INTO write_approvals (thread_id, attempt, tool_call_id, tool, "
                   "args_sha256, decision, decided_at, result) VALUES ('d', 1, 'w1', "
                   "'write_file', 'x', 'reject', '2030-01-01T00:00:00+00:00', 'rejected')",
                   "renewed"),
    "another digest": ("INSERT INTO checkpoint_digests SELECT thread_id, checkpoint_ns, "
                       "checkpoint_id, task_id, idx, 'another' FROM checkpoint_digests WHERE "
                       f"thread_id = 'd' AND checkpoint_id = {_LATEST} AND task_id = ''",
                       "renewed"),
    "latest checkpoint": ("UPDATE checkpoints SET metadata = '[]' WHERE thread_id = 'd' "
                          f"AND checkpoint_id = {_LATEST}", "damaged"),
    "its digest": ("DELETE FROM checkpoint_digests WHERE thread_id = 'd' AND checkpoint_id = "
                   f"{_LATEST} AND task_id = ''", "damaged"),
    "digest marker": ("UPDATE checkpoint_digests SET digest = 'x' WHERE thread_id = ''",
                      "damaged"),
    "a pending write": ("INSERT INTO {writes} (thread_id, checkpoint_ns, checkpoint_id, "
                        "task_id, idx, channel, type, {value}) SELECT thread_id, '', "
                        "checkpoint_id, 't1', 0, 'progress', 'json', {bytes} FROM checkpoints "
                        f"WHERE thread_id = 'd' AND checkpoint_id = {_LATEST}", "incompatible"),
    "the attempt log": ("INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at)"
                        " VALUES ('d', 9, 'reason', '{}', '2030-01-01T00:00:00+00:00')",
                        "damaged"),
    "a guarded trigger": (None, "damaged"),
}
"""Each row a summary stands for, changed: the full path answers and renews the summary,
or refuses as it always did (its `error_code`)."""
PG_CHANGES = {
    "a value's blob": ("UPDATE checkpoint_blobs SET blob = blob || '\\x00'::bytea "
                       "WHERE thread_id = 'd' AND channel = 'progress'", "damaged"),
    "LangGraph's schema version": ("INSERT INTO checkpoint_migrations VALUES (1000)", "renewed"),
}
"""PostgreSQL's own rows: a checkpoint's values live in blobs, and its schema has a version."""


def _statement(db: Db, change: str) -> str:
    statement = {**CHANGES, **PG_CHANGES}[change][0]
    if statement is None:  # a trigger: SQLite names it alone, PostgreSQL with its table
        return ("DROP TRIGGER attempt_ledger_never_decreases" if db.backend == "sqlite"
                else "DROP TRIGGER attempt_ledger_never_decreases ON attempt_ledger")
    for name, names in (("writes", _WRITES), ("value", _VALUE), ("bytes", _BYTES)):
        statement = statement.replace(f"{{{name}}}", names[db.backend])
    return statement


SQLITE_ONLY = pytest.mark.parametrize("template", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize(
    "template", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


def _changed_row_takes_the_full_path(db: Db, change: str) -> None:
    answer = quick_answer(db.db, "d")
    assert answer is not None
    db.execute(_statement(db, change))
    assert quick_answer(db.db, "d") is None
    full = run_cli(["--thread", "d", "--once", "--db", db.db])
    expected = {**CHANGES, **PG_CHANGES}[change][1]
    if expected != "renewed":
        assert (full["exit_code"], full["error_code"]) == (4, expected), full
        assert quick_answer(db.db, "d") is None
        return
    assert (full["status"], full["answer"], full["exit_code"]) == ("done", answer.answer, 0)
    renewed = quick_answer(db.db, "d")
    assert renewed is not None and renewed.to_json() == answer.to_json()


@pytest.mark.parametrize("change", CHANGES)
def test_any_fingerprinted_row_changed_takes_the_full_path_which_answers_as_before(
        db: Db, change: str) -> None:
    _changed_row_takes_the_full_path(db, change)


@POSTGRES_ONLY
@pytest.mark.parametrize("change", PG_CHANGES)
def test_a_changed_value_blob_or_schema_version_takes_the_full_path_on_postgres(
        db: Db, change: str) -> None:
    _changed_row_takes_the_full_path(db, change)


@SQLITE_ONLY
def test_a_summary_stored_as_a_blob_takes_the_full_path(db: Db) -> None:
    db.execute("UPDATE thread_summaries SET fingerprint = CAST(fingerprint AS BLOB)")
    assert quick_answer(db.db, "d") is None


def test_flags_checked_against_the_thread_take_the_full_path(db: Db) -> None:
    out = run_cli(["--thread", "d", "--model", "mandapi-large", "--db", db.db])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")
    out = run_cli(["--thread", "d", "--max-attempts", "9", "--db", db.db])
    assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch")


def test_a_database_from_before_summaries_gains_one_on_its_next_full_answer(db: Db) -> None:
    db.execute("DROP TABLE thread_summaries")
    assert quick_answer(db.db, "d") is None
    assert run_cli(["--thread", "d", "--db", db.db])["status"] == "done"
    assert quick_answer(db.db, "d") is not None


def test_pruning_a_thread_deletes_its_summary(db: Db) -> None:
    assert prune_main(["--db", db.db, "--completed", "0s", "--failed", "0s"]) == 0
    assert db.value("SELECT count(*) FROM thread_summaries") == 0
    pruned = quick_answer(db.db, "d")
    assert pruned is not None and pruned.error_code == "pruned"


@SQLITE_ONLY
def test_a_file_others_can_read_takes_the_full_path(db: Db) -> None:
    Path(db.db).chmod(0o644)
    assert quick_answer(db.db, "d") is None  # the full path warns about it on stderr


def test_an_unreachable_server_takes_the_full_path_which_reports_it() -> None:
    url = "postgresql://u@127.0.0.1:1/x"
    assert quick_answer(url, "d") is None
    out = run_cli(["--thread", "d", "--db", url])
    assert (out["exit_code"], out["error_code"]) == (2, "db_unreachable")


@POSTGRES_ONLY
def test_a_password_in_the_db_flag_takes_the_full_path_which_warns(
        db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    with_password = db.db.replace("://postgres@", "://postgres:secret@")
    assert quick_answer(with_password, "d") is not None  # the password is not the problem
    assert run_cli(["--thread", "d", "--db", with_password])["status"] == "done"
    assert "a password in --db is visible" in capsys.readouterr().err


@POSTGRES_ONLY
def test_a_writer_lock_is_seen_held_by_another_session_whatever_its_key(db: Db) -> None:
    import psycopg

    from graph.store.postgres.locks import held_elsewhere

    with psycopg.connect(db.db, autocommit=True) as holder, \
            psycopg.connect(db.db, autocommit=True) as poller:
        for key in (5, -5, 1 << 40, (1 << 63) - 1, -(1 << 63)):
            assert not held_elsewhere(poller, key)
            holder.execute("SELECT pg_advisory_lock(%s)", (key,))
            assert held_elsewhere(poller, key) and not held_elsewhere(holder, key), key
            assert not held_elsewhere(poller, key + 1 if key < 0 else key - 1)
            holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
            assert not held_elsewhere(poller, key)


def test_graph_run_imports_no_langgraph_before_deciding() -> None:
    code = ("import sys, graph.run, graph.store.poll, graph.store.postgres.poll, graph.settings, "
            "graph.settings; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    done = subprocess.run([PYTHON, "-c", code], env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_quick_answer_imports_no_langgraph_on_either_backend(db: Db) -> None:
    code = ("import sys; from graph.store.poll import quick_answer; "
            f"print(quick_answer(sys.argv[1], 'd').status, "
            f"sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))")
    done = subprocess.run([PYTHON, "-c", code, db.db], env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    driver = [] if db.backend == "sqlite" else ["psycopg"]
    assert done.stdout.strip() == f"done {driver}", done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("args", "code"), [
    (["--thread", "n", "--task", TASK, "--once", "--json"], 0),  # a step: the full path
    (["--thread", "d", "--once", "--json"], 0),                   # the quick answer
    (["--thread", "missing", "--once", "--json"], 4),             # an error
])
def test_the_process_ends_with_its_exit_code_flushed_and_closed_even_into_a_closed_pipe(
        db: Db, args: list[str], code: int, tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone, like `| head -0`
    done = subprocess.run([PYTHON, "-m", "graph.run", *args, "--db", db.db],
                          env=subprocess_env(), stdout=write, stderr=subprocess.PIPE, timeout=300)
    os.close(write)
    assert done.returncode == code, done.stderr
    assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr
    if db.backend == "sqlite":
        wal = Path(db.db + "-wal")  # closed: checkpointed (a reader leaves it empty)
        assert not wal.exists() or wal.stat().st_size == 0
    # Read whole: `python -m graph.run` forked from the preloaded forkserver (its own exit
    # path, `os._exit` after flushing; no second interpreter start), stdout in a file.
    piped = ForkedProcess(forkserver(), "graph.run", [*args[:2], "--json", "--db", db.db],
                          subprocess_env(), tmp_path)
    stdout, _ = piped.communicate(timeout=300)
    assert stdout.count("\n") == 1 and stdout.endswith("}\n")  # whole, flushed
    if args[1] == "n":
        assert db.value("SELECT attempts FROM attempt_ledger WHERE thread_id = 'n'") == 2
