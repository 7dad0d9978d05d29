"""One path confinement for reads and writes; a write's outcome is stored, not read from its text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graph.store import open_store
from graph.threads.history import thread_history
from nodes.files import file_sha256, sha256_hex
from nodes.paths import PathRefused, confine
from nodes.prompts import TOOL_ERROR_PREFIX
from nodes.write_results import WriteOutcome, WriteResult, legacy_error, write_outcome
from tests.store.test_approvals_migration import legacy_paused_thread, make_legacy


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", folder / "out")
    os.symlink(folder / "sub", folder / "inner")
    return folder


@pytest.mark.parametrize(("rel", "kind"), [
    ("", "not_relative"), ("a\x00b", "not_relative"), (7, "not_relative"),
    ("/etc/passwd", "absolute"), ("\\x", "absolute"), ("a/../b", "parent"), ("..", "parent")])
def test_syntax_refusals_are_the_same_for_reads_and_writes(root: Path, rel, kind: str) -> None:
    for follow_links in (True, False):
        with pytest.raises(PathRefused) as refused:
            confine(root, rel, follow_links=follow_links)
        assert refused.value.kind == kind


def test_reads_follow_links_inside_the_root_only(root: Path) -> None:
    assert confine(root, "inner/x.txt", follow_links=True) == root / "sub" / "x.txt"
    with pytest.raises(PathRefused) as refused:
        confine(root, "out/x.txt", follow_links=True)
    assert refused.value.kind == "outside"
    with pytest.raises(PathRefused) as refused:
        confine(root, "c:x.txt", follow_links=True)
    assert refused.value.kind == "absolute"


def test_writes_never_follow_a_link(root: Path, tmp_path: Path) -> None:
    assert confine(root, "sub/x.txt", follow_links=False) == root / "sub" / "x.txt"
    assert confine(root, "c:x.txt", follow_links=False) == root / "c:x.txt"
    for rel in ("inner/x.txt", "out/x.txt", "inner"):
        with pytest.raises(PathRefused) as refused:
            confine(root, rel, follow_links=False)
        assert refused.value.kind == "link"
    moved = tmp_path / "moved"
    root.rename(moved)
    os.symlink(moved, root)
    with pytest.raises(PathRefused) as refused:
        confine(root, "sub/x.txt", follow_links=False)
    assert (refused.value.kind, refused.value.detail) == ("root_moved", str(moved))


def test_one_file_hash(tmp_path: Path) -> None:
    path = tmp_path / "f"
    assert file_sha256(path) == "absent"
    path.write_bytes(b"abc")
    assert file_sha256(path) == sha256_hex(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")


def test_outcomes_come_from_the_stored_fields_not_the_text() -> None:
    row = {"decision": "approve", "error": None, "applied_at": None,
           "result": f"{TOOL_ERROR_PREFIX}text alone says nothing"}
    assert write_outcome(row) is WriteOutcome.PENDING
    assert write_outcome({**row, "applied_at": "2026-01-01T00:00:00+00:00"}) is WriteOutcome.APPLIED
    assert write_outcome({**row, "error": "gone"}) is WriteOutcome.NOT_APPLIED
    assert write_outcome({**row, "decision": "reject"}) is WriteOutcome.REJECTED


def test_the_model_text_is_unchanged() -> None:
    failed = WriteResult.not_applied("folder gone")
    assert (failed.outcome, failed.error, failed.text) == (
        WriteOutcome.NOT_APPLIED, "folder gone",
        "TOOL ERROR: approved, but the write could not be applied: folder gone. Nothing was written.")
    assert WriteResult.rejected(None).text == (
        "REJECTED by the reviewer: no reason given. Nothing was written.")
    assert WriteResult.approved("write_file", "a.md", 3).text == (
        "Approved by the reviewer and applied: write_file a.md (3 bytes).")


def test_rows_from_before_the_error_field_are_read_from_their_text() -> None:
    old = "TOOL ERROR: approved, but the write cannot be done: 'x' is not a file"
    assert legacy_error("approve", old) == old
    applied = "Approved by the reviewer and applied: write_file a (1 bytes)."
    assert legacy_error("approve", applied) is None
    assert legacy_error("reject", "REJECTED by the reviewer: TOOL ERROR. Nothing was written.") is None


@pytest.mark.sql_only(
    "the legacy write_approvals table exists only in SQL databases made before the migration; Redis "
    "never had it")
def test_an_old_row_of_a_write_not_applied_reads_as_not_applied(backend, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "log.txt").write_text("start\n")
    legacy_paused_thread(backend, out_dir)
    with open_store(backend.db, create=False) as store:
        rows = store.approvals.rows("w")
    (row,) = [r for r in rows.values() if r["tool_call_id"] == "w1"]
    old = "TOOL ERROR: approved, but the write cannot be done: 'report.md' is not a file"
    make_legacy(backend, [{**row, "result": old, "applied_at": "2026-01-01T00:00:00+00:00"}])
    with open_store(backend.db, create=False, read_only=True) as store:
        (decision,) = thread_history(store, "w")["decisions"]
    assert (decision["applied"], decision["error"], decision["result"]) == (False, old, old)
