"""Long tasks: bounded requests and storage, evidence kept through compaction, fixed limits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from graph.agent import build_graph
from graph.store import open_store
from nodes.compaction import INDEX_PREFIX, STUB_PREFIX, estimate_tokens
from nodes.context import ModelReply
from nodes.pairing import check_request
from nodes.prompts import SYSTEM_PROMPT
from tests.conftest import run_cli

TASK = "Find the code word of the vault and report it with its evidence id."


def make_workspace(root: Path, files: int = 50) -> Path:
    root.mkdir()
    for i in range(files):
        body = "\n".join(f"file {i} line {n}: " + "lorem ipsum dolor sit amet " * 3
                         for n in range(1, 120))
        if i == 7:
            body += "\nThe vault code word is HELIOTROPE."
        (root / f"doc{i:02d}.txt").write_text(body)
    return root


class Reader:
    """A scripted model: reads the vault file first, then many other files, then answers.

    It answers from what is in its request; when the early evidence has been compacted to
    a stub it re-reads the cited range, so the final answer always comes from real text.
    """

    def __init__(self, reads: int, limit_tokens: int) -> None:
        self.reads, self.limit_tokens, self.requests = reads, limit_tokens, []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        self.requests.append({"messages": messages, "tools": tools})
        turn = sum(1 for m in messages if m["role"] == "assistant")
        text = "\n".join(m["content"] or "" for m in messages if m["role"] == "tool")
        if turn == 0:
            return self._call("read_file", {"path": "doc07.txt", "offset": 118, "limit": 5}, 0)
        if len(self.requests) <= self.reads:
            n = len(self.requests) % 50
            return self._call("read_file", {"path": f"doc{n:02d}.txt", "offset": 1, "limit": 60},
                              len(self.requests))
        if "HELIOTROPE" in text:
            evidence = [e for m in messages if m["role"] == "tool" and "HELIOTROPE" in m["content"]
                        for e in json.loads(m["content"])["evidence"]]
            return ModelReply({"role": "assistant", "content": f"The code word is HELIOTROPE "
                               f"[{evidence[-1]}]."}, {"prompt_tokens": 1, "completion_tokens": 1,
                                                       "total_tokens": 2})
        kept = re.findall(r"doc07\.txt#L(\d+)-L\d+", "\n".join(
            m["content"] or "" for m in messages if m["role"] in ("tool", "user")))
        assert kept, "a stub or the evidence index must keep the early evidence id"
        return self._call("read_file", {"path": "doc07.txt", "offset": int(kept[0]), "limit": 5},
                          len(self.requests))

    @staticmethod
    def _call(name: str, args: dict, n: int) -> ModelReply:
        return ModelReply({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})


def stored_bytes(backend, thread_id: str) -> int:
    return len(backend.get_raw(thread_id, "messages")[1])


class MeasuringReader(Reader):
    """The `Reader`, also measuring the stored messages before each request from the third on:
    the thread as the previous step left it on disk (`stored_bytes`)."""

    def __init__(self, backend: Any, reads: int, limit_tokens: int) -> None:
        super().__init__(reads, limit_tokens)
        self.backend, self.sizes = backend, []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        if len(self.requests) >= 2:
            self.sizes.append(stored_bytes(self.backend, "long"))
        return super().complete(messages, tools)


@pytest.mark.slow
def test_long_task_keeps_requests_and_storage_bounded(backend, tmp_path: Path) -> None:
    """Over 300 requests in one run (the CLI's own loop, no `--once`: restarts between
    steps are `test_evidence_survives_compaction_and_a_restart`'s promise), every request
    stays within the context limit and the stored messages stop growing. Sizes are taken
    after each step from the second on, as the next request starts, and after the last."""
    workspace = make_workspace(tmp_path / "ws")
    limit = 6_000
    model = MeasuringReader(backend, reads=299, limit_tokens=limit)
    out = run_cli(["--thread", "long", "--db", backend.db, "--task", TASK, "--workspace",
                   str(workspace), "--max-attempts", "400", "--context-tokens", str(limit)],
                  model_factory=lambda m, s: model)
    sizes = [*model.sizes, stored_bytes(backend, "long")]
    assert out["status"] == "done" and "HELIOTROPE [doc07.txt#L118-L" in out["answer"]
    assert len(model.requests) >= 300
    for request in model.requests:
        assert request["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        check_request(request["messages"][1:])
        assert estimate_tokens(request["messages"]) + estimate_tokens(request["tools"]) <= limit
    # Stored state is bounded: as large late as early, not growing with the steps.
    assert max(sizes[-50:]) <= 2 * max(sizes[20:70])
    assert max(sizes) < limit * 4 * 2


def test_evidence_survives_compaction_and_a_restart(backend, tmp_path: Path) -> None:
    workspace = make_workspace(tmp_path / "ws", files=12)
    model = Reader(reads=14, limit_tokens=3_000)
    argv = ["--thread", "ev", "--db", backend.db, "--once"]
    run_cli([*argv, "--task", TASK, "--workspace", str(workspace), "--max-attempts", "40",
             "--context-tokens", "3000"], model_factory=lambda m, s: model)
    for _ in range(30):  # each run_cli opens and closes the database: a process restart
        out = run_cli(argv, model_factory=lambda m, s: model)
        if out["status"] != "ready":
            break
    assert out["status"] == "done"
    assert out["answer"].startswith("The code word is HELIOTROPE [doc07.txt#L118-L")
    stubs = [m for r in model.requests for m in r["messages"]
             if m["content"] and m["content"].startswith((STUB_PREFIX, INDEX_PREFIX))]
    assert any("doc07.txt#L118-L" in m["content"] for m in stubs), "compaction happened"
    with open_store(backend.db, create=False) as store:
        values = build_graph(store.checkpointer).get_state(
            {"configurable": {"thread_id": "ev"}}).values
    ids = [m.get("tool_call_id") for m in values["messages"] if m["role"] == "tool"]
    assert all(i and i.startswith("call_") for i in ids), "ids are never renamed"


def test_limits_are_fixed_at_creation(backend, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    base = ["--thread", "t1", "--db", backend.db, "--once"]
    run_cli([*base, "--task", "q", "--workspace", str(ws), "--max-attempts", "6",
             "--max-tokens", "5000"])
    before = backend.fingerprint()
    for flag, value in (("--max-attempts", "9"), ("--max-tokens", "99999"),
                        ("--context-tokens", "1000"), ("--workspace", str(tmp_path))):
        out = run_cli([*base, flag, value])
        assert (out["exit_code"], out["error_code"]) == (4, "identity_mismatch"), flag
        assert flag in out["error"]
    assert backend.fingerprint() == before
    out = run_cli([*base, "--max-attempts", "6", "--max-tokens", "5000", "--workspace", str(ws)])
    assert (out["exit_code"], out["max_attempts"], out["max_tokens"]) == (0, 6, 5000)


def test_token_cap_stops_before_the_request(backend) -> None:
    from tests.fakes import NeverFinishes

    model = NeverFinishes()  # reports 15 tokens per request
    argv = ["--thread", "t1", "--db", backend.db]
    out = run_cli([*argv, "--task", "q", "--max-tokens", "40", "--max-attempts", "10"],
                  model_factory=lambda m, s: model)
    assert (out["status"], out["stop_reason"], out["exit_code"]) == ("exhausted", "token_cap", 3)
    assert len(model.requests) == 3 and out["usage"]["total_tokens"] == 45
    assert backend.ledger_row("t1") == (3, 3, 10)


def test_missing_workspace_on_resume_is_an_error_before_counting(backend, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    run_cli(["--thread", "t1", "--task", "q", "--workspace", str(ws), "--once", "--db", backend.db])
    ws.rmdir()
    before = backend.fingerprint()
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "no_such_workspace")
    assert str(ws) in out["error"] and backend.fingerprint() == before
    out = run_cli(["--thread", "t2", "--task", "q", "--workspace", str(ws), "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "no_such_workspace")
    assert backend.ledger_row("t2") is None
