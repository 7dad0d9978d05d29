"""One SQLite database is reached through one WAL name, or refused (INVARIANTS I1, I8).

SQLite keeps `-wal`/`-shm` per file name: two names for one file split its locking and
lose commits. Every way to give a file a second name on Linux is tried: names that
share the WAL (symlinks, `..`, `/proc/self/fd/N`, a bind-mounted folder) work; names
that do not (hard links, a bind-mounted file, a rename or move while in use, any other
name a live process holds) are refused with exit 2 `db_second_name` before anything is counted.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from graph.store import open_store
from graph.store.sqlite.names import NameSlot
from tests.conftest import ROOT, SqliteBackend, run_cli, subprocess_env
from tests.fakes import tool_call_reply

TASK = "How long does shipping take at the demo shop?"


class _NeverFinishes:
    """Asks for a tool on every request, with ids unique in the test session."""

    ids = itertools.count(1)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        return tool_call_reply(f"call_{next(self.ids)}")


def _step(db: Path | str, thread: str = "t1", task: str | None = None) -> dict[str, Any]:
    argv = ["--thread", thread, "--once", "--db", str(db)]
    argv += ["--task", task, "--max-attempts", "10"] if task else []
    return run_cli(argv, model_factory=lambda model_id, settings: _NeverFinishes())


def _created(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    real = folder / "real.sqlite"
    assert _step(real, task=TASK)["exit_code"] == 0
    return real


def _assert_refused(out: dict[str, Any]) -> None:
    assert (out["exit_code"], out["error_code"]) == (2, "db_second_name"), out
    assert "write-ahead log per file name" in out["error"] and "one path" in out["error"]


def _wal_names(*folders: Path) -> set[str]:
    return {p.name for f in folders for p in f.iterdir() if p.name.endswith(("-wal", "-shm"))}


# --- names without privileges -------------------------------------------------------

def _hard_link_beside(real: Path) -> Path:
    alt = real.with_name("alt.sqlite")
    os.link(real, alt)
    return alt


def _hard_link_elsewhere(real: Path) -> Path:
    other = real.parent.parent / "other"
    other.mkdir()
    os.link(real, other / real.name)  # same file name, another folder: another -wal
    return other / real.name


SPLIT: dict[str, Callable[[Path], Path]] = {
    "hard link beside it": _hard_link_beside,
    "hard link in another folder": _hard_link_elsewhere,
}


@pytest.mark.parametrize("make", SPLIT.values(), ids=SPLIT.keys())
def test_a_hard_linked_database_is_refused_by_every_name_before_counting(
    tmp_path: Path, make: Callable[[Path], Path]
) -> None:
    real = _created(tmp_path)
    before = SqliteBackend(real).fingerprint()
    other = make(real)
    for name in (real, other):
        _assert_refused(_step(name))
        _assert_refused(_step(name, thread="t2", task=TASK))  # nor a new thread
    assert SqliteBackend(real).fingerprint() == before
    other.unlink()
    assert _step(real)["attempts"] == 2  # one name again: it works


def _symlink(real: Path) -> Path:
    link = real.parent.parent / "link.sqlite"
    link.symlink_to(real)
    return link


def _symlinked_folder(real: Path) -> Path:
    link = real.parent.parent / "data-link"
    link.symlink_to(real.parent, target_is_directory=True)
    return link / real.name


def _dot_dot(real: Path) -> Path:
    (real.parent / "sub").mkdir()
    return real.parent / "sub" / ".." / real.name


SHARED: dict[str, Callable[[Path], Path]] = {
    "symlink": _symlink,
    "symlinked folder": _symlinked_folder,
    "path through ..": _dot_dot,
}


@pytest.mark.parametrize("make", SHARED.values(), ids=SHARED.keys())
def test_names_that_share_the_wal_work_together(tmp_path: Path, make: Callable[[Path], Path]
                                                ) -> None:
    real = _created(tmp_path)
    other = make(real)
    with open_store(str(real), create=False):  # the real name in use meanwhile
        assert _step(other)["attempts"] == 2
        assert _wal_names(tmp_path, real.parent) <= {"real.sqlite-wal", "real.sqlite-shm"}
    assert _step(real)["attempts"] == 3


def test_proc_self_fd_name_shares_the_wal(tmp_path: Path) -> None:
    real = _created(tmp_path)
    fd = os.open(real, os.O_RDONLY)
    try:
        with open_store(str(real), create=False):
            assert _step(f"/proc/self/fd/{fd}")["attempts"] == 2
    finally:
        os.close(fd)
    assert _wal_names(tmp_path, real.parent) <= {"real.sqlite-wal", "real.sqlite-shm"}


@pytest.mark.parametrize("where", ["renamed.sqlite", "../moved/real.sqlite"])
def test_a_database_moved_while_in_use_is_refused_under_its_new_name(tmp_path: Path, where: str
                                                                     ) -> None:
    real = _created(tmp_path)
    (tmp_path / "moved").mkdir()
    renamed = (real.parent / where).resolve()
    with open_store(str(real), create=False):  # a live process on the old name
        real.rename(renamed)
        _assert_refused(_step(renamed))
    assert _step(renamed)["attempts"] == 2  # the old name is no longer in use


def test_a_name_this_process_cannot_see_is_refused_while_in_use(tmp_path: Path) -> None:
    """A live process holding the file under a name that is gone from here (a link removed)."""
    real = _created(tmp_path)
    alt = _hard_link_beside(real)
    hidden = NameSlot(alt)  # held as a process would that has the file open as `alt`
    alt.unlink()  # ... where this process cannot see it
    try:
        before = SqliteBackend(real).fingerprint()
        _assert_refused(_step(real))
        assert SqliteBackend(real).fingerprint() == before
    finally:
        hidden.close()
    assert _step(real)["attempts"] == 2


def test_a_file_left_by_a_killed_creator_is_not_a_second_name(tmp_path: Path) -> None:
    """Creation links a complete temporary file into place; a kill may leave that name."""
    real = _created(tmp_path)
    os.link(real, real.with_name(f".{real.name}.999999999.creating"))
    assert _step(real)["attempts"] == 2


# --- bind mounts, in a private mount namespace --------------------------------------

def _can_mount() -> bool:
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount --bind / /mnt"], capture_output=True, check=False)
    return probe.returncode == 0


needs_mount = pytest.mark.skipif(sys.platform != "linux" or not _can_mount(),
                                 reason="needs `unshare -m` and `mount --bind` (root)")


def _in_namespace(mounts: list[tuple[Path, Path]], code: str, **popen: Any) -> subprocess.Popen:
    """Runs Python `code` in a private mount namespace with `mounts` bind-mounted."""
    binds = [f"mount --bind {shlex.quote(str(s))} {shlex.quote(str(d))}" for s, d in mounts]
    script = " && ".join([*binds, f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"])
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            env=subprocess_env(), cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            **popen)


def _cli_in_namespace(mounts: list[tuple[Path, Path]], db: Path) -> dict[str, Any]:
    code = ("import sys; from graph.run import main; "
            f"sys.exit(main(['--thread', 't1', '--once', '--json', '--db', {str(db)!r}]))")
    proc = _in_namespace(mounts, code)
    out, _ = proc.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])


@needs_mount
def test_a_bind_mounted_file_is_refused_by_both_names(tmp_path: Path) -> None:
    real = _created(tmp_path)
    target = tmp_path / "mounted.sqlite"
    target.touch()
    for name in (target, real):
        _assert_refused(_cli_in_namespace([(real, target)], name))
    assert _step(real)["attempts"] == 2


@needs_mount
def test_a_bind_mounted_folder_shares_the_wal_and_works(tmp_path: Path) -> None:
    real = _created(tmp_path)
    view = tmp_path / "view"
    view.mkdir()
    with open_store(str(real), create=False):
        out = _cli_in_namespace([(real.parent, view)], view / real.name)
    assert out["exit_code"] == 0 and out["attempts"] == 2, out


# --- the issue's example -------------------------------------------------------------

@pytest.mark.slow
def test_issue_example_hard_link_in_parallel_rounds_is_refused_before_counting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads A and B in real.sqlite, `ln real.sqlite alt.sqlite`, six parallel rounds.

    The two threads are created in this process; each round is two real processes
    (`python -m graph.run` forked from a preloaded forkserver, `tests/forked.py`).
    """
    from tests.fake_mandapi import FakeMandApi
    from tests.forked import ForkedProcess, forkserver

    real = tmp_path / "real.sqlite"
    alt = tmp_path / "alt.sqlite"
    with FakeMandApi(tmp_path / "requests.jsonl", hold_s=0.3, never_finish=True) as fake:
        variables = {"MANDAPI_API_KEY": "sk-test-00000000", "MANDAPI_MODEL_ID": "mandapi-test",
                     "MANDAPI_BASE_URL": fake.base_url}
        env = subprocess_env(**variables)

        def argv(thread: str, db: Path, task: bool = False) -> list[str]:
            args = ["--thread", thread, "--db", str(db), "--once", "--live"]
            return args + (["--task", f"[{thread}] {TASK}", "--max-attempts", "10"] if task else [])

        server = forkserver()

        def start(thread: str, db: Path) -> ForkedProcess:
            return ForkedProcess(server, "graph.run", [*argv(thread, db), "--json"], env, tmp_path)

        with monkeypatch.context() as here:
            for name, value in variables.items():
                here.setenv(name, value)
            for thread in ("A", "B"):
                out = run_cli(argv(thread, real, task=True))
                assert out["exit_code"] == 0, out
        os.link(real, alt)
        for _ in range(6):
            procs = [start("A", real), start("B", alt)]
            for proc in procs:
                out, _ = proc.communicate(timeout=120)
                _assert_refused(json.loads(out))
        received = {t: len(fake.requests_for(f"[{t}]")) for t in ("A", "B")}
    backend = SqliteBackend(real)
    assert received == {"A": 1, "B": 1}
    assert backend.ledger_row("A")[:2] == backend.ledger_row("B")[:2] == (1, 1)
    with sqlite3.connect(real) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
