"""A reply that echoes the API key, or carries terminal controls, is harmless (INVARIANTS I9).

The key is removed where a paid reply enters (`nodes.redaction`, called by
`nodes.mandapi`), so no stored byte, printed line or exported recording holds it; and
every printed line has its control characters escaped (`graph.text`).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

import graph.run
from graph.history import main as history
from graph.replay.__main__ import main as replay
from nodes.redaction import REDACTED, redact_continued, redact_value
from tests.fixtures.recordings.build import reply, scripted

KEY = "sk-TESTMARKER-7c41e9"
TASK = "How long does international shipping take?"
CONTROLS = ("\x1b", "\x9b", "\x07", "\r", "\x9d", "\u202e")


@pytest.fixture
def live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.fixtures.recordings.build as build

    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    monkeypatch.setattr(build, "MARKER_KEY", KEY)  # the scripted transport checks the header


def escaped(text: str) -> str:
    """`text` with every character as a JSON `\\uXXXX` escape (how a server may spell it)."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


def echoing_replies() -> list[dict[str, Any]]:
    """A tool-call reply echoing the key everywhere it can, then an answer echoing it."""
    first = reply(f"your key is {KEY}", (f"call_{KEY}", "get_reference", {"ref_id": KEY}))
    first["choices"][0]["message"]["tool_calls"].append(
        {"id": "c2", "type": "function", "function": {
            "name": "get_reference", "arguments": '{"ref_id": "' + escaped(KEY) + '"}'}})
    first["choices"][0]["message"][KEY] = {KEY: [KEY]}  # an unknown key, dropped anyway
    return [first, reply(f"7 to 14 business days; your key is {KEY}.")]


def run_main(monkeypatch: pytest.MonkeyPatch, factory: Any, *argv: str) -> int:
    """`python -m graph.run ARGV` in process, its model the scripted MandAPI client."""
    monkeypatch.setattr(graph.run, "run", functools.partial(graph.run.run, model_factory=factory))
    return graph.run.main(list(argv))


def test_a_reply_echoing_the_key_leaves_it_in_no_stored_byte_output_or_recording(
        backend, live_env, monkeypatch, tmp_path, capsys) -> None:
    factory = scripted(echoing_replies())
    first = ["--thread", "t1", "--db", backend.db, "--live", "--once"]
    assert run_main(monkeypatch, factory, *first, "--task", TASK, "--model", "mandapi-large") == 0
    assert run_main(monkeypatch, factory, *first, "--json") == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out.splitlines()[-1])["answer"] == (
        f"7 to 14 business days; your key is {REDACTED}.")
    assert history(["--thread", "t1", "--db", backend.db]) == 0
    assert history(["--thread", "t1", "--db", backend.db, "--json"]) == 0
    assert history(["--list", "--db", backend.db]) == 0
    out = tmp_path / "t1.json"
    assert replay(["export", "--thread", "t1", "--db", backend.db, "-o", str(out)]) == 0
    shown = capsys.readouterr()
    assert f"call_{REDACTED}" in shown.out
    for where, text in [("run", printed.out + printed.err), ("history", shown.out + shown.err),
                        ("recording", out.read_text())]:
        assert KEY not in text, where
    assert KEY.encode() not in backend.dump()
    assert KEY[3:].encode() not in backend.dump()


def test_terminal_controls_in_a_reply_are_escaped_in_printed_text(
        sqlite_db, live_env, monkeypatch, capsys) -> None:
    content = "clear\x1b[2J csi\x9b31m bell\x07 cr\r osc\x9d0;x\x07 bidi\u202e end\ttab"
    factory = scripted([reply(content)])
    argv = ["--thread", "t1", "--db", str(sqlite_db), "--live", "--once", "--task", TASK,
            "--model", "mandapi-large"]
    assert run_main(monkeypatch, factory, *argv) == 0
    assert history(["--thread", "t1", "--db", str(sqlite_db)]) == 0
    text = capsys.readouterr()
    assert history(["--thread", "t1", "--db", str(sqlite_db), "--json"]) == 0
    as_json = capsys.readouterr().out
    for printed in (text.out, text.err, as_json):
        assert not any(c in printed for c in CONTROLS)
    assert "clear\\u001b[2J csi\\u009b31m" in text.out and "end\ttab" in text.out
    assert json.loads(as_json)["header"]["answer"] == content  # the escapes are JSON's own


def test_json_arguments_that_spell_the_key_with_escapes_keep_duplicate_keys() -> None:
    arguments = '{"a": "' + escaped(KEY) + '", "a": 2, "b": [1.5, null, "\\ud800"]}'
    clean = redact_value(arguments, [KEY])
    assert clean == '{"a":"[redacted: API key]","a":2,"b":[1.5,null,"\\ud800"]}'


def test_the_key_is_removed_from_keys_and_nested_values_and_other_text_is_kept() -> None:
    payload = {"x": [f"a{KEY}b", {KEY: 3}], "n": 1, "escaped": "\\n no json", "ok": "café"}
    assert redact_value(payload, [KEY, ""]) == {
        "x": [f"a{REDACTED}b", {REDACTED: 3}], "n": 1, "escaped": "\\n no json", "ok": "café"}


def test_a_short_key_is_still_removed_everywhere() -> None:
    assert redact_value({"c": "sk1 and sk1"}, ["sk1"]) == {"c": f"{REDACTED} and {REDACTED}"}


def test_a_deeply_nested_reply_is_scrubbed_without_running_out_of_stack() -> None:
    import httpx

    from nodes.mandapi import MandApiModel

    body = json.dumps(reply(f"hi {KEY}")).replace('"model":', '"x": ' + "[" * 600 + "]" * 600 + ', "model":')
    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, text=body)))
    done = MandApiModel(client, api_key=KEY, model_id="m").complete([], [])
    assert done.message["content"] == f"hi {REDACTED}"


def test_arguments_too_deep_to_rewrite_that_spell_the_key_are_replaced_whole() -> None:
    arguments = '{"a": ' + "[" * 5000 + '"' + escaped(KEY) + '"' + "]" * 5000 + "}"
    assert redact_value({"arguments": arguments}, [KEY]) == {"arguments": REDACTED}


def test_text_that_spells_the_key_with_escapes_but_is_not_json_is_kept() -> None:
    text = "not json: " + escaped(KEY)
    assert redact_value(text, [KEY]) == text


@pytest.mark.parametrize(("before", "after", "stored"), [
    ("key " + KEY[:5], KEY[5:] + " ok", REDACTED + " ok"),  # completed here: its start replaced
    ("key " + KEY[:5], KEY[5:9], KEY[5:9]),  # not completed yet: kept
    ("key sk-", KEY + " ok", REDACTED + " ok"),  # whole in this part: redacted as ever
    ("key", " " + KEY[:3], " " + KEY[:3]),  # only begun: nothing can know yet
])
def test_a_key_completed_across_parts_is_replaced_where_it_completes(
        before: str, after: str, stored: str) -> None:
    assert redact_continued(before, after, [KEY]) == stored
    assert KEY not in before + redact_continued(before, after, [KEY])
