"""The API key read from the user's machine is never stored, printed or sent back (I9).

A workspace file (`.env`) that a `read_file` call reads, or a task typed with the key in
it, would otherwise put the key into the checkpoint, the attempt log, history, a
recording and the next request: the tools node stores each result through
`nodes.redaction.stored_text`, and a task holding the key is refused (exit 2).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import graph.run
from graph.history import main as history
from graph.replay.__main__ import main as replay
from graph.step.models import make_model
from nodes.redaction import REDACTED
from tests.fixtures.recordings.build import reply

KEY = "sk-WSMARKER-5be20d9a"


def live_factory(replies: list[dict[str, Any]], sent: list[bytes]) -> Any:
    """A model factory answering `replies` in order and keeping each request body in `sent`."""
    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=replies.pop(0))

    return lambda model_id, settings: make_model(model_id, settings,
                                                 transport=httpx.MockTransport(handler))


def run_main(monkeypatch: pytest.MonkeyPatch, factory: Any, *argv: str) -> int:
    monkeypatch.setattr(graph.run, "run", functools.partial(graph.run.run, model_factory=factory))
    return graph.run.main(list(argv))


def test_a_key_read_from_a_workspace_file_is_in_no_stored_byte_output_or_request(
        backend, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".env").write_text(f"MANDAPI_API_KEY={KEY}\n")
    sent: list[bytes] = []
    factory = live_factory([reply("reading", ("c1", "read_file", {"path": ".env"})),
                            reply("done")], sent)
    argv = ["--thread", "t1", "--db", backend.db, "--live", "--model", "m1"]
    assert run_main(monkeypatch, factory, *argv, "--task", "what is here",
                    "--workspace", str(workspace)) == 0
    assert history(["--thread", "t1", "--db", backend.db, "--json"]) == 0
    out = tmp_path / "t1.json"
    assert replay(["export", "--thread", "t1", "--db", backend.db, "-o", str(out)]) == 0
    shown = capsys.readouterr()
    assert f"MANDAPI_API_KEY={REDACTED}" in shown.out  # the tool result, as stored
    assert len(sent) == 2 and KEY.encode() not in sent[1]
    assert f"MANDAPI_API_KEY={REDACTED}" in json.loads(sent[1])["messages"][-1]["content"]
    for where, text in [("output", shown.out + shown.err), ("recording", out.read_text())]:
        assert KEY not in text, where
    assert KEY.encode() not in backend.dump()


def test_a_task_holding_the_key_is_refused_and_nothing_is_stored(
        sqlite_db, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    sent: list[bytes] = []
    factory = live_factory([reply("done")], sent)
    code = run_main(monkeypatch, factory, "--thread", "t1", "--db", str(sqlite_db), "--live",
                    "--model", "m1", "--task", f"my key is {KEY}", "--json")
    shown = capsys.readouterr()
    assert code == 2 and sent == []
    assert json.loads(shown.out.splitlines()[-1])["error_code"] == "usage"
    assert "contains the API key" in shown.out + shown.err
    assert KEY not in shown.out + shown.err
    stored = b"".join(p.read_bytes() for p in Path(sqlite_db).parent.iterdir()
                      if p.name.startswith(Path(sqlite_db).name))
    assert KEY.encode() not in stored


def test_a_demo_thread_with_a_key_configured_stores_no_key_from_its_workspace(
        sqlite_db, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "settings.txt").write_text(f"timeout: 5\nkey: {KEY}\n")
    argv = ["--thread", "d1", "--db", str(sqlite_db), "--workspace", str(workspace),
            "--task", "Which files set a timeout?", "--live", "--model", "offline-demo"]
    assert graph.run.main(argv) == 0
    assert history(["--thread", "d1", "--db", str(sqlite_db), "--json"]) == 0
    shown = capsys.readouterr()
    assert KEY not in shown.out + shown.err
    stored = b"".join(p.read_bytes() for p in Path(sqlite_db).parent.iterdir()
                      if p.name.startswith(Path(sqlite_db).name))
    assert KEY.encode() not in stored


def _stored(sqlite_db: Any) -> bytes:
    return b"".join(p.read_bytes() for p in Path(sqlite_db).parent.iterdir()
                    if p.name.startswith(Path(sqlite_db).name))


def test_an_offline_run_with_the_key_exported_stores_none_of_it_from_its_workspace(
        sqlite_db, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)  # exported, but no --live: never sent
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".env").write_text(f"MANDAPI_API_KEY={KEY}\ntimeout: 5\n")
    argv = ["--thread", "d2", "--db", str(sqlite_db), "--workspace", str(workspace),
            "--task", "Which files set a timeout?"]
    assert graph.run.main(argv) == 0
    assert history(["--thread", "d2", "--db", str(sqlite_db), "--json"]) == 0
    shown = capsys.readouterr()
    assert KEY not in shown.out + shown.err
    assert KEY.encode() not in _stored(sqlite_db)


@pytest.mark.parametrize("where", ["task", "thread", "workspace"])
def test_a_task_thread_id_or_folder_holding_the_exported_key_is_refused_offline(
        sqlite_db, monkeypatch, tmp_path, capsys, where: str) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    folder = tmp_path / f"ws-{KEY}"
    folder.mkdir()
    argv = {"task": ["--thread", "t1", "--task", f"key {KEY}"],
            "thread": ["--thread", KEY, "--task", "Do you ship abroad?"],
            "workspace": ["--thread", "t1", "--task", "Do you ship abroad?",
                          "--workspace", str(folder)]}[where]
    assert graph.run.main([*argv, "--db", str(sqlite_db), "--json"]) == 2
    shown = capsys.readouterr()
    assert json.loads(shown.out.splitlines()[-1])["error_code"] == "usage"
    assert "contains the API key" in shown.out and KEY not in shown.out + shown.err
    assert not Path(sqlite_db).exists() or KEY.encode() not in _stored(sqlite_db)


def test_batch_never_prints_or_writes_a_key_a_tasks_line_or_file_name_holds(
        tmp_path, monkeypatch, capsys) -> None:
    from graph.batch import main as batch

    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"thread_id": f"a{KEY}", "task": "Do you ship abroad?"}) + "\n")
    out = tmp_path / "res.jsonl"
    assert batch([str(tasks), "--db", str(tmp_path / "b.sqlite"), "--out", str(out)]) == 2
    named = tmp_path / f"t{KEY}.jsonl"
    named.write_text(json.dumps({"task": "Do you ship abroad?"}) + "\n")
    assert batch([str(named), "--db", str(tmp_path / "c.sqlite"), "--max-requests", "3",
                  "--json"]) == 2
    shown = capsys.readouterr()
    assert KEY not in shown.out + shown.err and KEY not in out.read_text()
    assert "contains the API key" in shown.out + shown.err
    for db in ("b.sqlite", "c.sqlite"):
        if (tmp_path / db).exists():
            assert KEY.encode() not in (tmp_path / db).read_bytes()
