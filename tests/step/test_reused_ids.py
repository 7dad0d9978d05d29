"""Servers that number tool calls `call_0`, `call_1` afresh in every reply (issue 12 §3).

Pairing is positional: a tool result answers the assistant message right before it.
Ids reused across replies are accepted; everything keyed by a call id is also keyed by
its turn, so a reused id never picks up another turn's decision or result.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from graph.store import open_store
from graph.threads.history import thread_history
from nodes.compaction import STUB_PREFIX, compact
from nodes.context import ModelReply, StepContext
from nodes.pairing import UnsafeHistoryError, not_executed_results, open_calls
from nodes.tools import tools_node
from tests.conftest import run_cli
from tests.fake_mandapi import FakeMandApi

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def assistant(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for cid, name, args in calls]}


def result(cid: str, content: str = "{}") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


TASK = {"role": "user", "content": "q"}
Q = ("search_references", {"query": "shipping"})


@pytest.mark.parametrize("rounds", [2, 3, 5])
def test_a_server_that_always_answers_call_0_finishes_the_demo_task(
    backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rounds: int
) -> None:
    with FakeMandApi(tmp_path / "requests.jsonl", reuse_ids=True, tool_rounds=rounds) as fake:
        monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
        monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-call0")
        monkeypatch.setenv("MANDAPI_BASE_URL", fake.base_url)
        out = run_cli(["--thread", "c0", "--task", "How long does shipping take?", "--live",
                       "--max-attempts", str(rounds + 1), "--db", backend.db])
        requests = fake.requests()
    assert (out["status"], out["exit_code"], out["attempts"]) == ("done", 0, rounds + 1), out
    assert "[ship-01]" in out["answer"]
    assert len(requests) == rounds + 1
    last = requests[-1]["body"]["messages"]
    assert [m.get("tool_call_id") for m in last if m["role"] == "tool"] == ["call_0"] * rounds
    with open_store(backend.db, create=False, read_only=True) as store:
        steps = thread_history(store, "c0")["steps"]
    assert [s["outcome"] for s in steps] == ["tool_calls"] * rounds + ["answer"]
    assert all(s["tool_calls"][0]["observation"] for s in steps[:-1]), "each turn its own result"


@pytest.mark.parametrize("messages, still_open", [
    ([TASK, assistant(("call_0", *Q)), result("call_0"), assistant(("call_0", *Q))], ["call_0"]),
    ([TASK, assistant(("call_0", *Q), ("call_1", *Q)), result("call_1"), result("call_0"),
      assistant(("call_1", *Q), ("call_0", *Q)), result("call_0")], ["call_1"]),
    ([TASK, assistant(("a", *Q)), result("a"), assistant(("a", *Q)), result("a"),
      assistant(("a", *Q)), result("a")], []),
])
def test_ids_reused_across_turns_pair_positionally(messages, still_open) -> None:
    assert open_calls(messages) == still_open


@pytest.mark.parametrize("messages, problem", [
    ([TASK, assistant(("call_0", *Q), ("call_0", *Q))], "twice"),
    ([TASK, assistant(("call_0", *Q)), result("call_0"), result("call_0")], "not an open call"),
    ([TASK, assistant(("call_0", *Q)), result("call_0"), assistant(("call_1", *Q)),
      result("call_0")], "not an open call"),
    ([TASK, assistant(("call_0", *Q)), assistant(("call_0", *Q))], "unanswered"),
])
def test_pairing_still_refuses_what_is_broken(messages, problem) -> None:
    with pytest.raises(UnsafeHistoryError, match=problem):
        open_calls(messages)


def test_the_tools_node_answers_a_call_whose_id_an_earlier_turn_used() -> None:
    log = SimpleNamespace(record=lambda *a: None)
    runtime = SimpleNamespace(context=StepContext("t", None, None, log))  # type: ignore[arg-type]
    state = {"messages": [TASK, assistant(("call_0", "get_reference", {"ref_id": "war-01"})),
                          result("call_0", "old"),
                          assistant(("call_0", "get_reference", {"ref_id": "ship-01"}))],
             "progress": {"attempts": 2}, "thread": {"workspace": None, "allow_writes": None}}
    (answer,) = tools_node(state, runtime)["messages"]
    assert answer["tool_call_id"] == "call_0" and "ship-01" in answer["content"]


def test_a_crash_left_call_with_a_reused_id_gets_its_not_executed_result() -> None:
    messages = [TASK, assistant(("call_0", *Q)), result("call_0"), assistant(("call_0", *Q))]
    assert [m["tool_call_id"] for m in not_executed_results(messages)] == ["call_0"]


def test_compaction_stubs_and_indexes_each_result_with_its_own_turns_call() -> None:
    turns = []
    for n, ref in enumerate(["war-01", "ship-01", "pay-01", "ret-01"]):
        turns += [{**assistant(("call_0", "get_reference", {"ref_id": ref})), "content": f"t{n}"},
                  result("call_0", json.dumps({"text": "x" * 2000, "evidence": [ref]}))]
    messages = [TASK, *turns, {"role": "assistant", "content": None, "tool_calls": []}]
    stubbed = compact(messages[:-1], 1200)
    stubs = [m for m in stubbed if m["role"] == "tool" and m["content"].startswith(STUB_PREFIX)]
    assert stubs
    for stub in stubs:
        summary = json.loads(stub["content"][len(STUB_PREFIX):].rsplit(" (call the tool", 1)[0])
        assert json.loads(summary["arguments"])["ref_id"] == summary["evidence"][0]
    dropped = compact(messages[:-1], 300)
    index = dropped[1]["content"]
    for ref in ["war-01", "ship-01", "pay-01"]:
        assert f"- {ref} (via get_reference {json.dumps({'ref_id': ref})})" in index


class TwoTurnWriter:
    """Asks for `write_file` as `call_0` on every turn, with the turn's text."""

    def __init__(self, turns: int = 2) -> None:
        self.turns = turns
        self.requests: list[list[dict[str, Any]]] = []

    def complete(self, messages, tools) -> ModelReply:
        self.requests.append(messages)
        n = len(self.requests)
        if n > self.turns:
            told = [m["content"] for m in messages if m["role"] == "tool"]
            return ModelReply({"role": "assistant", "content": json.dumps(told)}, USAGE)
        return ModelReply(assistant(("call_0", "write_file",
                                     {"path": "report.md", "text": f"turn {n}\n"})), USAGE)


@pytest.mark.parametrize("first, second, final", [
    ("--approve", "--approve", "turn 2\n"),
    ("--reject", "--approve", "turn 2\n"),
    ("--approve", "--reject", "turn 1\n"),
    ("--reject", "--reject", None),
])
def test_a_decision_on_one_turns_call_0_never_answers_another_turns_call_0(
    backend, tmp_path: Path, first: str, second: str, final: str | None
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    model = TwoTurnWriter()
    factory = lambda m, s: model  # noqa: E731
    out = run_cli(["--thread", "r", "--task", "t", "--allow-writes", str(out_dir), "--once",
                   "--db", backend.db], model_factory=factory)
    assert out["exit_code"] == 7 and out["pending_calls"][0]["decision"] is None
    assert run_cli(["--thread", "r", first, "call_0", "--db", backend.db])["exit_code"] == 0
    out = run_cli(["--thread", "r", "--once", "--db", backend.db], model_factory=factory)
    assert (out["exit_code"], out["attempts"]) == (7, 2), out
    assert [c["decision"] for c in out["pending_calls"]] == [None], "turn 1's decision stays there"
    assert '"text":"turn 2\\n"' in out["pending_calls"][0]["arguments"]
    out = run_cli(["--thread", "r", second, "call_0", "--db", backend.db])
    assert out["exit_code"] == 0, out
    target = out_dir / "report.md"
    assert (target.read_text() if target.exists() else None) == final
    out = run_cli(["--thread", "r", "--once", "--db", backend.db], model_factory=factory)
    assert out["status"] == "done" and len(model.requests) == 3
    told = json.loads(out["answer"])
    assert [t.split(" ")[0] for t in told] == [
        "Approved" if d == "--approve" else "REJECTED" for d in (first, second)]
    with open_store(backend.db, create=False, read_only=True) as store:
        history = thread_history(store, "r")
    assert [(d["step"], d["tool_call_id"], d["decision"]) for d in history["decisions"]] == [
        (1, "call_0", first[2:]), (2, "call_0", second[2:])]
    observed = [s["tool_calls"][0]["observation"] for s in history["steps"][:2]]
    assert observed == told
