"""Replies as real servers send them: each tolerance of `nodes.replies` (issue 29).

A call without an id (llama.cpp#11992, vercel/ai#7834) gets one id, once, derived from
the thread, the attempt and its index, never one the reply or the conversation already
uses, and kept from then on (INVARIANTS I6). Arguments sent as an object (llama.cpp#20198,
ollama#6155) become the canonical text the approval hash covers; `null` means `{}`. A key
given twice anywhere in the body is a counted `bad_response` (I12).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from graph.step.models import make_model
from graph.store import open_store
from graph.threads.history import step_log
from nodes.arguments import canonical
from nodes.errors import ModelRequestError
from nodes.mandapi import MandApiModel
from nodes.replies import (
    MISSING_ID,
    TOLERANCES,
    assign_call_ids,
    derived_call_id,
    parse_reply,
)
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"
USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}


def _reply(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": list(calls)},
                         "finish_reason": "tool_calls"}], "usage": USAGE}


def _call(**fields: Any) -> dict[str, Any]:
    function = {"name": "search_references", "arguments": '{"query":"shipping"}'}
    function.update(fields.pop("function", {}))
    return {"type": "function", "function": function, **fields}


def test_every_tolerance_names_the_public_report_it_comes_from() -> None:
    for rule in TOLERANCES:
        assert rule.__doc__ and "#" in rule.__doc__, rule.__name__


@pytest.mark.parametrize("call_id", [None, "", "absent"])
def test_call_without_an_id_is_kept_for_naming(call_id: Any) -> None:
    call = _call() if call_id == "absent" else _call(id=call_id)
    (kept,) = parse_reply(_reply(call)).message["tool_calls"]
    assert kept["id"] == MISSING_ID


def test_derived_id_is_stable_and_depends_on_thread_attempt_and_index() -> None:
    ids = {derived_call_id(t, a, i, ()) for t in ("t1", "t2") for a in (1, 2) for i in (0, 1)}
    assert len(ids) == 8
    assert derived_call_id("t1", 1, 0, ()) == derived_call_id("t1", 1, 0, ())


def test_derived_id_never_collides_with_an_id_the_server_gave_in_the_same_reply() -> None:
    clash = derived_call_id("t1", 3, 0, ())
    message = parse_reply(_reply(_call(id=""), _call(id=clash))).message
    named = assign_call_ids(message, "t1", 3)
    ids = [c["id"] for c in named["tool_calls"]]
    assert ids[1] == clash and ids[0] != clash and ids[0].startswith("call_")


def test_derived_id_never_collides_with_an_earlier_id_of_the_conversation() -> None:
    clash = derived_call_id("t1", 2, 0, ())
    earlier = [{"role": "user", "content": TASK},
               {"role": "assistant", "content": None, "tool_calls": [_call(id=clash)]},
               {"role": "tool", "tool_call_id": clash, "content": "x"}]
    named = assign_call_ids(parse_reply(_reply(_call())).message, "t1", 2, earlier)
    assert named["tool_calls"][0]["id"] not in {clash, MISSING_ID}


def test_ids_the_server_gave_are_never_renamed() -> None:
    message = parse_reply(_reply(_call(id="call_a"), _call(id="call_b"))).message
    assert assign_call_ids(message, "t1", 1) is message


@pytest.mark.parametrize(("arguments", "text"), [
    ({"query": "shipping", "limit": 3}, canonical({"limit": 3, "query": "shipping"})),
    ({"b": {"é": [1, 2]}, "a": None}, '{"a":null,"b":{"é":[1,2]}}'),
    (None, "{}"),
    ('{"query": "as sent"}', '{"query": "as sent"}'),
])
def test_object_or_null_arguments_become_the_canonical_text(arguments: Any, text: str) -> None:
    (call,) = parse_reply(_reply(_call(id="c1", function={"arguments": arguments}))).message["tool_calls"]
    assert call["function"]["arguments"] == text


def _complete(body: bytes) -> Any:
    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, content=body)))
    return MandApiModel(client, api_key="sk-test-00000000", model_id="m", base_url="http://x.test/v1").complete(
        [{"role": "system", "content": "s"}], [])


@pytest.mark.parametrize("body", [
    b'{"choices": [{"message": {"role": "assistant", "content": "a", "content": "b"}}]}',
    b'{"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c",'
    b' "id": "d", "function": {"name": "search_references", "arguments": "{}"}}]}}]}',
    b'{"usage": {"total_tokens": 1, "total_tokens": 2}, "choices": []}',
    b'{"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c",'
    b' "function": {"name": "search_references", "arguments": {"query": "a", "query": "b"}}}]}}]}',
])
def test_a_key_given_twice_anywhere_in_the_body_is_a_bad_response(body: bytes) -> None:
    with pytest.raises(ModelRequestError) as info:
        _complete(body)
    assert info.value.error_code == "bad_response" and "twice" in info.value.message


def test_duplicate_key_refusal_never_shows_the_api_key() -> None:
    body = b'{"sk-test-00000000": 1, "sk-test-00000000": 2, "choices": []}'
    with pytest.raises(ModelRequestError) as info:
        _complete(body)
    assert "sk-test-00000000" not in info.value.message


def _server(bodies: list[dict[str, Any]]):
    requests: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        return httpx.Response(200, json=bodies.pop(0))

    def factory(model_id: str, settings: Any) -> Any:
        return make_model(model_id, settings, transport=httpx.MockTransport(handler))

    factory.requests = requests  # type: ignore[attr-defined]
    return factory


def test_a_call_without_an_id_is_executed_and_its_id_kept_through_the_next_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")
    answer = {"choices": [{"message": {"role": "assistant", "content": "3 days [ship-01]"}}],
              "usage": USAGE}
    factory = _server([_reply(_call(function={"arguments": {"query": "shipping"}})), answer])
    db = str(tmp_path / "t.sqlite")
    argv = ["--thread", "t1", "--live", "--once", "--db", db]
    first = run_cli([*argv, "--task", TASK, "--model", "mandapi-large"], model_factory=factory)
    assert (first["exit_code"], first["status"]) == (0, "ready")
    done = run_cli(argv, model_factory=factory)
    assert (done["exit_code"], done["status"], done["attempts"]) == (0, "done", 2)
    sent = factory.requests[1]["messages"]
    call = sent[2]["tool_calls"][0]
    assert call["id"] == derived_call_id("t1", 1, 0, ())
    assert call["function"]["arguments"] == '{"query":"shipping"}'
    assert sent[3]["role"] == "tool" and sent[3]["tool_call_id"] == call["id"]
    with open_store(db, create=False, read_only=True) as store:
        logged = step_log(store, "t1")[0]
    assert call["id"] in json.dumps(logged)
