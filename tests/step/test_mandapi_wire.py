"""MandAPI over HTTP: the request body and headers, failures, replayed recordings, no key leaks."""

from __future__ import annotations

import json

import httpx
import pytest

from graph.step.models import make_model
from nodes.errors import ModelRequestError
from nodes.mandapi import MandApiModel, parse_reply
from nodes.prompts import SYSTEM_PROMPT
from tests.conftest import ROOT, run_cli
from tests.fakes import chat_completion

KEY = "sk-marker-7c1e55"
TASK = "How long does shipping take at the demo shop?"


@pytest.fixture
def live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-large")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")


def via(handler):
    """A model factory that sends through `httpx.MockTransport(handler)`."""
    return lambda model_id, settings: make_model(model_id, settings,
                                                 transport=httpx.MockTransport(handler))


def test_request_has_one_system_message_tools_and_bearer_auth(backend, live_env) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=chat_completion({"role": "assistant", "content": "ok [ship-01]"}))

    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--db", backend.db],
                  model_factory=via(handler))
    assert (out["status"], out["model"]) == ("done", "mandapi-large")
    (request,) = seen
    assert str(request.url) == "http://mandapi.test/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = json.loads(request.content)
    assert body["model"] == "mandapi-large"
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user"]
    assert body["messages"][0]["content"] == SYSTEM_PROMPT
    assert {t["function"]["name"] for t in body["tools"]} == {
        "search_references", "get_reference", "list_references"}
    assert KEY.encode() not in backend.dump()


def test_a_step_closes_its_http_client_when_it_ends(backend, live_env) -> None:
    # A server that keeps connections alive (LiteLLM's proxy) showed the client was never
    # closed: its socket stayed open until garbage collection, with a ResourceWarning.
    clients: list[httpx.Client] = []

    def factory(model_id, settings):
        clients.append(httpx.Client(transport=httpx.MockTransport(
            lambda request: httpx.Response(200, json=chat_completion(
                {"role": "assistant", "content": "ok [ship-01]"})))))
        return MandApiModel(clients[-1], api_key=settings.api_key, model_id=model_id,
                            base_url=settings.base_url)

    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--db", backend.db], model_factory=factory)
    assert out["status"] == "done"
    assert [client.is_closed for client in clients] == [True]


@pytest.mark.parametrize(
    ("raise_or_respond", "error_code"),
    [
        (httpx.ReadTimeout("slow"), "timeout"),
        (httpx.ConnectError("refused"), "connection"),
        (httpx.Response(500, json={"error": "x"}), "http_status"),
        (httpx.Response(401, json={"error": "bad key"}), "http_status"),
        (httpx.Response(200, text="<html>not json</html>"), "bad_response"),
        (httpx.Response(200, json={"choices": []}), "bad_response"),
        (httpx.Response(200, json=chat_completion({"role": "assistant", "content": ""})), "bad_response"),
    ],
)
def test_failed_request_is_counted_reported_and_not_retried(
    backend, live_env, raise_or_respond, error_code, capsys
) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if isinstance(raise_or_respond, Exception):
            raise raise_or_respond
        return raise_or_respond

    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--db", backend.db],
                  model_factory=via(handler))
    assert (out["exit_code"], out["error_code"], out["status"]) == (6, error_code, "ready")
    assert len(calls) == 1, "no retries"
    assert backend.ledger_row("t1") == (1, 1, 4)
    assert KEY not in out["error"] and KEY not in capsys.readouterr().out
    assert KEY.encode() not in backend.dump()


def test_recorded_responses_replay_through_the_real_client(backend, mandapi_replay) -> None:
    result = mandapi_replay(ROOT / "tests/fixtures/recordings/shipping.json", db=backend.db)
    assert [o["attempts"] for o in result.outcomes] == [1, 2, 3]
    assert result.status == "done" and "[ship-02]" in result.answer
    assert result.final["usage"] == {"prompt_tokens": 1553, "completion_tokens": 65, "total_tokens": 1618}
    # The tool results went back with their call ids, with the tool role only.
    last = result.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert [m.get("tool_call_id") for m in last if m["role"] == "tool"] == ["call_Zx81", "call_Zx82"]
    assert "7 to 14 business days" in last[-1]["content"]


def test_client_maps_transport_errors_without_leaking_headers() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    model = MandApiModel(httpx.Client(transport=httpx.MockTransport(handler)),
                         api_key=KEY, model_id="m", base_url="http://mandapi.test/v1")
    with pytest.raises(ModelRequestError) as info:
        model.complete([{"role": "system", "content": "s"}], [])
    assert info.value.error_code == "timeout"
    assert "mandapi.test" in str(info.value) and KEY not in str(info.value)
    assert KEY not in repr(model)


@pytest.mark.parametrize(
    "payload",
    [
        [],
        {"choices": [{"message": {"content": 5}}]},
        {"choices": [{"message": {"content": None, "tool_calls": [{"id": 3}]}}]},
        {"choices": [{"message": {"content": None, "tool_calls": "x"}}]},
        {"choices": ["x"]},
    ],
)
def test_malformed_answers_are_bad_responses(payload) -> None:
    with pytest.raises(ModelRequestError) as info:
        parse_reply(payload)
    assert info.value.error_code == "bad_response"


def test_reply_keeps_only_wire_keys_and_reported_usage() -> None:
    reply = parse_reply(chat_completion(
        {"role": "system", "content": "hi", "refusal": None, "extra": 1},
        {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}))
    assert reply.message == {"role": "assistant", "content": "hi"}
    assert reply.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
