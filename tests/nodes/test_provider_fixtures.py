"""Reply shapes real servers send (llama.cpp, vLLM, Ollama, LiteLLM, gateways), one fixture each.

Each `tests/fixtures/providers/*.json` holds a body as a server sent it (`body`, or `raw`
text for what `json.dumps` cannot write, such as a key given twice), the public report
or document it comes from (`source`), what must happen (`expect`: `answer` stored,
`tool` call stored and answered, `bad_response` with `reason`, `not_done` (cut off by
the token limit: the text kept, the next step continues), `cut_call` (a call cut off by
the token limit: never executed), `content_filter` (the thread stops)) and the tokens
that count (`tokens`). A fixture may carry `xfail` (strict) for a behaviour not built yet.

Every fixture goes through the real client (`nodes.mandapi.MandApiModel` over
`httpx.MockTransport`) and through a real one-step run on SQLite: exactly one request
and one counted attempt per request, and nothing stored that the model did not give.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from graph.agent import build_graph
from graph.step.models import make_model
from graph.store import open_store
from nodes.arguments import canonical
from nodes.errors import ModelRequestError
from nodes.mandapi import MandApiModel
from nodes.prompts import CONTINUE_PROMPT
from nodes.replies import MISSING_ID, derived_call_id
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "providers"
TASK = "How long does shipping take at the demo shop?"
FINAL = {"choices": [{"message": {"role": "assistant", "content": "3 days [ship-01]."},
                      "finish_reason": "stop"}], "usage": {"total_tokens": 1}}
EXPECTS = ("answer", "tool", "bad_response", "not_done", "cut_call", "content_filter")


def _load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def _cases() -> list[Any]:
    out = []
    for path in sorted(FIXTURES.glob("*.json")):
        fixture = _load(path.stem)
        marks = [pytest.mark.xfail(strict=True, reason=fixture["xfail"])] if "xfail" in fixture else []
        out.append(pytest.param(path.stem, marks=marks, id=path.stem))
    return out


def _wire(fixture: dict[str, Any]) -> bytes:
    return fixture["raw"].encode() if "raw" in fixture else json.dumps(fixture["body"]).encode()


def _given(fixture: dict[str, Any]) -> dict[str, Any]:
    return fixture["body"]["choices"][0]["message"]


def _expected_calls(fixture: dict[str, Any], thread_id: str | None) -> list[dict[str, Any]]:
    """The calls as they must be kept: names as given, arguments as text, ids given or derived."""
    calls = _given(fixture)["tool_calls"]
    given_ids = {c.get("id") for c in calls if c.get("id")}
    out = []
    for index, call in enumerate(calls):
        arguments = call["function"].get("arguments")
        text = canonical(arguments) if isinstance(arguments, dict) else (arguments or "{}")
        text = "" if arguments == "" else text
        call_id = call.get("id") or (MISSING_ID if thread_id is None
                                     else derived_call_id(thread_id, 1, index, given_ids))
        out.append({"id": call_id, "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": text}})
    return out


def test_the_corpus_covers_every_field_issue_29_names() -> None:
    fixtures = [_load(p.stem) for p in FIXTURES.glob("*.json")]
    assert len(fixtures) >= 30
    assert all(f["source"] and f["expect"] in EXPECTS for f in fixtures)
    finishes = {f["body"]["choices"][0].get("finish_reason") for f in fixtures if "body" in f
                and f["body"].get("choices")}
    assert {"stop", "tool_calls", "length", "content_filter", None, "eos",
            "function_call"} <= finishes
    assert sum("raw" in f for f in fixtures) >= 4, "duplicate keys"


@pytest.mark.parametrize("name", _cases())
def test_each_provider_reply_through_the_client(name: str) -> None:
    fixture = _load(name)
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, content=_wire(fixture))

    model = MandApiModel(httpx.Client(transport=httpx.MockTransport(handler)), api_key="sk-test-00000000",
                         model_id="m", base_url="http://mandapi.test/v1")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": TASK}]
    if fixture["expect"] == "bad_response":
        with pytest.raises(ModelRequestError) as info:
            model.complete(messages, [])
        assert info.value.error_code == "bad_response" and fixture["reason"] in info.value.message
    else:
        reply = model.complete(messages, [])
        given = _given(fixture)
        assert reply.message["content"] == given["content"]
        assert reply.usage["total_tokens"] == fixture["tokens"]
        if fixture["expect"] in ("tool", "cut_call"):  # the reason node drops a cut call, not the client
            assert reply.message["tool_calls"] == _expected_calls(fixture, None)
        else:
            assert "tool_calls" not in reply.message
        assert reply.finish_reason == fixture["body"]["choices"][0].get("finish_reason")
    assert len(requests) == 1


def _server(first: bytes) -> Any:
    requests: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        return httpx.Response(200, content=first if len(requests) == 1 else json.dumps(FINAL).encode())

    def factory(model_id: str, settings: Any) -> Any:
        return make_model(model_id, settings, transport=httpx.MockTransport(handler))

    factory.requests = requests  # type: ignore[attr-defined]
    return factory


def _log(thread_id: str, db: str) -> list[dict[str, Any]]:
    with open_store(db, create=False, read_only=True) as store:
        return list(store.log.rows(thread_id))


def _stored(db: str) -> tuple[list[dict[str, Any]], Any]:
    with open_store(db, create=False, read_only=True) as store:
        values = build_graph(store.checkpointer).get_state(
            {"configurable": {"thread_id": "t1"}}).values
        return values["messages"], store.ledger.read("t1")


@pytest.mark.parametrize("name", _cases())
def test_each_provider_reply_through_a_one_step_run(name: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = _load(name)
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")
    db = str(tmp_path / "t.sqlite")
    factory = _server(_wire(fixture))
    argv = ["--thread", "t1", "--live", "--once", "--db", db]
    out = run_cli([*argv, "--task", TASK, "--model", "mandapi-large"], model_factory=factory)
    stored, entry = _stored(db)
    task = {"role": "user", "content": TASK}
    assert len(factory.requests) == 1 and (entry.attempts, entry.claimed, out["attempts"]) == (1, 1, 1)
    assert out["usage"]["total_tokens"] == fixture["tokens"]
    expect = fixture["expect"]
    if expect == "bad_response":
        assert (out["exit_code"], out["error_code"], out["status"]) == (6, "bad_response", "ready")
        assert fixture["reason"] in out["error"] and stored == [task]
    elif expect == "answer":
        content = _given(fixture)["content"]
        assert (out["exit_code"], out["status"], out["answer"]) == (0, "done", content)
        assert stored == [task, {"role": "assistant", "content": content}]
    elif expect == "tool":
        calls = _expected_calls(fixture, "t1")
        assert (out["exit_code"], out["status"]) == (0, "ready")
        assert stored == [task, {"role": "assistant", "content": _given(fixture)["content"],
                                 "tool_calls": calls}]
        done = run_cli(argv, model_factory=factory)  # the tools answer, then one more request
        assert (done["exit_code"], done["status"], done["attempts"]) == (0, "done", 2)
        assert len(factory.requests) == 2
        answered = [m["tool_call_id"] for m in factory.requests[1]["messages"] if m["role"] == "tool"]
        assert answered == [c["id"] for c in calls]
    elif expect == "not_done":
        partial = _given(fixture)["content"]
        assert (out["exit_code"], out["status"], out["answer"], out["partial_answer"]) == (
            0, "ready", None, partial)
        assert stored == [task, {"role": "assistant", "content": partial}]
        done = run_cli(argv, model_factory=factory)  # the next step asks the model to continue
        assert factory.requests[1]["messages"][1:] == [
            task, {"role": "assistant", "content": partial}, {"role": "user", "content": CONTINUE_PROMPT}]
        final = FINAL["choices"][0]["message"]["content"]
        assert (done["status"], done["answer"], done["partial_answer"]) == ("done", partial + final, None)
    elif expect == "cut_call":
        assert (out["exit_code"], out["status"], out["answer"]) == (0, "ready", None)
        assert stored == [task], "a call cut off by the token limit is not kept, so never executed"
        (row,) = [r for r in _log("t1", db) if r["kind"] == "reason"]
        assert row["payload"]["cut_tool_calls"] == [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in _expected_calls(fixture, "t1")]
        assert (row["payload"]["finish_reason"], row["payload"]["tool_calls"]) == ("length", [])
        done = run_cli(argv, model_factory=factory)
        assert [m["role"] for m in factory.requests[1]["messages"]] == ["system", "user"]
        assert (done["status"], done["attempts"]) == ("done", 2)
    else:
        assert (out["status"], out["stop_reason"], out["exit_code"]) == ("exhausted", "content_filter", 3)
        assert (out["error_code"], stored) == ("content_filter", [task])
        said = _given(fixture)["content"]
        assert (repr(said) if said else "no text") in out["error"]
