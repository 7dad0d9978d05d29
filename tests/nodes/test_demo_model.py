"""The offline demo model: each demo question finds its reference; a folder is worked through.

The model is driven the way the graph drives it (a request, the tools node's results,
the next request), with the real tools; one test per mode also runs the whole graph.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodes import ranking
from nodes.demo_model import OfflineDemoModel
from nodes.prompts import SYSTEM_PROMPT
from nodes.tool_specs import tool_specs
from nodes.tools import MAX_TOOL_OUTPUT_CHARS, run_tool_call
from nodes.workspace import Workspace
from tests.conftest import PYTHON, ROOT, run_cli, subprocess_env

DEMO_QUESTIONS = {
    "How long does shipping take at the demo shop?": "ship-01",
    "How long does shipping take?": "ship-01",
    "How fast is delivery?": "ship-01",
    "When will my order arrive?": "ship-01",
    "Do you offer express shipping?": "ship-01",
    "Do you ship internationally?": "ship-02",
    "Do you ship abroad?": "ship-02",
    "How long does international delivery take?": "ship-02",
    "Do I pay customs duties?": "ship-02",
    "Can I order from another country?": "ship-02",
    "Can I return an item?": "ret-01",
    "How do I return an item?": "ret-01",
    "How do I get a refund?": "ret-01",
    "Can I send an item back?": "ret-01",
    "Which payment methods do you accept?": "pay-01",
    "When is my card charged?": "pay-01",
    "Can I pay by invoice?": "pay-01",
    "How can I pay?": "pay-01",
    "How long is the warranty?": "war-01",
    "What if my product is defective?": "war-01",
    "Is there a guarantee?": "war-01",
    "My product broke, what now?": "war-01",
}
TIMEOUT_TASK = "Which config files set a timeout, and to what?"


def converse(task: str, workspace: Path | None = None, turns: int = 4) -> list[dict[str, Any]]:
    """Runs the demo model with the real tools until it answers; returns the conversation."""
    model, tools = OfflineDemoModel(), tool_specs(workspace is not None)
    folder = Workspace(workspace) if workspace is not None else None
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": task}]
    for _ in range(turns):
        reply = model.complete(messages, tools).message
        messages.append(reply)
        if not reply.get("tool_calls"):
            return messages
        messages += [{"role": "tool", "tool_call_id": call["id"], "content": run_tool_call(call, folder)}
                     for call in reply["tool_calls"]]
    raise AssertionError(f"no answer after {turns} turns")


def calls_of(messages: list[dict[str, Any]]) -> list[list[tuple[str, dict[str, Any]]]]:
    """Per assistant turn with tool calls: `(name, arguments)` of each call."""
    return [[(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]]
            for m in messages if m["role"] == "assistant" and m.get("tool_calls")]


def make_project(root: Path) -> Path:
    (root / "config").mkdir(parents=True)
    (root / "deploy").mkdir()
    (root / "config" / "server.toml").write_text('[server]\nport = 8080\nrequest_timeout_s = 30\n')
    (root / "deploy" / "worker.yaml").write_text("queue: jobs\nretries: 3\ntimeout: 45s\n")
    (root / "README.md").write_text("# My project\n\nRun it with make run.\n")
    (root / "logo.png").write_bytes(b"\x89PNG\0\0timeout")
    return root


@pytest.mark.parametrize(("question", "ref_id"), DEMO_QUESTIONS.items())
def test_each_demo_question_is_answered_from_its_own_reference(question: str, ref_id: str) -> None:
    messages = converse(question)
    assert calls_of(messages) == [[("search_references", {"query": question})]]
    assert messages[-1]["content"].endswith(f"[{ref_id}]")


def test_shipping_abroad_is_answered_with_the_international_reference_by_the_graph(tmp_path) -> None:
    out = run_cli(["--thread", "intl", "--task", "Do you ship internationally?"])
    assert (out["status"], out["attempts"], out["max_attempts"]) == ("done", 2, 4)
    assert out["answer"].startswith("International orders take 7 to 14 business days")
    assert out["answer"].endswith("[ship-02]")


def test_workspace_demo_lists_and_searches_then_reads_the_best_files_then_cites_them(tmp_path) -> None:
    messages = converse(TIMEOUT_TASK, make_project(tmp_path / "my-project"))
    first, second = calls_of(messages)
    assert first == [("list_files", {"path": "."}), ("search_text", {"query": "timeout"}),
                     ("search_text", {"query": "config"}), ("search_text", {"query": "file"})]
    assert sorted(args["path"] for _, args in second) == ["config/server.toml", "deploy/worker.yaml"]
    assert {name for name, _ in second} == {"read_file"}
    answer = messages[-1]["content"]
    assert answer == ("From the files I read: `timeout: 45s` [deploy/worker.yaml#L3-L3]; "
                      "`request_timeout_s = 30` [config/server.toml#L3-L3].")


def test_every_cited_line_was_read_and_says_what_the_answer_quotes(tmp_path) -> None:
    root = make_project(tmp_path / "p")
    (root / "services").mkdir()
    (root / "services" / "api.py").write_text(
        "".join(f"# line {n}\n" for n in range(1, 90)) + "HTTP_TIMEOUT = 12\nREAD_TIMEOUT = 4\n")
    messages = converse("What is the HTTP timeout of the api service?", root)
    read = {json.loads(m["content"])["path"]: json.loads(m["content"]) for m in messages
            if m["role"] == "tool" and '"start_line"' in m["content"]}
    cited = re.findall(r"((?:`[^`]*`(?: / )?)+) \[([^#\]]+)#L(\d+)-L(\d+)\]", messages[-1]["content"])
    assert ("`HTTP_TIMEOUT = 12` / `READ_TIMEOUT = 4`", "services/api.py", "90", "91") in cited
    for quoted, path, start, end in cited:
        result = read[path]
        assert result["start_line"] <= int(start) <= int(end) <= result["end_line"]
        first = int(start) - result["start_line"]
        lines = result["text"].split("\n")[first:first + int(end) - int(start) + 1]
        assert re.findall(r"`([^`]*)`", quoted) == [line.strip() for line in lines]


def test_the_demo_model_decides_from_the_conversation_not_the_disk() -> None:
    model, tools = OfflineDemoModel(), tool_specs(True)
    listed = {"folder": ".", "files": [{"bytes": 10, "path": "notes/limits.txt"},
                                       {"bytes": 10, "path": "other.txt"}], "truncated": False,
              "evidence": []}
    found = {"query": "timeout", "matches": [{"line": 7, "path": "notes/limits.txt",
                                              "text": "timeout = 9"}], "evidence": []}
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "What timeout?"}]
    first = model.complete(messages, tools).message
    messages += [first, *({"role": "tool", "tool_call_id": c["id"],
                           "content": json.dumps(listed if c["function"]["name"] == "list_files" else found)}
                          for c in first["tool_calls"])]
    second = model.complete(messages, tools).message
    assert [json.loads(c["function"]["arguments"])["path"] for c in second["tool_calls"]] == [
        "notes/limits.txt"]
    read = {"path": "notes/limits.txt", "start_line": 5, "end_line": 7, "total_lines": 7,
            "text": "a = 1\nb = 2\ntimeout = 9", "evidence": ["notes/limits.txt#L5-L7"]}
    messages += [second, {"role": "tool", "tool_call_id": second["tool_calls"][0]["id"],
                          "content": json.dumps(read)}]
    assert model.complete(messages, tools).message == {
        "role": "assistant", "content": "From the files I read: `timeout = 9` [notes/limits.txt#L7-L7]."}


def test_a_folder_with_nothing_about_the_task_gets_an_honest_answer_at_the_second_request(tmp_path):
    messages = converse("Which database does the billing service use?", make_project(tmp_path / "p"))
    assert len(calls_of(messages)) == 1
    assert "found nothing about this task" in messages[-1]["content"]
    assert "[" not in messages[-1]["content"]


def test_search_output_cut_at_the_cap_still_yields_its_whole_matches(tmp_path) -> None:
    root = tmp_path / "big"
    root.mkdir()
    for i in range(30):
        (root / f"svc{i:02d}.conf").write_text(f"name = svc{i}\ntimeout = {i}  # " + "x" * 300 + "\n")
    messages = converse("Which timeout do the services use?", root)
    searched = next(m["content"] for m in messages if m["role"] == "tool"
                    and m["content"].startswith('{"evidence": ["svc00.conf#L2-L2"'))
    assert len(searched) <= MAX_TOOL_OUTPUT_CHARS and searched.endswith("[output cut]")
    assert calls_of(messages)[1][0] == ("read_file", {"path": "svc00.conf", "offset": 1, "limit": 60})
    assert messages[-1]["content"].startswith("From the files I read: `timeout = 0  # xxx")


def test_the_workspace_demo_is_deterministic(tmp_path) -> None:
    root = make_project(tmp_path / "p")
    assert converse(TIMEOUT_TASK, root) == converse(TIMEOUT_TASK, root)


def test_the_whole_workspace_demo_finishes_within_the_default_budget(tmp_path) -> None:
    make_project(tmp_path / "my-project")
    out = run_cli(["--thread", "f1", "--task", TIMEOUT_TASK, "--workspace", "my-project"])
    assert (out["status"], out["attempts"], out["max_attempts"]) == ("done", 3, 4)
    assert "[config/server.toml#L3-L3]" in out["answer"] and "[deploy/worker.yaml#L3-L3]" in out["answer"]


def test_bm25_weights_a_shared_word_in_a_collection_of_two() -> None:
    assert [i for i, _ in ranking.rank("the timeout", ["timeout = 3", "port = 1"])] == [0]
    assert ranking.rank("timeout", []) == [] and ranking.rank("the", ["the timeout"]) == []
    assert ranking.search_fragments("Do you ship internationally?") == ["internat", "ship"]


def test_ranking_libraries_are_imported_only_when_something_is_ranked() -> None:
    code = ("import sys, nodes.demo_model, nodes.tools, nodes.references; "
            "print(sorted(m for m in ('numpy', 'rank_bm25', 'snowballstemmer') if m in sys.modules))")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=subprocess_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
