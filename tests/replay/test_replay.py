"""Replaying recorded threads: the repo's own recordings, and every way a replay fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.replay.session import ReplayFailure, replay
from tests.conftest import ROOT

RECORDINGS = ROOT / "tests/fixtures/recordings"
WORKSPACE = RECORDINGS / "workspace"


def edited(tmp_path: Path, name: str, edit) -> Path:  # type: ignore[no-untyped-def]
    """A copy of recording `name` changed by `edit(data)` (the file's JSON)."""
    data = json.loads((RECORDINGS / name).read_text())
    edit(data)
    path = tmp_path / f"edited-{name}"
    path.write_text(json.dumps(data))
    return path


def test_the_demo_recording_replays_to_its_answer(mandapi_replay) -> None:
    result = mandapi_replay(RECORDINGS / "demo.json")
    assert result.status == "done" and result.answer.endswith("[ship-01]")
    assert [o["attempts"] for o in result.outcomes] == [1, 2]


def test_the_workspace_recording_replays_over_its_folder(mandapi_replay) -> None:
    result = mandapi_replay(RECORDINGS / "workspace.json", workspace=WORKSPACE)
    assert result.status == "done" and "[config/service.ini#L3-L3]" in result.answer
    tools = [m for m in result.requests[-1]["messages"] if m["role"] == "tool"]
    assert "timeout = 30" in tools[-1]["content"]


def test_a_changed_workspace_file_fails_with_the_changed_line(mandapi_replay, tmp_path) -> None:
    import shutil

    folder = tmp_path / "ws"
    shutil.copytree(WORKSPACE, folder)
    ini = folder / "config/service.ini"
    ini.write_text(ini.read_text().replace("timeout = 30", "timeout = 45"))
    with pytest.raises(ReplayFailure) as info:
        replay(RECORDINGS / "workspace.json", db=str(tmp_path / "r.sqlite"), workspace=folder)
    message = str(info.value)
    assert "request 3 of 4 (attempt 3) differs" in message
    assert "-" in message and "timeout = 30" in message and "timeout = 45" in message


def test_the_approval_recording_applies_the_approved_write_only(mandapi_replay, tmp_path) -> None:
    writes = tmp_path / "writes"
    writes.mkdir()
    result = mandapi_replay(RECORDINGS / "approval.json", allow_writes=writes)
    assert result.status == "done"
    assert [o["status"] for o in result.outcomes] == [
        "awaiting_approval", "awaiting_approval", "ready", "done"]
    assert (writes / "summary.txt").read_text() == "Shipping: 3-5 days.\n"
    assert not (writes / "log.txt").exists()
    tools = [m["content"] for m in result.requests[-1]["messages"] if m["role"] == "tool"]
    assert tools[1].startswith("REJECTED by the reviewer: no log file, please")


def test_the_compacted_recording_replays_failures_and_compaction(mandapi_replay) -> None:
    result = mandapi_replay(RECORDINGS / "compacted.json")
    assert result.status == "done" and result.final["attempts"] == 9
    assert [o["error_code"] for o in result.outcomes[2:4]] == ["timeout", "http_status"]
    assert "[compacted]" in json.dumps(result.requests[-1]["messages"])
    assert "[compacted]" not in json.dumps(result.requests[4]["messages"])


def test_a_changed_system_prompt_fails_with_a_readable_diff(monkeypatch, tmp_path) -> None:
    import nodes.request

    monkeypatch.setattr(nodes.request, "SYSTEM_PROMPT", nodes.request.SYSTEM_PROMPT + " Be brief.")
    with pytest.raises(ReplayFailure) as info:
        replay(RECORDINGS / "demo.json", db=str(tmp_path / "r.sqlite"))
    lines = str(info.value).splitlines()
    assert lines[0].startswith("request 1 of 2 (attempt 1) differs from")
    assert "--- recorded" in lines and "+++ sent" in lines
    assert any(line.startswith("+") and "Be brief." in line for line in lines)
    assert "graph.replay export" in lines[-1]


def test_exact_mode_sees_the_model_id_and_messages_mode_does_not(tmp_path) -> None:
    def rename(data) -> None:  # type: ignore[no-untyped-def]
        for item in data["interactions"]:
            item["request"]["body"]["json"]["model"] = "another-model"

    path = edited(tmp_path, "shipping.json", rename)
    with pytest.raises(ReplayFailure, match=r'(?s)-model: "another-model".*\+model: "mandapi-large"'):
        replay(path, db=str(tmp_path / "a.sqlite"))
    result = replay(path, db=str(tmp_path / "b.sqlite"), match="messages_and_tools")
    assert result.status == "done"


def test_left_over_exchanges_fail_the_replay(tmp_path) -> None:
    def extra(data) -> None:  # type: ignore[no-untyped-def]
        data["interactions"].append(data["interactions"][-1])
        data["metadata"]["mandapi_replay"]["exchanges"].append({"attempt": 4, "outcome": "answer"})

    with pytest.raises(ReplayFailure, match="1 recorded exchange.s. were never requested: the thread "
                       "stopped done after request 3 of 4"):
        replay(edited(tmp_path, "shipping.json", extra), db=str(tmp_path / "r.sqlite"))


def test_a_recording_that_runs_out_fails_the_replay(tmp_path) -> None:
    def shorten(data) -> None:  # type: ignore[no-untyped-def]
        data["interactions"].pop()
        data["metadata"]["mandapi_replay"]["exchanges"].pop()

    with pytest.raises(ReplayFailure, match="the recording ran out: the graph sent request 3, but"):
        replay(edited(tmp_path, "shipping.json", shorten), db=str(tmp_path / "r.sqlite"))


def test_the_ledger_must_count_one_attempt_per_reply(tmp_path) -> None:
    from graph.replay.format import load_recording
    from graph.replay.session import _check_end as check_end

    result = replay(RECORDINGS / "shipping.json", db=str(tmp_path / "r.sqlite"))
    check_end(load_recording(RECORDINGS / "shipping.json"), result.db, result.outcomes, played=3)

    def shorten(data) -> None:  # type: ignore[no-untyped-def]
        data["interactions"].pop()
        data["metadata"]["mandapi_replay"]["exchanges"].pop()

    two_replies = load_recording(edited(tmp_path, "shipping.json", shorten))
    with pytest.raises(ReplayFailure, match=r"the ledger counts 3 attempt\(s\), 3 sent, for 2 recorded"):
        check_end(two_replies, result.db, result.outcomes, played=2)


def test_a_different_ending_fails_the_replay(tmp_path) -> None:
    def other_answer(data) -> None:  # type: ignore[no-untyped-def]
        data["metadata"]["mandapi_replay"]["outcome"]["answer"] = "something else"

    with pytest.raises(ReplayFailure, match="the replayed thread ended") as info:
        replay(edited(tmp_path, "shipping.json", other_answer), db=str(tmp_path / "r.sqlite"))
    lines = str(info.value).splitlines()
    assert "--- recorded" in lines and "+++ replayed" in lines
    assert "-    something else" in lines, "the edited answer is one diff line, not a dict"
    assert any(line.startswith("+    ") for line in lines)
    assert not any(line.startswith(("-status", "+status", "-usage", "+usage")) for line in lines)
    assert "{'status'" not in str(info.value)


def test_a_request_difference_the_rendering_hides_is_a_canonical_json_diff() -> None:
    from graph.replay.diff import MAX_DIFF_LINES, difference

    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    recorded = {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
    sent = {"messages": [{"role": "assistant", "content": None,
                          "tool_calls": [{**call, "index": 0}]}]}
    diff = difference(recorded, sent)
    assert diff is not None
    assert any(line.startswith("+") and '"index": 0' in line for line in diff.splitlines())
    assert len(max(diff.splitlines(), key=len)) < 120, "no whole dict on one line"
    many = {"messages": [{"role": "user", "content": f"line {i}"} for i in range(400)]}
    long_diff = difference({"messages": []}, many)
    assert long_diff is not None and len(long_diff.splitlines()) == MAX_DIFF_LINES + 1
    assert long_diff.splitlines()[-1].endswith("more diff lines)")


@pytest.mark.parametrize(("content", "why"), [
    ("not json", "not a JSON cassette"),
    ('{"version": 1, "interactions": []}', "metadata: Field required"),
    ('{"interactions": [], "metadata": {"mandapi_replay": {"format": 99}}}', "format 99"),
])
def test_a_file_that_is_not_a_recording_is_refused_with_why(tmp_path, content, why) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ReplayFailure, match=why):
        replay(path, db=str(tmp_path / "r.sqlite"))


def test_replay_sends_no_real_key_and_leaves_recording_and_environment_as_they_were(
        monkeypatch, tmp_path) -> None:
    import os

    monkeypatch.setenv("MANDAPI_API_KEY", "sk-marker-real-key-91")
    before = (RECORDINGS / "shipping.json").read_bytes()
    sent_keys = []
    import graph.replay.session as session

    original = session._ReplayTransport.handle_request

    def spy(self, request):  # type: ignore[no-untyped-def]
        sent_keys.append(request.headers["authorization"])
        return original(self, request)

    monkeypatch.setattr(session._ReplayTransport, "handle_request", spy)
    replay(RECORDINGS / "shipping.json", db=str(tmp_path / "r.sqlite"))
    assert sent_keys == [f"Bearer {session.DUMMY_KEY}"] * 3
    assert (RECORDINGS / "shipping.json").read_bytes() == before
    assert os.environ["MANDAPI_API_KEY"] == "sk-marker-real-key-91"


def test_replaying_into_a_database_that_holds_the_thread_is_refused_before_anything_runs(
        backend) -> None:  # type: ignore[no-untyped-def]
    from graph.errors import ErrorCode, ExitCode, RefusedError

    replay(RECORDINGS / "shipping.json", db=backend.db)  # a new database (PG: no tables yet)
    before, row = backend.fingerprint(), backend.ledger_row("shipping")
    with pytest.raises(RefusedError) as refused:
        replay(RECORDINGS / "shipping.json", db=backend.db)
    assert refused.value.error_code == ErrorCode.EXISTS and refused.value.exit_code == ExitCode.REFUSED
    assert refused.value.message.startswith("thread 'shipping' already exists in ")
    assert "replay into another database" in refused.value.message
    assert backend.fingerprint() == before and backend.ledger_row("shipping") == row


def test_the_fixture_fails_a_replay_into_a_database_holding_the_thread(mandapi_replay, tmp_path) -> None:
    db = str(tmp_path / "mine.sqlite")
    mandapi_replay(RECORDINGS / "shipping.json", db=db)
    with pytest.raises(pytest.fail.Exception, match=r"^mandapi_replay: thread 'shipping' already exists"):
        mandapi_replay(RECORDINGS / "shipping.json", db=db)


def test_the_fixture_and_replay_take_db_as_a_path_or_a_str(mandapi_replay, tmp_path) -> None:
    """`db=tmp_path / "c.sqlite"` (a `pathlib.Path`) raised a TypeError traceback."""
    from graph.replay.session import replay

    demo = RECORDINGS / "demo.json"
    assert mandapi_replay(demo, db=tmp_path / "fixture.sqlite").status == "done"
    assert replay(demo, db=tmp_path / "direct.sqlite").status == "done"
    assert replay(demo, db=str(tmp_path / "as-str.sqlite")).status == "done"
