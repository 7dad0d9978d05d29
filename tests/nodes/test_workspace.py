"""Workspace tools are read-only, confined to their folder, capped, and cite evidence ids."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodes.prompts import TOOL_ERROR_PREFIX
from nodes.tools import run_tool_call
from nodes.workspace import MAX_READ_LINES, Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("alpha\nthe secret code is 4711\nomega\n")
    (root / "b.md").write_text("\n".join(f"line {i}" for i in range(1, 501)))
    (root / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "outside.txt").write_text("private")
    os.symlink(tmp_path / "outside.txt", root / "escape.txt")
    os.symlink(tmp_path, root / "up")
    return Workspace(root)


def call(name: str, **args) -> dict:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def run(ws: Workspace, name: str, **args) -> str:
    return run_tool_call(call(name, **args), ws)


def test_list_files_lists_text_and_skips_links_out(ws: Workspace) -> None:
    listed = json.loads(run(ws, "list_files"))
    assert [f["path"] for f in listed["files"]] == ["b.md", "blob.bin", "docs/a.txt"]


def test_read_file_returns_lines_with_an_evidence_id(ws: Workspace) -> None:
    out = json.loads(run(ws, "read_file", path="docs/a.txt", offset=2, limit=1))
    assert out["text"] == "the secret code is 4711"
    assert out["evidence"] == ["docs/a.txt#L2-L2"] and out["total_lines"] == 3


def test_reads_are_capped(ws: Workspace) -> None:
    out = json.loads(run(ws, "read_file", path="b.md", limit=10_000))
    assert out["end_line"] == MAX_READ_LINES and out["total_lines"] == 500


def test_binary_files_are_reported_not_dumped(ws: Workspace) -> None:
    out = json.loads(run(ws, "read_file", path="blob.bin"))
    assert out["binary"] is True and "text" not in out


def test_search_text_gives_file_line_and_evidence(ws: Workspace) -> None:
    out = json.loads(run(ws, "search_text", query="SECRET"))
    assert out["matches"] == [{"path": "docs/a.txt", "line": 2, "text": "the secret code is 4711"}]
    assert out["evidence"] == ["docs/a.txt#L2-L2"]


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "docs/../../outside.txt",
                                  "escape.txt", "up/outside.txt", "nope.txt", "", "b.md\u0000x"])
def test_paths_outside_or_missing_are_tool_errors(ws: Workspace, path: str) -> None:
    text = run(ws, "read_file", path=path)
    assert text.startswith(TOOL_ERROR_PREFIX), text
    assert "private" not in text


def test_workspace_tools_do_not_exist_without_a_workspace() -> None:
    assert "unknown tool" in run_tool_call(call("read_file", path="x"), None)


def test_evidence_names_only_the_lines_shown(ws: Workspace) -> None:
    (ws.root / "long.txt").write_text("\n".join("z" * 390 for _ in range(100)))
    out = json.loads(run(ws, "read_file", path="long.txt"))
    shown = len(out["text"].splitlines())
    assert shown < 100 and out["evidence"] == [f"long.txt#L1-L{shown}"]
    assert out["end_line"] == shown and out["total_lines"] == 100
