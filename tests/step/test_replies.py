"""Replies that cannot be stored, replies over the caps, and the tokens of refused replies.

Every paid reply is either stored or refused as a counted `bad_response` (exit 6, or 3
on the last attempt) with a row in the attempt log, and its valid reported usage counts
toward the thread's token cap (INVARIANTS I11, I13).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from graph.api import open_database
from graph.step.models import make_model
from graph.store import open_store
from graph.threads.history import step_log
from nodes.errors import ModelRequestError
from nodes.replies import (
    MAX_NAME_CHARS,
    MAX_REPLY_BYTES,
    MAX_REPLY_CHARS,
    MAX_TOKENS_PER_REPLY,
    MAX_TOOL_CALLS,
    decode_body,
    parse_reply,
)
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"
USAGE_40 = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}


@pytest.fixture(autouse=True)
def live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
    monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-large")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")


def _call(call_id: Any = "call_1", name: Any = "search_references",
          arguments: Any = '{"query": "shipping"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _body(message: Any = None, usage: Any = USAGE_40, **extra: Any) -> str:
    """A chat-completions body as JSON text (so it can hold what Python would escape)."""
    message = {"role": "assistant", "content": "ok [ship-01]"} if message is None else message
    return json.dumps({"choices": [{"index": 0, "message": message}], "usage": usage, **extra})


def _raw(text: str, old: str, new: str) -> str:
    """`text` with one JSON fragment replaced verbatim (for values `json.dumps` cannot make)."""
    assert old in text
    return text.replace(old, new, 1)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


# Every value of a reply that we keep, given a wrong type, an out-of-range value, text no
# store can hold, or a size over the caps. Each is a JSON body exactly as the server sends it.
UNSTORABLE = {
    # usage
    "total_tokens past 64 bits": _raw(_body(), '"total_tokens": 40', '"total_tokens": 18446744073709551616'),
    "total_tokens over the per-reply cap": _body(usage={"total_tokens": MAX_TOKENS_PER_REPLY + 1}),
    "negative prompt_tokens": _body(usage={"prompt_tokens": -1, "total_tokens": 1}),
    "fractional completion_tokens": _body(usage={"completion_tokens": 1.5}),
    "total_tokens as text": _body(usage={"total_tokens": "40"}),
    "total_tokens as a boolean": _body(usage={"total_tokens": True}),
    "total_tokens NaN": _raw(_body(), '"total_tokens": 40', '"total_tokens": NaN'),
    "total_tokens with 5000 digits": _raw(_body(), '"total_tokens": 40', '"total_tokens": ' + "9" * 5000),
    "usage not an object": _body(usage=[40]),
    # content
    "content a number": _body({"role": "assistant", "content": 5}),
    "content a list": _body({"role": "assistant", "content": ["ok"]}),
    "content with a lone surrogate": _raw(_body({"role": "assistant", "content": "ok X"}), "X", "\\ud800"),
    "content with U+0000": _body({"role": "assistant", "content": "ok \x00 [ship-01]"}),
    "content over the character cap": _body({"role": "assistant", "content": "x" * (MAX_REPLY_CHARS + 1)}),
    # tool calls
    "tool_calls not a list": _body({"role": "assistant", "content": None, "tool_calls": "x"}),
    "tool call not an object": _body({"role": "assistant", "content": None, "tool_calls": [3]}),
    "tool call without function": _body({"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}),
    "tool call id a number": _body({"role": "assistant", "content": None, "tool_calls": [_call(7)]}),
    "tool call id an object": _body({"role": "assistant", "content": None, "tool_calls": [_call({})]}),
    "tool call id too long": _body({"role": "assistant", "content": None,
                                    "tool_calls": [_call("c" * (MAX_NAME_CHARS + 1))]}),
    "tool call id with a lone surrogate": _raw(_body({"role": "assistant", "content": None,
                                                      "tool_calls": [_call("cX")]}), "cX", "c\\udfff"),
    "tool call id with U+0000": _body({"role": "assistant", "content": None, "tool_calls": [_call("c\x00")]}),
    "tool name a number": _body({"role": "assistant", "content": None, "tool_calls": [_call(name=5)]}),
    "tool name empty": _body({"role": "assistant", "content": None, "tool_calls": [_call(name="")]}),
    "tool name with a lone surrogate": _raw(_body({"role": "assistant", "content": None,
                                                   "tool_calls": [_call(name="sX")]}), "sX", "s\\ud83d"),
    "arguments a list": _body({"role": "assistant", "content": None,
                               "tool_calls": [_call(arguments=["query"])]}),
    "arguments an object with a lone surrogate": _raw(_body({"role": "assistant", "content": None,
                                                             "tool_calls": [_call(arguments={"q": "X"})]}),
                                                      '"X"', '"\\ud800"'),
    "a key given twice": _raw(_body(), '"content": "ok [ship-01]"',
                              '"content": "ok [ship-01]", "content": "other"'),
    "arguments with U+0000": _body({"role": "assistant", "content": None,
                                    "tool_calls": [_call(arguments='{"query": "a\x00b"}')]}),
    "arguments over the character cap": _body({"role": "assistant", "content": None,
                                               "tool_calls": [_call(arguments="x" * (MAX_REPLY_CHARS + 1))]}),
    "too many tool calls": _body({"role": "assistant", "content": None,
                                  "tool_calls": [_call(f"c{i}") for i in range(MAX_TOOL_CALLS + 1)]}),
    # the body itself
    "no choices": json.dumps({"choices": [], "usage": USAGE_40}),
    "choices not a list": json.dumps({"choices": "x"}),
    "message not an object": json.dumps({"choices": [{"message": "hi"}]}),
    "body a list": "[]",
    "body not JSON": "<html>not json</html>",
    "body nested too deep": _deep(100_000),
    "body not UTF-8": "\udcff",  # sent as the single byte 0xff
}


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _answer_with(bodies: list[bytes]):
    """A model factory whose server answers each request with the next body (then a good one)."""
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        data = bodies.pop(0) if bodies else _body().encode()
        return httpx.Response(200, content=data, headers={"content-type": "application/json"})

    def factory(model_id: str, settings: Any) -> Any:
        return make_model(model_id, settings, transport=httpx.MockTransport(handler))

    factory.requests = requests  # type: ignore[attr-defined]
    return factory


def _log(db: str, thread_id: str) -> list[dict[str, Any]]:
    with open_store(db, create=False, read_only=True) as store:
        return step_log(store, thread_id)


def test_reply_with_tokens_past_64_bits_is_a_counted_bad_response_and_the_thread_resumes(
        backend) -> None:
    factory = _answer_with([_bytes(UNSTORABLE["total_tokens past 64 bits"])])
    argv = ["--thread", "t1", "--live", "--once", "--db", backend.db]
    out = run_cli([*argv, "--task", TASK], model_factory=factory)
    assert (out["exit_code"], out["error_code"], out["status"]) == (6, "bad_response", "ready")
    assert "total_tokens" in out["error"]
    assert backend.ledger_row("t1") == (1, 1, 4)
    (row,) = _log(backend.db, "t1")
    assert (row["outcome"], row["error_code"]) == ("error", "bad_response")
    again = run_cli(argv, model_factory=factory)  # the next run counts and sends a new attempt
    assert (again["exit_code"], again["status"], again["attempts"]) == (0, "done", 2)
    assert len(factory.requests) == 2


def test_every_unstorable_reply_value_is_a_counted_bad_response_and_resumable(backend) -> None:
    for index, (case, text) in enumerate(UNSTORABLE.items()):
        thread = f"t{index}"
        factory = _answer_with([_bytes(text)])
        argv = ["--thread", thread, "--live", "--once", "--db", backend.db]
        out = run_cli([*argv, "--task", TASK], model_factory=factory)
        assert (out["exit_code"], out["error_code"], out["status"]) == (6, "bad_response", "ready"), case
        assert backend.ledger_row(thread) == (1, 1, 4), case
        assert [r["error_code"] for r in _log(backend.db, thread)] == ["bad_response"], case
        again = run_cli(argv, model_factory=factory)
        assert (again["exit_code"], again["status"], again["attempts"]) == (0, "done", 2), case
        assert len(factory.requests) == 2, case


def test_unstorable_reply_on_the_last_attempt_exhausts_the_thread(backend) -> None:
    factory = _answer_with([_bytes(UNSTORABLE["content with a lone surrogate"])])
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--once", "--max-attempts", "1",
                   "--db", backend.db], model_factory=factory)
    assert (out["exit_code"], out["error_code"], out["status"]) == (3, "bad_response", "exhausted")
    assert backend.ledger_row("t1") == (1, 1, 1)


def test_huge_body_is_refused_without_reading_it_whole(backend) -> None:
    sent = []

    def fifty_megabytes() -> Iterator[bytes]:
        chunk = b'{"choices": [{"message": {"role": "assistant", "content": "' + b"x" * 65_536
        for _ in range(800):
            sent.append(len(chunk))
            yield chunk

    def factory(model_id: str, settings: Any) -> Any:
        return make_model(model_id, settings, transport=httpx.MockTransport(
            lambda request: httpx.Response(200, content=fifty_megabytes())))

    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--once", "--db", backend.db],
                  model_factory=factory)
    assert (out["exit_code"], out["error_code"]) == (6, "bad_response")
    assert str(MAX_REPLY_BYTES) in out["error"]
    assert sum(sent) <= MAX_REPLY_BYTES + 65_600, "the body was read past the cap"
    assert backend.ledger_row("t1") == (1, 1, 4)


def test_declared_length_over_the_cap_is_refused_before_reading() -> None:
    text = _body({"role": "assistant", "content": "x" * (MAX_REPLY_BYTES + 10)})
    with pytest.raises(ModelRequestError) as info:
        _complete(httpx.Response(200, content=text.encode()))
    assert info.value.error_code == "bad_response" and "bytes" in info.value.message


def _complete(response: httpx.Response) -> Any:
    from nodes.mandapi import MandApiModel

    client = httpx.Client(transport=httpx.MockTransport(lambda request: response))
    return MandApiModel(client, api_key="k", model_id="m", base_url="http://x.test/v1").complete(
        [{"role": "system", "content": "s"}], [])


@pytest.mark.parametrize("case", sorted(UNSTORABLE))
def test_parse_reply_refuses_each_unstorable_value(case: str) -> None:
    try:
        payload = decode_body(_bytes(UNSTORABLE[case]))
    except (ValueError, RecursionError):
        return  # refused before parse_reply (the client tests cover it)
    except ModelRequestError as exc:  # a key given twice: refused while decoding
        assert exc.error_code == "bad_response"
        return
    with pytest.raises(ModelRequestError) as info:
        parse_reply(payload)
    assert info.value.error_code == "bad_response"


def test_largest_accepted_reply_is_kept_whole() -> None:
    content = "y" * (MAX_REPLY_CHARS - 100)
    reply = parse_reply(json.loads(_body({"role": "assistant", "content": content},
                                         usage={"total_tokens": MAX_TOKENS_PER_REPLY})))
    assert reply.message["content"] == content
    assert reply.usage == {"prompt_tokens": 0, "completion_tokens": 0,
                           "total_tokens": MAX_TOKENS_PER_REPLY}


def test_missing_total_is_the_sum_of_prompt_and_completion() -> None:
    reply = parse_reply(json.loads(_body(usage={"prompt_tokens": 30, "completion_tokens": 10})))
    assert reply.usage["total_tokens"] == 40


@pytest.mark.parametrize("total", [0, 39])
def test_a_total_smaller_than_its_parts_counts_as_the_parts(total: int) -> None:
    reply = parse_reply(json.loads(_body(usage={"prompt_tokens": 30, "completion_tokens": 10,
                                                "total_tokens": total})))
    assert reply.usage["total_tokens"] == 40


# Replies that are paid for and refused for their content, each reporting 40 tokens.
REFUSED_WITH_USAGE = {
    "empty reply": _body({"role": "assistant", "content": "  "}),
    "id repeated within one reply": _body({"role": "assistant", "content": None,
                                           "tool_calls": [_call("call_0"), _call("call_0")]}),
    "malformed tool call": _body({"role": "assistant", "content": None, "tool_calls": [{"id": 3}]}),
    "content over the cap": _body({"role": "assistant", "content": "x" * (MAX_REPLY_CHARS + 1)}),
    "no choices": json.dumps({"choices": [], "usage": USAGE_40}),
    "a key given twice in the message": _raw(_body(), '"content": "ok [ship-01]"',
                                             '"content": "ok", "content": "ok [ship-01]"'),
    "a usage count given twice (the larger counts)": _raw(_body(), '"total_tokens": 40',
                                                          '"total_tokens": 40, "total_tokens": 12'),
    # an outside attack's cases: paid, valid JSON, and counted as 0 tokens
    "nested too deeply to read": _raw(_body(), '"usage"', f'"deep": {_deep(100_000)}, "usage"'),
    "over 2 MiB, its usage first": json.dumps({"usage": USAGE_40, "choices": [{"index": 0, "message": {
        "role": "assistant", "content": "x" * (2 * 1024 * 1024)}}]}),
}


@pytest.mark.parametrize("case", sorted(REFUSED_WITH_USAGE))
def test_tokens_of_refused_replies_count_toward_the_cap(backend, case: str) -> None:
    factory = _answer_with([REFUSED_WITH_USAGE[case].encode()] * 8)
    argv = ["--thread", "t1", "--live", "--once", "--db", backend.db]
    outs = [run_cli([*argv, "--task", TASK, "--max-tokens", "90", "--max-attempts", "8"],
                    model_factory=factory)]
    while outs[-1]["exit_code"] == 6 and len(outs) < 8:
        outs.append(run_cli(argv, model_factory=factory))
    last = outs[-1]
    assert len(factory.requests) == 3, "the cap must stop the thread after 120 of 90 tokens"
    assert (last["exit_code"], last["status"], last["stop_reason"]) == (3, "exhausted", "token_cap")
    assert last["usage"] == {"prompt_tokens": 90, "completion_tokens": 30, "total_tokens": 120}
    assert [(s["outcome"], s["tokens"]) for s in _log(backend.db, "t1")] == [("error", 40)] * 3


def test_a_usage_count_past_the_cap_is_refused_but_counted_at_the_cap_never_less() -> None:
    with pytest.raises(ModelRequestError) as info:
        parse_reply(json.loads(_body(usage={"prompt_tokens": 10**13, "completion_tokens": 10**13,
                                            "total_tokens": 40})))
    assert info.value.error_code == "bad_response" and "prompt_tokens" in info.value.message
    assert info.value.usage == {"prompt_tokens": MAX_TOKENS_PER_REPLY,
                                "completion_tokens": MAX_TOKENS_PER_REPLY,
                                "total_tokens": 2 * MAX_TOKENS_PER_REPLY}


@pytest.mark.parametrize(("usage", "counted"), [
    ({"prompt_tokens": -5, "completion_tokens": 10, "total_tokens": 40}, 40),
    ({"prompt_tokens": 30, "completion_tokens": 10.5, "total_tokens": "40"}, 41),
    ({"prompt_tokens": 30, "completion_tokens": True, "total_tokens": 40}, 40),
])
def test_odd_usage_is_refused_but_keeps_the_largest_honest_count(usage: dict[str, Any],
                                                                 counted: int) -> None:
    with pytest.raises(ModelRequestError) as info:
        parse_reply(json.loads(_body(usage=usage)))
    assert info.value.error_code == "bad_response"
    assert info.value.usage is not None and info.value.usage["total_tokens"] == counted


def test_a_reply_claiming_tokens_past_the_cap_stops_the_thread_at_its_token_cap(backend) -> None:
    huge = _body(usage={"prompt_tokens": 10**13, "completion_tokens": 5, "total_tokens": 40})
    factory = _answer_with([huge.encode()])
    argv = ["--thread", "t1", "--live", "--once", "--db", backend.db]
    out = run_cli([*argv, "--task", TASK, "--max-tokens", "1000"], model_factory=factory)
    assert (out["exit_code"], out["error_code"], out["status"]) == (6, "bad_response", "ready")
    assert out["usage"]["total_tokens"] == MAX_TOKENS_PER_REPLY + 5
    again = run_cli(argv, model_factory=factory)
    assert (again["exit_code"], again["status"], again["stop_reason"]) == (3, "exhausted", "token_cap")
    assert len(factory.requests) == 1


def test_a_tool_call_too_long_for_the_context_limit_is_refused_and_the_person_can_go_on(backend) -> None:
    long_call = _call(arguments=json.dumps({"query": "x" * 60_000}))
    factory = _answer_with([_body({"role": "assistant", "content": None,
                                   "tool_calls": [long_call]}).encode()])
    argv = ["--thread", "t1", "--live", "--once", "--db", backend.db]
    out = run_cli([*argv, "--task", TASK, "--context-tokens", "4000"], model_factory=factory)
    assert (out["exit_code"], out["error_code"], out["status"]) == (6, "bad_response", "ready")
    assert "context limit" in out["error"] and out["usage"]["total_tokens"] == 40
    hint = {"role": "user", "content": "Keep tool arguments short."}
    with open_database(backend.db) as db:  # a person may add a word before the next attempt
        db.graph.update_state({"configurable": {"thread_id": "t1"}}, {"messages": [hint]})
    again = run_cli(argv, model_factory=factory)
    assert (again["exit_code"], again["status"], again["answer"]) == (0, "done", "ok [ship-01]")
    sent = [json.loads(r.content)["messages"] for r in factory.requests]
    assert sent[1] == [*sent[0], hint], "nothing of the refused reply was stored"


def test_a_key_given_twice_before_a_body_that_is_not_json_is_still_named() -> None:
    text = _raw(_body(), '"content": "ok [ship-01]"', '"content": "a", "content": "b"')
    text = _raw(text, '"total_tokens": 40', '"total_tokens": ' + "9" * 5000)
    with pytest.raises(ModelRequestError) as info:
        decode_body(_bytes(text))
    assert "twice" in info.value.message and info.value.usage is None
