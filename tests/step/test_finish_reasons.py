"""A reply's `finish_reason` (issue 29): kept in the attempt log, and acted on.

`length` is not an answer: the text is kept, the next step asks the model to continue,
a call cut off is never executed, and a budget that ends first leaves the thread
`exhausted` with its partial answer flagged. `content_filter` stops the thread. Every
test goes through the real client (`nodes.mandapi.MandApiModel`) over an
`httpx.MockTransport`, with real `graph.run` steps, on every backend.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from graph.agent import build_graph
from graph.step.models import make_model
from graph.store import open_store
from nodes.prompts import CONTINUE_PROMPT
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


def body(content: str | None, finish: str | None, *calls: tuple[str, str, str]) -> dict[str, Any]:
    """A chat-completions body with `finish_reason` `finish` and calls `(id, name, arguments)`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, n, a in calls]
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}}


class Server:
    """A `graph.run` model factory answering `script` in order; keeps each request's JSON."""

    def __init__(self, *script: dict[str, Any]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        return httpx.Response(200, json=self.script.pop(0))

    def __call__(self, model_id: str, settings: Any) -> Any:
        return make_model(model_id, settings, transport=httpx.MockTransport(self.handler))


@pytest.fixture(autouse=True)
def live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-finish-012")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")


def step(db: str, server: Server, *flags: str) -> dict[str, Any]:
    return run_cli(["--thread", "t1", "--live", "--once", "--db", db, *flags], model_factory=server)


def first(db: str, server: Server, *flags: str) -> dict[str, Any]:
    return step(db, server, "--task", TASK, "--model", "mandapi-large", *flags)


def stored(db: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the stored conversation, the attempt log's `reason` payloads in order)."""
    with open_store(db, create=False, read_only=True) as store:
        values = build_graph(store.checkpointer).get_state({"configurable": {"thread_id": "t1"}}).values
        rows = [r["payload"] for r in store.log.rows("t1") if r["kind"] == "reason"]
    return values["messages"], rows


def test_a_reply_cut_off_by_the_token_limit_is_continued_then_done(backend) -> None:
    server = Server(body("Shipping takes 3 ", "length"), body("days [ship-01].", "stop"))
    cut = first(backend.db, server)
    assert (cut["status"], cut["exit_code"], cut["answer"], cut["partial_answer"]) == (
        "ready", 0, None, "Shipping takes 3 ")
    done = step(backend.db, server)
    assert (done["status"], done["exit_code"], done["attempts"]) == ("done", 0, 2)
    assert done["answer"] == "Shipping takes 3 days [ship-01]." and done["partial_answer"] is None
    task, partial, cont = ({"role": "user", "content": TASK},
                           {"role": "assistant", "content": "Shipping takes 3 "},
                           {"role": "user", "content": CONTINUE_PROMPT})
    assert server.requests[1]["messages"][1:] == [task, partial, cont], "the model is asked to go on"
    messages, rows = stored(backend.db)
    assert messages == [task, partial, cont, {"role": "assistant", "content": "days [ship-01]."}]
    assert [(r["outcome"], r["finish_reason"], r.get("truncated")) for r in rows] == [
        ("truncated", "length", True), ("answer", "stop", None)]
    assert backend.ledger_row("t1") == (2, 2, 4), "the continuation is a counted attempt"


def test_a_thread_whose_budget_ends_on_a_cut_off_reply_is_exhausted_with_its_partial_answer(
        backend) -> None:
    server = Server(body("Shipping ", "length"), body("takes ", "length"))
    first(backend.db, server, "--max-attempts", "2")
    out = step(backend.db, server)
    assert (out["status"], out["stop_reason"], out["exit_code"]) == ("exhausted", "budget", 3)
    assert (out["answer"], out["partial_answer"], out["review_required"]) == (
        None, "Shipping takes ", False)
    again = step(backend.db, server)  # a finished thread: answered without a request
    assert (again["status"], again["partial_answer"], again["exit_code"]) == (
        "exhausted", "Shipping takes ", 3)
    assert len(server.requests) == 2 and backend.ledger_row("t1") == (2, 2, 2)


def test_the_content_filter_stops_the_thread_and_shows_the_servers_text(backend) -> None:
    server = Server(body("I cannot help with", "content_filter"))
    out = first(backend.db, server)
    assert (out["status"], out["stop_reason"], out["exit_code"], out["error_code"]) == (
        "exhausted", "content_filter", 3, "content_filter")
    assert "'I cannot help with'" in out["error"] and out["usage"]["total_tokens"] == 40
    messages, rows = stored(backend.db)
    assert messages == [{"role": "user", "content": TASK}], "a filtered reply is not stored"
    assert (rows[0]["outcome"], rows[0]["finish_reason"], rows[0]["thought"]) == (
        "error", "content_filter", "I cannot help with")
    again = step(backend.db, server)
    assert (again["status"], again["stop_reason"], again["exit_code"]) == ("exhausted", "content_filter", 3)
    assert len(server.requests) == 1 and backend.ledger_row("t1") == (1, 1, 4)


def test_a_tool_call_cut_off_by_the_token_limit_is_never_executed(backend) -> None:
    server = Server(body("Let me look that up.", "length",
                        ("c1", "get_reference", '{"ref_id": "ship-01"}'),
                        ("c2", "search_references", '{"query": "shipp')),
                    body("Shipping takes 3 days [ship-01].", "stop"))
    out = first(backend.db, server)
    assert (out["status"], out["exit_code"]) == ("ready", 0)
    messages, rows = stored(backend.db)
    kept = messages[1]
    assert [c["id"] for c in kept["tool_calls"]] == ["c1"], "the whole call is kept, the cut one is not"
    assert rows[0]["cut_tool_calls"] == [
        {"id": "c2", "name": "search_references", "arguments": '{"query": "shipp'}]
    done = step(backend.db, server)  # the tools node answers c1 only, then the model answers
    assert done["status"] == "done"
    sent = server.requests[1]["messages"]
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["c1"]
    assert "c2" not in json.dumps(sent)


def test_a_reply_cut_off_inside_its_only_call_stores_nothing_and_the_next_step_asks_again(
        backend) -> None:
    server = Server(body(None, "length", ("c1", "search_references", '{"query": "sh')),
                    body("3 days [ship-01].", "stop"))
    out = first(backend.db, server)
    assert (out["status"], out["exit_code"], out["partial_answer"]) == ("ready", 0, None)
    assert stored(backend.db)[0] == [{"role": "user", "content": TASK}]
    assert step(backend.db, server)["status"] == "done"
    assert server.requests[1]["messages"] == server.requests[0]["messages"], "no tool ran, nothing added"


@pytest.mark.parametrize("finish", [None, "eos", "function_call", "stop"])
def test_an_unfamiliar_finish_reason_is_decided_by_the_content_and_kept_raw(sqlite_db, finish) -> None:
    db = str(sqlite_db)  # the decision is the node's; the backends store the row alike (above)
    server = Server(body(None, finish, ("c1", "get_reference", '{"ref_id": "ship-01"}')),
                    body("3 days [ship-01].", finish))
    first(db, server)
    done = step(db, server)
    assert (done["status"], done["answer"]) == ("done", "3 days [ship-01].")
    assert [r["finish_reason"] for r in stored(db)[1]] == [finish, finish]
    assert all("finish_reason" not in m for r in server.requests for m in r["messages"]), (
        "never sent to the server: strict servers reject unknown fields")


KEY = "sk-test-finish-012"  # the key `live_env` sets


def test_a_key_split_across_cut_off_parts_is_redacted_in_the_joined_answer(backend) -> None:
    server = Server(body("The key is sk-te", "length"), body("st-fini", "length"),
                    body("sh-012, stored.", "stop"))
    cut = first(backend.db, server)
    assert cut["partial_answer"] == "The key is sk-te"
    cut = step(backend.db, server)
    assert cut["partial_answer"] == "The key is sk-test-fini", "no part holds the whole key yet"
    done = step(backend.db, server)
    assert done["answer"] == "The key is sk-test-fini[redacted: API key], stored."
    messages, rows = stored(backend.db)
    spelled = "".join(m["content"] or "" for m in messages if m["role"] == "assistant")
    assert KEY not in spelled, "the stored parts, read in order, never spell the key"
    assert KEY not in json.dumps(rows) and KEY not in json.dumps(done)


def test_a_whitespace_only_cut_off_part_is_kept_in_the_joined_answer(backend) -> None:
    server = Server(body("Shipping takes", "length"), body(" ", "length"),
                    body("3 days [ship-01].", "stop"))
    first(backend.db, server)
    cut = step(backend.db, server)
    assert (cut["status"], cut["partial_answer"]) == ("ready", "Shipping takes ")
    done = step(backend.db, server)
    assert done["answer"] == "Shipping takes 3 days [ship-01].", "the join is what the model sent"
    messages, _ = stored(backend.db)
    assert [m["content"] for m in messages if m["role"] == "assistant"] == [
        "Shipping takes", " ", "3 days [ship-01]."]


@pytest.mark.parametrize("last", ["", None])
def test_an_empty_final_part_after_cut_off_parts_finishes_the_joined_answer(backend, last) -> None:
    server = Server(body("Shipping takes 3 days [ship-01].", "length"), body(last, "stop"))
    first(backend.db, server)
    done = step(backend.db, server)
    assert (done["status"], done["exit_code"], done["answer"], done["partial_answer"]) == (
        "done", 0, "Shipping takes 3 days [ship-01].", None)
    _, rows = stored(backend.db)
    assert [(r["outcome"], r["finish_reason"]) for r in rows] == [("truncated", "length"), ("answer", "stop")]


def test_an_empty_reply_without_a_partial_answer_is_still_a_bad_response(sqlite_db) -> None:
    out = first(str(sqlite_db), Server(body("  ", "stop")))
    assert (out["status"], out["error_code"], out["exit_code"]) == ("ready", "bad_response", 6)
