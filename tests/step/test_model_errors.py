"""Model errors: the server's own message is shown (sanitized), and an error no rerun can fix
stops the thread instead of letting a scheduler spend its remaining attempts."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from graph.step.models import make_model
from nodes.errors import ModelRequestError
from nodes.mandapi import MandApiModel
from nodes.server_errors import MAX_MESSAGE_CHARS, sanitize
from tests.conftest import SqliteBackend, run_cli

KEY = "sk-marker-4f09ab77d1"
TASK = "How long does shipping take at the demo shop?"
NOT_FOUND = {"error": {"message": "The model `mandapi-larg` does not exist or you do not have "
                                  "access to it.", "type": "invalid_request_error",
                       "param": None, "code": "model_not_found"}}


@pytest.fixture
def live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-larg")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")


def answering(status: int, body: object, calls: list[httpx.Request]):
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if isinstance(body, bytes | str):
            return httpx.Response(status, content=body)
        return httpx.Response(status, json=body)

    return lambda model_id, settings: make_model(model_id, settings,
                                                 transport=httpx.MockTransport(handler))


def test_a_model_that_does_not_exist_stops_the_thread_with_the_servers_message(
        tmp_path: Path, live_env: None) -> None:
    db, calls = str(tmp_path / "db.sqlite"), []
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--db", db],
                  model_factory=answering(404, NOT_FOUND, calls))
    assert (out["status"], out["stop_reason"], out["exit_code"]) == (
        "exhausted", "model_not_found", 3)
    assert (out["error_code"], out["attempts"], out["max_attempts"]) == ("http_status", 1, 4)
    assert "HTTP 404: The model `mandapi-larg` does not exist" in out["error"]
    assert "start a new thread id" in out["error"]
    assert len(calls) == 1, "without --once the loop stopped at the error, no second request"
    again = run_cli(["--thread", "t1", "--live", "--db", db],
                    model_factory=answering(404, NOT_FOUND, calls))
    assert (again["status"], again["stop_reason"], again["exit_code"]) == (
        "exhausted", "model_not_found", 3)
    assert len(calls) == 1, "a stopped thread never sends again"
    assert SqliteBackend(Path(db)).ledger_row("t1") == (1, 1, 4), "the attempt stays counted"
    from graph.store.poll import quick_answer

    polled = quick_answer(db, "t1")  # the summary of a finished thread, without LangGraph
    assert polled is not None
    assert (polled.status, polled.stop_reason, int(polled.exit_code)) == (
        "exhausted", "model_not_found", 3)


def test_text_output_of_a_stopped_thread_says_why_and_what_to_do(
        tmp_path: Path, live_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.outcome import Outcome
    from graph.run import run

    db = str(tmp_path / "db.sqlite")
    run(["--thread", "t1", "--task", TASK, "--live", "--db", db],
        model_factory=answering(404, NOT_FOUND, []))
    later: Outcome = run(["--thread", "t1", "--live", "--db", db],
                         model_factory=answering(404, NOT_FOUND, []))
    text = later.to_text()
    assert "exhausted (attempts 1/4" in text and "stopped: model_not_found" in text
    assert "no rerun can fix this: a thread's model is fixed" in text
    # every later run says why, as the first did (an outside attack saw error and
    # error_code null after the first run, the server's reason lost to a scheduler)
    assert (later.error_code, later.exit_code) == ("http_status", 3)
    assert later.error is not None and "answered HTTP 404" in later.error


def test_the_error_line_of_an_exhausted_thread_goes_to_stderr_its_status_to_stdout(
        tmp_path: Path, live_env: None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """README: every entry point reports a failure as one line on stderr. The exit-3 text of
    an unknown model (404) printed its `error (...)` line on stdout with the status."""
    import graph.run

    real_run = graph.run.run
    monkeypatch.setattr(graph.run, "run", lambda argv: real_run(
        argv, model_factory=answering(404, NOT_FOUND, [])))
    db = str(tmp_path / "db.sqlite")
    assert graph.run.main(["--thread", "t1", "--task", TASK, "--live", "--db", db]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("thread t1: exhausted (attempts 1/4") and "stopped: model_not_found" in out
    assert "error (" not in out
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("error (")]
    assert err.startswith("error (http_status): ") and "HTTP 404" in err


@pytest.mark.parametrize(("status", "body"), [
    (400, {"error": {"message": "This model's maximum context length is 8192 tokens.",
                     "code": "context_length_exceeded"}}),
    (422, {"detail": "messages: field required"}),
])
def test_a_request_the_server_calls_invalid_stops_the_thread(
        tmp_path: Path, live_env: None, status: int, body: object) -> None:
    calls: list[httpx.Request] = []
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--db", str(tmp_path / "d.sqlite")],
                  model_factory=answering(status, body, calls))
    assert (out["status"], out["stop_reason"], out["exit_code"]) == ("exhausted", "invalid_request", 3)
    assert f"HTTP {status}: " in out["error"] and len(calls) == 1


@pytest.mark.parametrize(("status", "body", "hint"), [
    (401, {"error": {"message": "Incorrect API key provided: " + KEY[:3] + "****" + KEY[-4:],
                     "code": "invalid_api_key"}}, "check MANDAPI_API_KEY"),
    (403, {"error": "this key may not use the model"}, "check MANDAPI_API_KEY"),
    (429, {"error": {"message": "Rate limit reached", "type": "requests"}}, "wait"),
    (500, "<html><body>Internal Server Error</body></html>", "run again later"),
    (503, {"message": "overloaded", "object": "error"}, "run again later"),
    (404, {"detail": "Not Found"}, "run again"),  # a wrong base URL: fixable, not the model
    (400, {"error": {"message": "invalid api key"}}, "run again"),
])
def test_errors_a_rerun_may_fix_keep_the_thread_ready(
        tmp_path: Path, live_env: None, status: int, body: object, hint: str) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--once",
                   "--db", str(tmp_path / "d.sqlite")], model_factory=answering(status, body, []))
    assert (out["status"], out["stop_reason"], out["exit_code"]) == ("ready", None, 6)
    assert out["error"].startswith(f"http://mandapi.test/v1/chat/completions answered HTTP {status}")
    assert hint in out["error"]
    assert "<html>" not in out["error"]


def test_the_servers_message_never_carries_the_key_control_characters_or_unbounded_text(
        tmp_path: Path, live_env: None) -> None:
    echoed = f"bad key {KEY} and again Bearer {KEY[:12]}xx\x1b[31m\r\nInjected: line\u202e" + "x" * 5000
    db = tmp_path / "d.sqlite"
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--once", "--db", str(db)],
                  model_factory=answering(401, {"error": {"message": echoed}}, []))
    message = out["error"]
    assert KEY not in message and KEY[:12] not in message
    assert not any(ord(c) < 32 or c in "\x7f\u202e" for c in message)
    assert len(message) < MAX_MESSAGE_CHARS + 200
    assert KEY.encode() not in SqliteBackend(db).dump()


def test_an_error_body_is_read_only_up_to_its_cap() -> None:
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500, content=b'{"error": "' + b"y" * 10_000_000 + b'"}')

    model = MandApiModel(httpx.Client(transport=httpx.MockTransport(handler)), api_key=KEY,
                         model_id="m", base_url="http://mandapi.test/v1")
    with pytest.raises(ModelRequestError) as info:
        model.complete([{"role": "system", "content": "s"}], [])
    assert info.value.error_code == "http_status" and info.value.stop_reason is None
    assert "HTTP 500" in info.value.message and len(info.value.message) < 500


def test_sanitize_keeps_ordinary_text_and_hides_the_key() -> None:
    assert sanitize("The model `x` does not exist.", [KEY]) == "The model `x` does not exist."
    assert sanitize(f"key={KEY};", [KEY]) == "key=***;"
    assert sanitize("a\n\tb\x00c", []) == "a b c"
    assert json.dumps(sanitize("é ü 日本", [])) == json.dumps("é ü 日本")


def test_an_html_error_page_shows_its_text_sanitized_and_a_404_names_the_url_and_model(
        tmp_path: Path, live_env: None) -> None:
    page = ("<!DOCTYPE html><html><head><title>404 Not Found</title><style>h1 {color: red}</style>"
            "<script>var k = 'x';</script></head><body><h1>Not Found</h1><p>The requested URL "
            f"/v1/chat/completions was not found on this server &amp; key {KEY}\x1b[31m</p>"
            "</body></html>" + "<p>more</p>" * 2000)
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--once", "--db", str(tmp_path / "d.sqlite")],
                  model_factory=answering(404, page, []))
    message = out["error"]
    assert message.startswith("http://mandapi.test/v1/chat/completions answered HTTP 404: 404 Not Found "
                              "Not Found The requested URL /v1/chat/completions was not found on this "
                              "server & key ***")
    assert "check MANDAPI_BASE_URL (the endpoint, /v1 included) and the model id" in message
    assert "<" not in message and "color" not in message and "var k" not in message
    assert KEY not in message and "\x1b" not in message and len(message) < MAX_MESSAGE_CHARS + 200
    assert (out["status"], out["exit_code"]) == ("ready", 6)


@pytest.mark.parametrize("gap", [" ", "\u200b", " \u200b", "\n"])
def test_a_key_split_into_short_pieces_hides_the_whole_message(gap: str) -> None:
    pieces = [KEY[i:i + 5] for i in range(0, len(KEY), 5)]
    said = sanitize("rate limited for " + gap.join(pieces), [KEY])
    assert said == "***"
    assert sanitize("rate limited: try again in 20 s", [KEY]) == "rate limited: try again in 20 s"
