"""What a person reviews is exactly what is applied (INVARIANTS I12, issue 12 §2).

Ambiguous arguments are never paused for review; the review, `--json` and history
show the canonical arguments the approval hash covers; an approved write that can no
longer be applied goes back to the model as a tool error, never an exit 1.
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from graph.history import render
from graph.store import open_store
from graph.threads.history import thread_history
from nodes.arguments import ArgumentsError, parse_arguments
from nodes.context import ModelReply
from nodes.prompts import TOOL_ERROR_PREFIX
from nodes.tools import run_tool_call
from tests.conftest import run_cli

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


class RawCalls:
    """Asks, in one message, for the given calls (raw argument text), then echoes results."""

    def __init__(self, *calls: tuple[str, str, str]) -> None:
        self.calls = calls
        self.requests: list[list[dict[str, Any]]] = []

    def complete(self, messages, tools) -> ModelReply:
        self.requests.append(messages)
        if len(self.requests) == 1:
            return ModelReply({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in self.calls]}, USAGE)
        told = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        return ModelReply({"role": "assistant", "content": json.dumps(told)}, USAGE)


def start(backend, out_dir: Path, model: RawCalls, thread: str = "x") -> dict[str, Any]:
    return run_cli(["--thread", thread, "--task", "write", "--allow-writes", str(out_dir),
                    "--once", "--db", backend.db], model_factory=lambda m, s: model)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "important.txt").write_text("keep me\n")
    return folder


AMBIGUOUS = [
    '{"path": "report.txt", "text": "summary", "path": "important.txt"}',  # the example
    '{"path": "important.txt", "text": "a", "text": "b"}',
    '{"path": "report.txt", "pa\\u0074h": "important.txt", "text": "x"}',  # same key, escaped
    '{"path": "report.txt", "text": "x", "meta": {"k": 1, "k": 2}}',  # nested
    '{"path": "report.txt", "text": NaN}',
    '{"path": "report\\ud800.txt", "text": "x"}',  # a lone surrogate
    '{"path": "report.txt", "text": "x"} trailing',
    '["path", "report.txt"]',
]


@pytest.mark.parametrize("name", ["write_file", "append_file"])
@pytest.mark.parametrize("arguments", AMBIGUOUS)
def test_ambiguous_write_arguments_are_a_tool_error_and_never_paused(
    backend, out_dir: Path, arguments: str, name: str
) -> None:
    model = RawCalls(("w1", name, arguments))
    out = start(backend, out_dir, model)
    assert (out["exit_code"], out["status"], out["pending_calls"]) == (0, "ready", None), out
    out = run_cli(["--thread", "x", "--once", "--db", backend.db],
                  model_factory=lambda m, s: model)
    assert out["status"] == "done", out
    told = json.loads(out["answer"])["w1"]
    assert told.startswith(TOOL_ERROR_PREFIX), told
    assert (out_dir / "important.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in out_dir.iterdir()) == ["important.txt"]


@pytest.mark.parametrize("arguments, problem", [
    ('{"ref_id": "ship-01", "ref_id": "war-01"}', "twice"),
    ('{"ref_id": "ship-01", "x": {"a": 1, "a": 1}}', "twice"),
    ('{"ref_id": Infinity}', "not a JSON value"),
    ('{"ref_id": "\\udc00"}', "surrogate"),
    ('{"ref_id": ' + "9" * 5000 + "}", "unusable number"),
    ("[" * 100_000, "nested too deeply"),
])
def test_read_only_tools_use_the_same_strict_parser(arguments: str, problem: str) -> None:
    text = run_tool_call({"id": "c", "function": {"name": "get_reference", "arguments": arguments}})
    assert text.startswith(TOOL_ERROR_PREFIX) and problem in text
    if problem == "twice":  # the model is told the real reason, not another branch's
        assert "is given twice" in text and "number" not in text, text


@pytest.mark.parametrize("text", ['{"a": 1, "a": 1}', '{"a": [{"b": 1, "b": 2}]}', "[1]", "1",
                                  '{"a": -Infinity}', '{"\\ud83d": 1}', "{" * 100_000])
def test_the_parser_refuses_each_kind_of_ambiguity(text: str) -> None:
    with pytest.raises(ArgumentsError):
        parse_arguments(text)


def test_review_json_text_and_history_show_the_canonical_arguments_the_hash_covers(
    backend, out_dir: Path
) -> None:
    deep = "reports/" + "/".join(f"level{n}" for n in range(8)) + "/quarterly-summary-final.txt"
    (out_dir / deep).parent.mkdir(parents=True)
    raw = '{ "text" : "caf\\u00e9\\n",\n  "path" : "' + deep + '" }'
    canonical = '{"path":"' + deep + '","text":"café\\n"}'
    model = RawCalls(("w1", "write_file", raw))
    out = start(backend, out_dir, model)
    (pending,) = out["pending_calls"]
    assert pending["arguments"] == canonical
    assert pending["sha256"] == hashlib.sha256(f"write_file\n{canonical}".encode()).hexdigest()
    from graph.run import run

    text = run(["--thread", "x", "--db", backend.db]).to_text()
    assert f"arguments: {canonical}" in text
    run_cli(["--thread", "x", "--approve", "w1", "--db", backend.db])
    assert (out_dir / deep).read_text() == "café\n"
    with open_store(backend.db, create=False, read_only=True) as store:
        history = thread_history(store, "x")
    (decision,) = history["decisions"]
    assert (decision["arguments"], decision["target"], decision["applied"]) == (canonical, deep, True)
    assert history["steps"][0]["tool_calls"][0]["canonical_arguments"] == canonical
    shown = render(history)
    assert shown.count(deep) >= 2, "history shows the path whole, in the step and the decision"


class TwoWrites(RawCalls):
    def __init__(self, first: str, second: str) -> None:
        super().__init__(
            ("w1", "write_file", json.dumps({"path": first, "text": "one\n"})),
            ("w2", "append_file", json.dumps({"path": second, "text": "two\n"})))


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def folder_removed(out_dir: Path, elsewhere: Path) -> None:
    _remove(out_dir / "sub")


def folder_is_now_a_file(out_dir: Path, elsewhere: Path) -> None:
    _remove(out_dir / "sub")
    (out_dir / "sub").write_text("a file now")


def folder_is_now_a_symlink(out_dir: Path, elsewhere: Path) -> None:
    _remove(out_dir / "sub")
    (out_dir / "sub").symlink_to(elsewhere, target_is_directory=True)


def target_is_now_a_folder(out_dir: Path, elsewhere: Path) -> None:
    (out_dir / "sub" / "a.txt").mkdir()


def writable_root_removed(out_dir: Path, elsewhere: Path) -> None:
    shutil.rmtree(out_dir)


@pytest.mark.parametrize("damage", [folder_removed, folder_is_now_a_file, folder_is_now_a_symlink,
                                    target_is_now_a_folder, writable_root_removed])
def test_an_approved_write_that_can_no_longer_be_applied_goes_back_to_the_model(
    backend, out_dir: Path, tmp_path: Path, damage
) -> None:
    (out_dir / "sub").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = TwoWrites("sub/a.txt", "log.txt")
    assert start(backend, out_dir, model)["exit_code"] == 7
    assert run_cli(["--thread", "x", "--approve", "w1", "--db", backend.db])["exit_code"] == 7
    damage(out_dir, elsewhere)
    out = run_cli(["--thread", "x", "--approve", "w2", "--db", backend.db])
    assert (out["exit_code"], out["status"]) == (0, "ready"), out
    assert list(elsewhere.iterdir()) == [], "nothing written through a planted link"
    if out_dir.exists():
        assert (out_dir / "log.txt").read_text() == "two\n", "the other approved write applied"
    out = run_cli(["--thread", "x", "--once", "--db", backend.db], model_factory=lambda m, s: model)
    assert (out["status"], out["exit_code"]) == ("done", 0), out
    told = json.loads(out["answer"])
    assert told["w1"].startswith("TOOL ERROR: approved, but the write could not be applied")
    with open_store(backend.db, create=False, read_only=True) as store:
        decisions = {d["tool_call_id"]: d for d in thread_history(store, "x")["decisions"]}
    assert (decisions["w1"]["applied"], bool(decisions["w1"]["error"])) == (False, True)


def test_a_write_the_file_system_refuses_goes_back_to_the_model(
    backend, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import graph.step.approvals

    def disk_full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    model = TwoWrites("a.txt", "b.txt")
    start(backend, out_dir, model)
    monkeypatch.setattr(graph.step.approvals, "atomic_write", disk_full)
    out = run_cli(["--thread", "x", "--approve", "w1", "--approve", "w2", "--db", backend.db])
    assert (out["exit_code"], out["status"]) == (0, "ready"), out
    monkeypatch.undo()
    out = run_cli(["--thread", "x", "--once", "--db", backend.db], model_factory=lambda m, s: model)
    told = json.loads(out["answer"])
    assert all("No space left on device" in told[c] for c in ("w1", "w2")), told
    assert not (out_dir / "a.txt").exists()


@pytest.mark.parametrize("link", ["root", "parent"])
def test_a_writable_folder_replaced_by_a_link_after_creation_is_never_written_through(
    backend, tmp_path: Path, link: str
) -> None:
    parent = tmp_path / "parent"
    out_dir = parent / "out"
    (out_dir / "sub").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "out" / "sub").mkdir(parents=True)
    model = TwoWrites("sub/a.txt", "log.txt")
    assert start(backend, out_dir, model)["exit_code"] == 7
    if link == "root":
        out_dir.rename(tmp_path / "moved")
        out_dir.symlink_to(elsewhere / "out", target_is_directory=True)
    else:
        parent.rename(tmp_path / "moved")
        parent.symlink_to(elsewhere, target_is_directory=True)
    run_cli(["--thread", "x", "--approve", "w1", "--db", backend.db])
    out = run_cli(["--thread", "x", "--approve", "w2", "--db", backend.db])
    assert out["exit_code"] == 0, out
    written = [p for p in elsewhere.rglob("*") if p.is_file()]
    assert written == [], f"written through a link: {written}"
