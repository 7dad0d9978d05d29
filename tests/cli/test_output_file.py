"""`batch --out` and `replay export -o` refuse a target that is not a regular file (exit 2).

An atomic write renames a temporary file over the target: over a folder it fails, over a
device, FIFO or symlink it would silently replace it with a regular file. Each is refused
before any work, naming the flag and what the target is, and left exactly as it was.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from graph.batch import main as batch_main
from graph.output_file import check_output_path
from graph.replay.__main__ import main as replay_main
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


def _folder(path: Path) -> str:
    path.mkdir()
    (path / "kept.txt").write_text("kept")
    return "is a folder"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a FIFO"


def _char_device(path: Path) -> str:
    try:  # a /dev/null-like node of our own in tmp; real /dev files are never touched
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    return "is a character device"


def _symlink(path: Path) -> str:
    real = path.with_name("real.jsonl")
    real.write_text("the real file\n")
    path.symlink_to(real)
    return "is a symbolic link"


def _missing_parent(path: Path) -> str:
    return "does not exist"


KINDS: dict[str, Callable[[Path], str]] = {
    "folder": _folder, "fifo": _fifo, "char_device": _char_device, "symlink": _symlink,
    "missing_parent": _missing_parent}


def _snapshot(path: Path) -> tuple[object, ...]:
    """What must not change: kind, inode, device number, link target and folder content."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ("missing", path.parent.exists())
    link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    content = (path.resolve().read_text() if link else
               sorted(p.name for p in path.iterdir()) if stat.S_ISDIR(st.st_mode) else None)
    return (st.st_mode, st.st_ino, st.st_rdev, link, content)


def _target(tmp_path: Path, kind: str) -> tuple[Path, str]:
    path = tmp_path / ("no" if kind == "missing_parent" else "") / "out.jsonl"
    return path, KINDS[kind](path)


@pytest.mark.parametrize("kind", KINDS)
def test_batch_out_refuses_a_target_that_is_not_a_regular_file(
        backend, tmp_path: Path, capsys, kind: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"thread_id": "o1", "task": TASK}) + "\n")
    out, what = _target(tmp_path, kind)
    before = _snapshot(out)
    assert batch_main([str(tasks), "--db", backend.db, "--out", str(out), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error_code"] == "usage" and error["exit_code"] == 2
    assert error["error"].startswith(f"--out {out}") and what in error["error"]
    assert _snapshot(out) == before
    assert backend.ledger_row("o1") is None  # refused before anything ran


@pytest.mark.parametrize("kind", KINDS)
def test_replay_export_refuses_a_target_that_is_not_a_regular_file(
        sqlite_db: Path, tmp_path: Path, capsys, kind: str) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", str(sqlite_db)])
    out, what = _target(tmp_path, kind)
    before = _snapshot(out)
    assert replay_main(["export", "--thread", "d1", "--db", str(sqlite_db), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error (usage): -o {out}" in err and what in err and "this is a bug" not in err
    assert _snapshot(out) == before


def test_replay_export_into_an_existing_folder_is_usage_not_a_bug(
        sqlite_db: Path, tmp_path: Path, capsys) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", str(sqlite_db)])
    assert replay_main(["export", "--thread", "d1", "--db", str(sqlite_db), "-o", str(tmp_path),
                        "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error_code"] == "usage" and "is a folder" in error["error"]


def test_a_socket_is_refused(tmp_path: Path) -> None:
    import socket

    path = Path(os.path.relpath(tmp_path / "s.sock"))  # AF_UNIX paths are short
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.bind(str(path))
        except OSError:
            pytest.skip("cannot bind a Unix socket here")
        with pytest.raises(Exception, match="is a socket"):
            check_output_path(path, "--out")


def test_a_parent_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="is not a folder"):
        check_output_path(tmp_path / "file" / "out.jsonl", "--out")


def test_a_regular_file_is_replaced_and_a_missing_one_created(tmp_path: Path) -> None:
    from graph.output_file import write_atomic

    out = tmp_path / "r.jsonl"
    write_atomic(out, "one\n", "--out", private=False)
    write_atomic(out, "two\n", "--out", private=False)
    assert out.read_text() == "two\n" and [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]
