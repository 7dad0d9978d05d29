"""The error contract: README tables equal the enums, closed output, permissions, a lost database.

Real processes run where the behaviour is about the process: a closed pipe, and another
user (whose commands run in one child interpreter, `tests/main_child.py`, each with its
own captured output). Databases are set up, and a server that drops the connection is
met, in this process through the entry points' `main(argv)`.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PYTHON, ROOT, SqliteBackend, run_cli, subprocess_env
from tests.fake_mandapi import FakeMandApi
from tests.main_child import run_in_one_child
from tests.store.test_concurrency import wait_for

TASK = "How long does shipping take at the demo shop?"


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"### {title}\n")
    end = text.find("\n#", start + 4)
    return text[start:end if end != -1 else None]


def test_readme_exit_code_table_is_exactly_the_exit_code_enum() -> None:
    from graph.errors import ExitCode

    rows = re.findall(r"^\| (\d+) \|", _readme_section("Exit codes"), re.M)
    assert sorted(int(r) for r in rows) == sorted(int(c) for c in ExitCode)


def test_readme_error_code_list_is_exactly_the_error_code_enum() -> None:
    from graph.errors import ErrorCode

    documented: dict[str, int] = {}
    for names, exit_code in re.findall(r"^\| (`[^|]+`) \| (\d+) \|", _readme_section("Error codes"),
                                       re.M):
        for name in re.findall(r"`(\w+)`", names):
            documented[name] = int(exit_code)
    assert documented == {code.value: int(code.exit_code) for code in ErrorCode}


def test_every_error_code_the_source_can_emit_is_in_the_enum() -> None:
    from graph.errors import ErrorCode

    pattern = re.compile(r"""error_code\s*(?:=|==|:)\s*["'](\w+)["']|ModelRequestError\(\s*["'](\w+)["']"""
                         r"""|ErrorCode\.([A-Z_]+)""")
    found: set[str] = set()
    for path in [*ROOT.glob("graph/**/*.py"), *ROOT.glob("nodes/*.py")]:
        for literal, request, member in pattern.findall(path.read_text()):
            found.add(literal or request or getattr(ErrorCode, member).value)
    assert found, "the pattern found nothing: it is out of date"
    assert found <= {c.value for c in ErrorCode}, found - {c.value for c in ErrorCode}


def test_every_request_error_code_of_the_nodes_is_a_request_failure_error_code() -> None:
    from graph.errors import ErrorCode, ExitCode
    from nodes.errors import RequestErrorCode

    for code in RequestErrorCode:
        assert ErrorCode(code.value).exit_code == ExitCode.REQUEST_FAILED, code


def test_every_reply_stop_code_of_the_nodes_is_an_exhausted_error_code() -> None:
    from graph.errors import ErrorCode, ExitCode
    from nodes.errors import ReplyStopCode, StopReason

    for code in ReplyStopCode:
        assert ErrorCode(code.value).exit_code == ExitCode.EXHAUSTED, code
        assert StopReason(code.value), "the thread stops with the same name"


def test_every_invocation_refusal_code_of_the_nodes_is_a_project_error_code() -> None:
    from graph.errors import ErrorCode
    from nodes.errors import InvocationErrorCode

    assert {code.value for code in InvocationErrorCode} <= {c.value for c in ErrorCode}


def _one_step(db: Path, thread: str) -> None:
    """Creates `thread` in `db` with one demo step, in this process."""
    assert run_cli(["--thread", thread, "--task", TASK, "--once", "--db", str(db)])["exit_code"] == 0


@pytest.mark.parametrize("argv", [
    ["graph.history", "--thread", "t1"], ["graph.history", "--thread", "t1", "--json"],
    ["graph.history", "--list"], ["graph.run", "--thread", "t1", "--once"],
    ["graph.run", "--help"], ["graph.verify"], ["graph.prune", "--dry-run", "--completed", "0s"],
])
def test_closed_stdout_ends_quietly_with_the_commands_own_exit_code(
        tmp_path: Path, argv: list[str]) -> None:
    db = tmp_path / "db.sqlite"
    _one_step(db, "t1")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written, like `| head -0`
    done = subprocess.run([PYTHON, "-m", *argv, *(["--db", str(db)] if "--help" not in argv
                                                   else [])],
                          env=subprocess_env(), stdout=write, stderr=subprocess.PIPE, timeout=120)
    os.close(write)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr, done.stderr


def test_history_piped_into_head_prints_one_line_and_ends_quietly(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    _one_step(db, "t")
    result = subprocess.run(f"'{PYTHON}' -m graph.history --thread t --db '{db}' | head -1; "
                            "echo \"status=${PIPESTATUS[0]}\"", shell=True, executable="/bin/bash",
                            env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines() == ["thread   t", "status=0"]
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr


def _unprivileged() -> tuple[int, int]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another user (CI runs as root)")
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' on this machine")
    return entry.pw_uid, entry.pw_gid


def _setpriv(uid: int, gid: int) -> list[str]:
    """The command prefix that runs a process as user `uid` (with `setpriv`, as on CI)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to run a process as another user")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def _as_user(uid: int, gid: int, module: str, *args: str) -> subprocess.CompletedProcess:
    """Runs `python -m module args` as user `uid`."""
    return subprocess.run([*_setpriv(uid, gid), PYTHON, "-m", module, *args],
                          env=subprocess_env(), cwd="/", capture_output=True, text=True,
                          timeout=120)


def _each_as_user(uid: int, gid: int, commands: list[tuple[str, ...]]
                  ) -> list[subprocess.CompletedProcess]:
    """Runs each `(module, *args)`'s `main(args)` as user `uid`, all in one child interpreter.

    Returns:
        One result per command (`returncode`, `stdout`, `stderr`: its own output only).
    """
    child = run_in_one_child([{"module": module, "argv": list(args)}
                              for module, *args in commands],
                             subprocess_env(), prefix=_setpriv(uid, gid), cwd="/")
    return [subprocess.CompletedProcess(command, r["code"], r["stdout"], r["stderr"])
            for command, r in zip(commands, child["results"], strict=True)]


@pytest.fixture
def shared_db() -> Iterator[Path]:
    """A database with thread t1 (one step) in a folder other users may enter.

    Outside pytest's own folder, which only its owner may enter.
    """
    folder = Path(tempfile.mkdtemp(prefix="mr-shared-"))
    try:
        folder.chmod(0o755)
        db = folder / "db.sqlite"
        _one_step(db, "t1")
        yield db
    finally:
        shutil.rmtree(folder)


READERS = [("graph.history", "--list"), ("graph.history", "--thread", "t1"), ("graph.verify",)]
WRITERS = [("graph.run", "--thread", "t1", "--once"), ("graph.prune", "--completed", "0s"),
           ("graph.run", "--thread", "t2", "--task", TASK, "--once")]


@pytest.mark.parametrize("folder_writable", [False, True], ids=["folder-ro", "folder-rw"])
def test_read_access_is_enough_to_read_history_and_verify(shared_db: Path,
                                                          folder_writable: bool) -> None:
    uid, gid = _unprivileged()
    shared_db.chmod(0o644)
    if folder_writable:
        shared_db.parent.chmod(0o777)
    before = shared_db.read_bytes()
    results = _each_as_user(uid, gid, [*[(*args, "--db", str(shared_db), "--json")
                                          for args in READERS],
                                        *[(*args, "--db", str(shared_db)) for args in WRITERS]])
    for result in results[:len(READERS)]:
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    for result in results[len(READERS):]:
        assert result.returncode == 2, result.stderr
        line, = [x for x in result.stderr.splitlines() if not x.startswith("warning:")]
        assert line.startswith("error (permission_denied): ") and str(shared_db) in line
    assert shared_db.read_bytes() == before
    assert sorted(p.name for p in shared_db.parent.iterdir()) == ["db.sqlite"]
    assert SqliteBackend(shared_db).ledger_row("t1") == (1, 1, 4)


def test_writable_file_in_a_read_only_folder_names_the_folder(shared_db: Path) -> None:
    uid, _ = _unprivileged()
    os.chown(shared_db, uid, -1)
    result = _as_user(uid, pwd.getpwuid(uid).pw_gid, "graph.run", "--thread", "t1", "--once",
                      "--db", str(shared_db))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error (permission_denied): permission denied: "
                                    f"{shared_db.parent}: ")
    assert SqliteBackend(shared_db).ledger_row("t1") == (1, 1, 4)


def test_unreadable_file_is_permission_denied_for_every_command(shared_db: Path) -> None:
    uid, gid = _unprivileged()
    shared_db.chmod(0o600)
    for result in _each_as_user(uid, gid, [(*args, "--db", str(shared_db), "--json")
                                           for args in [*READERS, *WRITERS]]):
        assert result.returncode == 2, (result.args, result.stderr)
        data = json.loads(result.stdout)
        assert data["error_code"] == "permission_denied" and str(shared_db) in data["error"]


def test_history_refuses_a_log_it_cannot_read_rather_than_show_an_old_state(
        shared_db: Path) -> None:
    uid, gid = _unprivileged()
    shared_db.chmod(0o644)
    wal = shared_db.with_name("db.sqlite-wal")
    wal.write_bytes(b"\0" * 4096)  # stands for a log holding commits the file lacks
    wal.chmod(0o644)
    result = _as_user(uid, gid, "graph.history", "--list", "--db", str(shared_db))
    assert result.returncode == 2
    assert "error (permission_denied)" in result.stderr and "-shm" in result.stderr


@pytest.mark.postgres
def test_losing_postgres_mid_step_is_db_lost_and_the_attempt_stays_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.run import main
    from tests.conftest import PostgresBackend, postgres_admin_url

    pg = PostgresBackend(postgres_admin_url())
    try:
        import psycopg

        def sessions(admin: psycopg.Connection) -> int:
            return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                 "AND pid <> pg_backend_pid()", (pg.dbname,)).fetchone()[0]

        def cut_off(fake: FakeMandApi) -> None:
            """Once the step's request is held: ends its sessions, then lets the reply go."""
            try:
                wait_for(lambda: bool(fake.requests_for("lost-db")))
                with psycopg.connect(pg.admin_url, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = %s AND pid <> pg_backend_pid()", (pg.dbname,))
                    wait_for(lambda: sessions(admin) == 0)
            finally:
                fake.release()

        argv = ["--thread", "p1", "--live", "--once", "--db", pg.db, "--json"]
        with FakeMandApi(tmp_path / "requests.jsonl") as fake:
            fake.hold("lost-db")
            for name, value in (("MANDAPI_API_KEY", "sk-x-00000000000"), ("MANDAPI_MODEL_ID", "m1"),
                                ("MANDAPI_BASE_URL", fake.base_url)):
                monkeypatch.setenv(name, value)
            cutter = threading.Thread(target=cut_off, args=(fake,))
            cutter.start()
            code = main([*argv, "--task", "lost-db task"])
            cutter.join(timeout=120)
        out, err = capsys.readouterr()
        assert code == 6, err
        data = json.loads(out)
        assert data["error_code"] == "db_lost" and "run the command again" in data["error"]
        assert "Traceback" not in err
        assert pg.ledger_row("p1") == (1, 1, 4)
        assert len(fake.requests_for("lost-db")) == 1
        assert main(argv) != 1, capsys.readouterr()
    finally:
        pg.drop()


def test_batch_goes_on_when_nobody_reads_its_progress(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"thread_id": f"p{i}", "task": TASK}) + "\n"
                             for i in range(2)))
    read, write = os.pipe()
    os.close(read)
    result = subprocess.run([PYTHON, "-m", "graph.batch", str(tasks), "--db",
                             str(tmp_path / "db.sqlite"), "--once", "--json"],
                            env=subprocess_env(), stdout=subprocess.PIPE, stderr=write, timeout=120)
    os.close(write)
    assert result.returncode == 0
    assert json.loads(result.stdout)["statuses"] == {"ready": 2}
    assert SqliteBackend(tmp_path / "db.sqlite").ledger_row("p1") == (1, 1, 4)
