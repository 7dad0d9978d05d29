"""The tools node, called directly with a state dict and fakes (no graph, no database)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nodes.tools import tools_node
from tests.fakes import RecordingLog
from tests.harness import new_state, node_runtime
from tests.memory_ledger import MemoryLedger


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def _state_asking(*calls: dict[str, Any], **limits: Any) -> dict[str, Any]:
    """A thread whose latest message is an assistant message with `calls`."""
    state = new_state(**limits)
    state["messages"] = [*state["messages"],
                         {"role": "assistant", "content": None, "tool_calls": list(calls)}]
    state["progress"] = {**state["progress"], "attempts": 1}
    return state


def test_tools_runs_read_only_tools_and_pairs_each_result_with_its_call_id_in_order() -> None:
    log = RecordingLog()
    state = _state_asking(_call("call_b", "get_reference", ref_id="ret-01"),
                          _call("call_a", "search_references", query="shipping"))
    results = tools_node(state, node_runtime(MemoryLedger(), log=log))["messages"]
    assert [(m["role"], m["tool_call_id"]) for m in results] == [("tool", "call_b"), ("tool", "call_a")]
    assert json.loads(results[0]["content"])["evidence"] == ["ret-01"]
    assert json.loads(results[1]["content"])["query"] == "shipping"
    assert [(row[1], row[2], row[3]["tool_call_id"]) for row in log.rows] == [
        (1, "tool", "call_b"), (1, "tool", "call_a")]


def test_tools_reports_an_unknown_tool_to_the_model_as_its_result() -> None:
    state = _state_asking(_call("call_1", "launch_rockets"))
    (result,) = tools_node(state, node_runtime(MemoryLedger()))["messages"]
    assert result["tool_call_id"] == "call_1" and "unknown tool" in result["content"]


def test_tools_answers_only_the_calls_of_the_latest_assistant_message() -> None:
    state = _state_asking(_call("call_0", "list_references"))
    state["messages"] = [*state["messages"], {"role": "tool", "tool_call_id": "call_0", "content": "{}"},
                         {"role": "assistant", "content": None,
                          "tool_calls": [_call("call_1", "list_references", topic="returns")]}]
    results = tools_node(state, node_runtime(MemoryLedger()))["messages"]
    assert [m["tool_call_id"] for m in results] == ["call_1"]


def test_tools_reads_the_workspace_and_never_writes_without_allow_writes(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.txt").write_text("alpha\nbeta\n")
    state = _state_asking(_call("r", "read_file", path="notes.txt"),
                          _call("w", "write_file", path="notes.txt", text="gone"),
                          workspace=str(folder))
    read, write = tools_node(state, node_runtime(MemoryLedger()))["messages"]
    assert "beta" in read["content"] and read["tool_call_id"] == "r"
    assert write["tool_call_id"] == "w" and "unknown tool" in write["content"]
    assert (folder / "notes.txt").read_text() == "alpha\nbeta\n"
