"""`python -m graph.replay export`: what a recording holds, what it never holds, what is refused."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import httpx
import pytest

from graph.replay.__main__ import main
from graph.replay.session import replay
from tests.conftest import PYTHON, ROOT, run_cli, subprocess_env
from tests.fixtures.recordings.build import reply, scripted
from tests.forked import ForkedProcess, forkserver

KEY = "sk-marker-export-33d1"
TASK = "How long does international shipping take?"


@pytest.fixture
def live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.fixtures.recordings.build as build

    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    monkeypatch.setattr(build, "MARKER_KEY", KEY)  # the scripted transport checks the header


def live(db: str, thread: str, factory, *flags: str) -> dict:  # type: ignore[no-untyped-def]
    return run_cli(["--thread", thread, "--db", db, "--live", "--once", *flags], model_factory=factory)


def export(db: str, thread: str, out, *flags: str) -> int:  # type: ignore[no-untyped-def]
    return main(["export", "--thread", thread, "--db", db, "-o", str(out), *flags])


def test_export_keeps_requests_replies_and_usage_and_never_the_key(
        backend, live_env, tmp_path, capsys) -> None:
    factory = scripted([reply(None, ("c1", "get_reference", {"ref_id": "ship-02"}), prompt=100, completion=9),
                        reply("7 to 14 business days [ship-02].", prompt=200, completion=11)])
    live(backend.db, "t1", factory, "--task", TASK, "--model", "mandapi-large")
    live(backend.db, "t1", factory)
    out = tmp_path / "t1.json"
    assert export(backend.db, "t1", out, "--json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "exchanges": 2, "output": str(out), "status": "done", "thread_id": "t1"}
    text = out.read_text()
    assert KEY not in text and "authorization" not in text.lower()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    data = json.loads(text)
    first, second = data["interactions"]
    assert first["request"]["uri"] == "https://api.mandapi.com/v1/chat/completions"
    assert first["request"]["headers"] == {"Content-Type": ["application/json"]}
    assert [m["role"] for m in second["request"]["body"]["json"]["messages"]] == [
        "system", "user", "assistant", "tool"]
    assert second["response"]["body"]["json"]["usage"] == {
        "prompt_tokens": 200, "completion_tokens": 11, "total_tokens": 211}
    meta = data["metadata"]["mandapi_replay"]
    assert meta["thread"]["model"] == "mandapi-large" and meta["outcome"]["status"] == "done"
    assert replay(out, db=str(tmp_path / "again.sqlite")).answer == "7 to 14 business days [ship-02]."


def test_a_thread_exported_while_waiting_for_approval_replays_to_the_same_pause(
        live_env, sqlite_db, tmp_path) -> None:
    writes = tmp_path / "w"
    writes.mkdir()
    factory = scripted([reply(None, ("c1", "write_file", {"path": "a.txt", "text": "x"}))])
    out = live(str(sqlite_db), "w1", factory, "--task", TASK, "--model", "mandapi-large",
               "--allow-writes", str(writes))
    assert out["status"] == "awaiting_approval"
    assert export(str(sqlite_db), "w1", tmp_path / "w1.json") == 0
    other = tmp_path / "w2"
    other.mkdir()
    result = replay(tmp_path / "w1.json", db=str(tmp_path / "r.sqlite"), allow_writes=other)
    assert result.status == "awaiting_approval" and not list(other.iterdir())


def test_an_attempt_killed_mid_request_is_exported_as_a_connection_error(
        live_env, sqlite_db, tmp_path) -> None:
    def killed(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("the process died here")

    def via(handler):  # type: ignore[no-untyped-def]
        from graph.step.models import make_model

        return lambda m, s: make_model(m, s, transport=httpx.MockTransport(handler))

    with pytest.raises(RuntimeError):
        live(str(sqlite_db), "k1", via(killed), "--task", TASK, "--model", "mandapi-large")
    factory = scripted([reply("Answer [ship-02].")])
    while live(str(sqlite_db), "k1", factory)["status"] == "ready":
        pass
    assert export(str(sqlite_db), "k1", tmp_path / "k1.json") == 0
    meta = json.loads((tmp_path / "k1.json").read_text())["metadata"]["mandapi_replay"]
    assert meta["exchanges"] == [{"attempt": 1, "outcome": "no record", "raise": "connection"},
                                 {"attempt": 2, "outcome": "answer"}]
    result = replay(tmp_path / "k1.json", db=str(tmp_path / "r.sqlite"))
    assert [o["error_code"] for o in result.outcomes] == ["connection", None]


def test_a_conversation_the_log_does_not_reproduce_is_not_replayable(backend, tmp_path, capsys) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", backend.db])

    def rewrite(values) -> None:  # type: ignore[no-untyped-def]
        values["messages"][-1] = {**values["messages"][-1], "content": "an edited tool result"}

    backend.edit_values("d1", rewrite)
    assert export(backend.db, "d1", tmp_path / "d1.json", "--json") == 4
    out = json.loads(capsys.readouterr().out)
    assert out["error_code"] == "not_replayable" and "differ from message 3" in out["error"]
    assert not (tmp_path / "d1.json").exists()


@pytest.mark.parametrize(("target", "thread", "code", "exit_code"), [
    ("db", "nobody", "no_such_thread", 4),
    ("missing.sqlite", "d1", "no_such_file", 4),
    ("db", "bad id!", "usage", 2),
])
def test_export_refusals_have_their_codes(
        sqlite_db, tmp_path, capsys, target, thread, code, exit_code) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", str(sqlite_db)])
    db = str(sqlite_db) if target == "db" else str(tmp_path / target)
    assert export(db, thread, tmp_path / "x.json", "--json") == exit_code
    assert json.loads(capsys.readouterr().out)["error_code"] == code


def test_export_into_a_missing_folder_is_a_usage_error(sqlite_db, tmp_path, capsys) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", str(sqlite_db)])
    assert export(str(sqlite_db), "d1", tmp_path / "no" / "x.json") == 2
    assert "error (usage): -o " in (err := capsys.readouterr().err) and "does not exist" in err


def test_export_runs_as_a_command(sqlite_db, tmp_path) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", str(sqlite_db)])
    done = subprocess.run([PYTHON, "-m", "graph.replay", "export", "--thread", "d1", "--db", str(sqlite_db),
                           "-o", str(tmp_path / "d1.json")], cwd=ROOT, env=subprocess_env(
                               MANDAPI_API_KEY=KEY), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("thread d1: 2 exchange(s) written to")
    assert KEY not in (tmp_path / "d1.json").read_text() and os.path.getsize(tmp_path / "d1.json") > 0


def test_a_cancelled_thread_replays_to_its_cancellation(sqlite_db, tmp_path) -> None:
    run_cli(["--thread", "c1", "--task", TASK, "--db", str(sqlite_db), "--once"])
    assert run_cli(["--thread", "c1", "--db", str(sqlite_db), "--cancel"])["status"] == "cancelled"
    assert export(str(sqlite_db), "c1", tmp_path / "c1.json") == 0
    result = replay(tmp_path / "c1.json", db=str(tmp_path / "r.sqlite"))
    assert [o["status"] for o in result.outcomes] == ["ready", "cancelled"]


@pytest.mark.parametrize("thread", ["-x", "--", "-"])
def test_a_thread_whose_id_starts_with_a_dash_exports_and_replays(sqlite_db, tmp_path, thread) -> None:
    """The replay driver names the thread as `--thread=ID`: `--thread -x` is two flags to
    argparse, and a joined `--` must stay the id `--` (a fresh user's report, issue 30)."""
    assert run_cli([f"--thread={thread}", "--task", TASK, "--db", str(sqlite_db), "--once"])[
        "status"] == "ready"
    assert run_cli([f"--thread={thread}", "--db", str(sqlite_db), "--once"])["status"] == "done"
    assert main(["export", f"--thread={thread}", "--db", str(sqlite_db), "-o",
                 str(tmp_path / "d.json")]) == 0
    result = replay(tmp_path / "d.json", db=str(tmp_path / "r.sqlite"))
    assert [o["status"] for o in result.outcomes] == ["ready", "done"]
    assert {o["thread_id"] for o in result.outcomes} == {thread}


def test_a_malformed_logged_usage_is_refused_not_a_crash(sqlite_db, tmp_path, capsys, monkeypatch) -> None:
    def killed(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("the process died here")

    from graph.step.models import make_model

    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    with pytest.raises(RuntimeError):
        live(str(sqlite_db), "u1", lambda m, s: make_model(m, s, transport=httpx.MockTransport(killed)),
             "--task", TASK, "--model", "mandapi-large")
    payload = {"outcome": "error", "error_code": "timeout", "message": "slow",
               "usage": {"total_tokens": "many"}}
    import sqlite3

    with sqlite3.connect(sqlite_db) as conn:
        conn.execute("INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
                     "VALUES ('u1', 1, 'reason', ?, '2026-01-01T00:00:00+00:00')", (json.dumps(payload),))
    assert export(str(sqlite_db), "u1", tmp_path / "u1.json", "--json") == 4
    out = json.loads(capsys.readouterr().out)
    assert out["error_code"] == "not_replayable" and "usage is malformed" in out["error"]


def test_export_with_a_closed_stdout_ends_quietly_with_its_exit_code(sqlite_db, tmp_path) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", str(sqlite_db)])
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    done = subprocess.run([PYTHON, "-m", "graph.replay", "export", "--thread", "d1", "--db", str(sqlite_db),
                           "-o", str(tmp_path / "d1.json")], env=subprocess_env(), stdout=write,
                          stderr=subprocess.PIPE, timeout=120)
    os.close(write)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr


def test_exported_requests_are_byte_for_byte_the_requests_sent(live_env, sqlite_db, tmp_path) -> None:
    from tests.fixtures.recordings.build import MARKER_KEY

    sent: list[bytes] = []
    script = [reply(f"Reading {ref}.", (f"c{n}", "get_reference", {"ref_id": ref}))
              for n, ref in enumerate(["ship-01", "ship-02", "pay-01", "ret-01", "ship-01"])]
    script[1:1] = [httpx.ReadTimeout("slow"), 503]
    script.append(reply("Done [ship-01]."))

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {MARKER_KEY}"
        sent.append(request.content)
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return httpx.Response(item, json={}) if isinstance(item, int) else httpx.Response(200, json=item)

    def via(m, s):  # type: ignore[no-untyped-def]
        from graph.step.models import make_model

        return make_model(m, s, transport=httpx.MockTransport(handler))

    flags = ["--task", TASK, "--model", "mandapi-large", "--max-attempts", "10", "--context-tokens", "700"]
    out = live(str(sqlite_db), "b1", via, *flags)
    while out["status"] == "ready":
        out = live(str(sqlite_db), "b1", via)
    assert out["status"] == "done" and not script
    assert export(str(sqlite_db), "b1", tmp_path / "b1.json") == 0
    from graph.replay.format import deserialize

    recorded = [i["request"]["body"].encode() for i in deserialize((tmp_path / "b1.json").read_text())[
        "interactions"]]
    assert recorded == sent  # compaction included: later requests carry compacted history
    assert b"[compacted]" in sent[-1]


def test_export_opens_the_database_through_graph_api_and_prints_as_before(
        sqlite_db, tmp_path, capsys, monkeypatch) -> None:
    from graph.api import Database

    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", str(sqlite_db)])
    opened: list[str] = []
    enter = Database.__enter__

    def recording_enter(self):  # type: ignore[no-untyped-def]
        opened.append(self.settings.db)
        return enter(self)

    monkeypatch.setattr(Database, "__enter__", recording_enter)
    capsys.readouterr()
    assert export(str(sqlite_db), "t1", tmp_path / "t1.json") == 0
    assert opened == [str(sqlite_db)]
    assert capsys.readouterr().out == (f"thread t1: 1 exchange(s) written to {tmp_path / 't1.json'} "
                                       "(status ready)\n")


def test_export_to_dash_writes_the_recording_to_stdout_and_no_file(sqlite_db, tmp_path) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", str(sqlite_db)])
    # `python -m graph.replay` forked from the preloaded forkserver: its streams are what is
    # checked (`test_export_runs_as_a_command` starts a fresh interpreter).
    proc = ForkedProcess(forkserver(), "graph.replay", ["export", "--thread", "d1", "--db",
                                                        str(sqlite_db), "-o", "-", "--json"],
                         subprocess_env(), tmp_path)
    stdout, stderr = proc.communicate(timeout=120)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "-").exists()
    assert len(json.loads(done.stdout)["interactions"]) == 2
    assert json.loads(done.stderr)["output"] == "-"
    (tmp_path / "d1.json").write_text(done.stdout)
    assert replay(tmp_path / "d1.json", db=str(tmp_path / "r.sqlite")).status == "done"


def _finishing(body: dict, finish: str | None) -> dict:
    body["choices"][0]["finish_reason"] = finish
    return body


def _finishes(path) -> list:  # type: ignore[no-untyped-def]
    return [i["response"]["body"]["json"]["choices"][0]["finish_reason"]
            for i in json.loads(path.read_text())["interactions"]
            if i["response"]["body"]["json"].get("choices")]


def test_export_keeps_each_replys_finish_reason_and_replays_a_continued_thread(
        live_env, sqlite_db, tmp_path) -> None:
    db = str(sqlite_db)
    cut = _finishing(reply(None, ("c1", "get_reference", {"ref_id": "ship-02"}),
                           ("c2", "get_reference", {})), "length")
    cut["choices"][0]["message"]["tool_calls"][1]["function"]["arguments"] = '{"ref_id": "sh'
    factory = scripted([cut, _finishing(reply("7 to 14 "), "length"),
                        _finishing(reply("business days [ship-02]."), "eos")])
    live(db, "f1", factory, "--task", TASK, "--model", "mandapi-large")
    live(db, "f1", factory)
    done = live(db, "f1", factory)
    assert (done["status"], done["answer"]) == ("done", "7 to 14 business days [ship-02].")
    assert export(db, "f1", tmp_path / "f1.json") == 0
    assert _finishes(tmp_path / "f1.json") == ["length", "length", "eos"], "the real values, not stop"
    calls = json.loads((tmp_path / "f1.json").read_text())["interactions"][0]["response"]["body"]["json"][
        "choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["c1", "c2"], "the reply as it came, the cut call too"
    result = replay(tmp_path / "f1.json", db=str(tmp_path / "r.sqlite"))
    assert (result.status, result.answer) == ("done", "7 to 14 business days [ship-02].")


def test_a_thread_the_content_filter_stopped_replays_to_the_same_stop(live_env, sqlite_db, tmp_path) -> None:
    db = str(sqlite_db)
    live(db, "f2", scripted([_finishing(reply("I cannot"), "content_filter")]), "--task", TASK,
         "--model", "mandapi-large")
    assert export(db, "f2", tmp_path / "f2.json") == 0
    assert _finishes(tmp_path / "f2.json") == ["content_filter"]
    result = replay(tmp_path / "f2.json", db=str(tmp_path / "r.sqlite"))
    assert (result.status, result.outcomes[-1]["stop_reason"]) == ("exhausted", "content_filter")


def test_a_logged_reply_without_a_finish_reason_exports_it_as_unknown(
        live_env, sqlite_db, tmp_path, monkeypatch) -> None:
    from graph.replay import export as export_module

    db = str(sqlite_db)
    live(db, "f3", scripted([reply("7 to 14 business days [ship-02].")]), "--task", TASK,
         "--model", "mandapi-large")
    rows = export_module._log_by_attempt
    monkeypatch.setattr(export_module, "_log_by_attempt", lambda found: rows(  # a row logged before
        [{**r, "payload": {k: v for k, v in r["payload"].items() if k != "finish_reason"}}
         for r in found]))
    assert export(db, "f3", tmp_path / "f3.json") == 0
    assert _finishes(tmp_path / "f3.json") == [None]
    assert replay(tmp_path / "f3.json", db=str(tmp_path / "r.sqlite")).status == "done"


@pytest.mark.parametrize(("parts", "answer"), [
    (["7 to 14", " ", "business days [ship-02]."], "7 to 14 business days [ship-02]."),
    (["7 to 14 business days [ship-02].", ""], "7 to 14 business days [ship-02]."),
    (["The key is " + KEY[:9], KEY[9:] + " [ship-02]."],
     f"The key is {KEY[:9]}[redacted: API key] [ship-02]."),
])
def test_a_reply_continued_in_parts_replays_to_the_same_joined_answer(
        live_env, sqlite_db, tmp_path, parts, answer) -> None:
    db = str(sqlite_db)
    bodies = [_finishing(reply(p), "length") for p in parts[:-1]] + [_finishing(reply(parts[-1]), "stop")]
    factory = scripted(bodies)
    live(db, "f4", factory, "--task", TASK, "--model", "mandapi-large")
    for _ in parts[1:]:
        done = live(db, "f4", factory)
    assert (done["status"], done["answer"]) == ("done", answer)
    assert export(db, "f4", tmp_path / "f4.json") == 0
    assert KEY not in (tmp_path / "f4.json").read_text()
    result = replay(tmp_path / "f4.json", db=str(tmp_path / "r.sqlite"))
    assert (result.status, result.answer) == ("done", answer)


def test_a_reopened_thread_replays_through_its_reopen_to_the_same_outcome(
        live_env, sqlite_db, tmp_path) -> None:
    """Issue 30: a thread stopped by a model error and reopened (README, `--reopen`) exported,
    but its replay stopped at the error with the later exchanges never requested."""
    from graph.step.models import make_model

    script: list[httpx.Response] = [
        httpx.Response(404, json={"error": {"message": "The model `mandapi-large` does not exist",
                                            "code": "model_not_found"}}),
        httpx.Response(200, json=reply(None, ("c1", "search_references", {"query": "international"}))),
        httpx.Response(200, json=reply("7 to 14 business days [ship-02].")),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return script.pop(0)

    def factory(model_id, settings):  # type: ignore[no-untyped-def]
        return make_model(model_id, settings, transport=httpx.MockTransport(handler))

    db = str(sqlite_db)
    stopped = live(db, "o1", factory, "--task", TASK, "--model", "mandapi-large")
    assert (stopped["status"], stopped["stop_reason"]) == ("exhausted", "model_not_found")
    assert run_cli(["--thread", "o1", "--db", db, "--reopen"])["status"] == "ready"
    for _ in range(2):
        done = live(db, "o1", factory)
    assert (done["status"], done["answer"]) == ("done", "7 to 14 business days [ship-02].")
    assert export(db, "o1", tmp_path / "o1.json") == 0
    result = replay(tmp_path / "o1.json", db=str(tmp_path / "r.sqlite"))
    assert [(o["status"], o["stop_reason"]) for o in result.outcomes] == [
        ("exhausted", "model_not_found"), ("ready", None), ("ready", None), ("done", None)]
    assert (result.status, result.answer) == ("done", done["answer"])


@pytest.mark.parametrize(("error", "stopped"), [
    (httpx.Response(404, text="Not Found"), None),  # an outside attack's case: replayed as a stop
    (httpx.Response(404, content=b"<html><body><h1>404 Not Found</h1></body></html>",
                    headers={"content-type": "text/html"}), None),
    (httpx.Response(404, json={"error": {"message": "no such thing", "code": "model_not_found"}}),
     "model_not_found"),  # a stop its code alone decided: the recording keeps the code
    (httpx.Response(400, json={"error": {"message": "Invalid API key"}}), None),
])
def test_an_http_error_replays_to_the_same_stop_or_no_stop_as_live(
        live_env, sqlite_db, tmp_path, error, stopped) -> None:
    """The recording once answered an HTTP error with our own message line, whose hint
    ("... the model id ...") beside a plain "Not Found" read as a model that does not
    exist: the replay stopped a thread the live run had left `ready`."""
    from graph.step.models import make_model

    script = [error, httpx.Response(200, json=reply("7 to 14 business days [ship-02]."))]

    def factory(model_id, settings):  # type: ignore[no-untyped-def]
        return make_model(model_id, settings, transport=httpx.MockTransport(lambda r: script.pop(0)))

    db = str(sqlite_db)
    first = live(db, "h1", factory, "--task", TASK, "--model", "mandapi-large")
    assert first["stop_reason"] == stopped, first
    if stopped is None:
        assert live(db, "h1", factory)["status"] == "done"
    assert export(db, "h1", tmp_path / "h1.json") == 0
    result = replay(tmp_path / "h1.json", db=str(tmp_path / "r.sqlite"))
    assert [o["stop_reason"] for o in result.outcomes][0] == stopped
    assert result.status == ("done" if stopped is None else "exhausted")


def test_a_thread_reopened_and_not_run_since_replays_to_ready(live_env, sqlite_db, tmp_path) -> None:
    from graph.step.models import make_model

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"message": "The model `mandapi-large` does "
                                                              "not exist", "code": "model_not_found"}})

    def factory(model_id, settings):  # type: ignore[no-untyped-def]
        return make_model(model_id, settings, transport=httpx.MockTransport(handler))

    db = str(sqlite_db)
    live(db, "o2", factory, "--task", TASK, "--model", "mandapi-large")
    assert run_cli(["--thread", "o2", "--db", db, "--reopen"])["status"] == "ready"
    assert export(db, "o2", tmp_path / "o2.json") == 0
    result = replay(tmp_path / "o2.json", db=str(tmp_path / "r.sqlite"))
    assert [o["status"] for o in result.outcomes] == ["exhausted", "ready"]


def test_a_thread_forked_as_the_readme_shows_is_refused_naming_the_fork_not_update_state(
        backend, tmp_path, capsys) -> None:
    """Issue 30: after the README's fork snippet, export blamed update_state, which the user
    never called; the refusal names the fork and its checkpoint."""
    from graph.api import open_database

    with open_database(backend.db, create=True) as db:
        db.run("py_demo", task="How long does shipping take at the demo shop?", once=False)
        config = {"configurable": {"thread_id": "py_demo"}}
        first = [s for s in db.graph.get_state_history(config) if s.next == ("budget",)][-1]
        with db.invocation("py_demo") as context:
            db.graph.invoke(None, first.config, context=context, durability="sync")
    before = backend.fingerprint()
    assert export(backend.db, "py_demo", tmp_path / "f.json", "--json") == 4
    out = json.loads(capsys.readouterr().out)
    assert out["error_code"] == "not_replayable"
    assert "forked from an older checkpoint" in out["error"]
    assert first.config["configurable"]["checkpoint_id"] in out["error"]
    assert "update_state" not in out["error"]
    assert backend.fingerprint() == before and not (tmp_path / "f.json").exists()


def test_a_conversation_changed_with_update_state_is_refused_naming_update_state(
        sqlite_db, tmp_path, capsys) -> None:
    from graph.api import open_database

    with open_database(str(sqlite_db), create=True) as db:
        db.run("u1", task=TASK, once=True)
        config = {"configurable": {"thread_id": "u1"}}
        db.graph.update_state(config, {"messages": [
            {"role": "tool", "tool_call_id": db.graph.get_state(config).values["messages"][-1][
                "tool_calls"][0]["id"], "content": "an edited tool result"}]}, as_node="tools")
    assert export(str(sqlite_db), "u1", tmp_path / "u.json", "--json") == 4
    out = json.loads(capsys.readouterr().out)
    assert out["error_code"] == "not_replayable" and "changed with update_state" in out["error"]
