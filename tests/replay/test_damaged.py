"""Damaged or edited recordings: every one replays as recorded or fails with `ReplayFailure`.

The corpus is generated from one fixture recording (ported from the issue-16 attack's
mutation script): each key deleted, each value retyped to a string, an integer, a
list, an object and null, values nested deeply, and files that are not recordings at
all. No mutation may end in another exception (a `KeyError`, `TypeError`,
`RecursionError`, ...), which the fixture would report as a crash instead of a refusal.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.replay.session import ReplayFailure, replay
from tests.conftest import ROOT

SOURCE = ROOT / "tests/fixtures/recordings/demo.json"
APPROVAL = ROOT / "tests/fixtures/recordings/approval.json"
RETYPES: tuple[Any, ...] = ("200", 7, [], {}, None)
"""What each value is replaced by: one value of each other JSON type."""
DEEP = 100_000
"""Nesting of the deep cases: far past Python's recursion limit."""
RAW = {"not json": "{", "empty": "", "an array": "[]", "a NUL": "\x00", "yaml": "version: 1\n",
       "deep array": "[" * DEEP + "]" * DEEP, "deep object": '{"a":' * DEEP + "1" + "}" * DEEP,
       "NaN in a reply": SOURCE.read_text().replace('"prompt_tokens": 368', '"prompt_tokens": NaN'),
       "a surrogate in a reply": SOURCE.read_text().replace('"I will look', '"\\ud800I will look'),
       "a surrogate in a request": SOURCE.read_text().replace('"How long', '"\\udc00How long'),
       "a byte-order mark": "\ufeff" + SOURCE.read_text()}

Path_ = tuple[int | str, ...]


def _paths(value: Any, at: Path_ = ()) -> Iterator[Path_]:
    """Every key and index of the recording, with three cuts that keep the corpus quick.

    Only the first item of a list is walked into (the others have the same shape). A
    request body's conversation is not walked into: it is text the replay compares, and
    changing it is a request difference (tests/replay/test_replay.py). A reply's body is
    walked three levels deep (`choices[0].message`, `usage.total_tokens`).
    """
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(
        value, list) else ()
    for key, item in children:
        path = (*at, key)
        yield path
        if isinstance(key, int) and key > 0:
            continue
        if "json" in at and ("request" in at or len(path) - at.index("json") > 3):
            continue
        yield from _paths(item, path)


def _parent(data: Any, path: Path_) -> Any:
    for key in path[:-1]:
        data = data[key]
    return data


def _mutations(source: dict[str, Any]) -> Iterator[tuple[str, Callable[[Any], None]]]:
    for path in _paths(source):
        name = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)

        def delete(data: Any, path: Path_ = path) -> None:
            del _parent(data, path)[path[-1]]

        yield f"del {name}", delete
        for value in RETYPES:
            def retype(data: Any, path: Path_ = path, value: Any = value) -> None:
                _parent(data, path)[path[-1]] = copy.deepcopy(value)

            yield f"{name}={value!r}", retype

        def nest(data: Any, path: Path_ = path) -> None:
            deep: Any = "x"
            for _ in range(200):
                deep = [deep]
            _parent(data, path)[path[-1]] = deep

        yield f"{name}=deep", nest


SOURCE_DATA = json.loads(SOURCE.read_text())
CASES = [*((name, text) for name, text in RAW.items()),
         *((name, mutate) for name, mutate in _mutations(SOURCE_DATA))]


def _text(case: str | Callable[[Any], None], source: dict[str, Any]) -> str:
    if isinstance(case, str):
        return case
    data = copy.deepcopy(source)
    case(data)
    return json.dumps(data)


def _crashes(tmp_path: Path, source: dict[str, Any], cases: list[tuple[str, Any]],
             answer: str | None, **options: Any) -> dict[str, str]:
    """Each case that neither replays to `answer` nor fails with `ReplayFailure`, and how."""
    crashes = {}
    for number, (name, case) in enumerate(cases):
        path = tmp_path / f"case-{number}.json"
        path.write_text(_text(case, source), encoding="utf-8")
        writes = tmp_path / f"writes-{number}"
        writes.mkdir()
        kwargs = {key: writes for key in options}  # a fresh empty folder per replay
        try:
            result = replay(path, db=str(tmp_path / f"case-{number}.sqlite"), **kwargs)
        except ReplayFailure:
            continue
        except Exception as exc:  # noqa: BLE001 - the point: nothing else may escape
            crashes[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
            continue
        if (result.status, result.answer) != ("done", answer):
            crashes[name] = f"replayed to {result.status} {result.answer!r}"
    return crashes


@pytest.fixture(scope="module")
def recorded_answer(tmp_path_factory: pytest.TempPathFactory) -> str | None:
    return replay(SOURCE, db=str(tmp_path_factory.mktemp("orig") / "r.sqlite")).answer


def test_every_damaged_recording_replays_as_recorded_or_fails_with_replay_failure(
        tmp_path: Path, recorded_answer: str | None) -> None:
    assert len(CASES) > 250, "the corpus covers every key of the recording"
    assert SOURCE.read_text() not in RAW.values(), "each raw case changes the file"
    assert _crashes(tmp_path, SOURCE_DATA, CASES, recorded_answer) == {}


def test_every_damaged_review_decision_replays_as_recorded_or_fails_with_replay_failure(
        tmp_path: Path) -> None:
    source = json.loads(APPROVAL.read_text())
    cases = [(name, case) for name, case in _mutations(source) if ".decisions" in name]
    assert len(cases) > 30
    answer = source["metadata"]["mandapi_replay"]["outcome"]["answer"]
    assert _crashes(tmp_path, source, cases, answer, allow_writes=True) == {}


CONTROLS = "\x1b[2J \x1b]8;;http://evil\x07click\x1b]8;;\x07 \x9b31m \u202e"
"""A screen clear, an OSC 8 link with BEL, a C1 CSI and a right-to-left override."""


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x07\x9b\u202e"]


def test_a_differing_request_shows_the_recordings_control_characters_escaped(tmp_path) -> None:
    data = copy.deepcopy(SOURCE_DATA)
    data["interactions"][0]["request"]["body"]["json"]["messages"][1]["content"] += CONTROLS
    path = tmp_path / "controls.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReplayFailure) as info:
        replay(path, db=str(tmp_path / "r.sqlite"))
    message = str(info.value)
    assert "request 1 of 2 (attempt 1) differs" in message
    assert _raw_controls(message) == []
    assert "\\u001b[2J" in message and "\\u009b31m" in message and "\\u202e" in message


def test_an_ending_unlike_the_recording_shows_control_characters_escaped(tmp_path) -> None:
    data = copy.deepcopy(SOURCE_DATA)
    data["metadata"]["mandapi_replay"]["outcome"]["answer"] += CONTROLS
    path = tmp_path / "controls.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReplayFailure) as info:
        replay(path, db=str(tmp_path / "r.sqlite"))
    message = str(info.value)
    assert "ended unlike the recording" in message
    assert _raw_controls(message) == [] and "\\u0007click" in message


def test_a_bad_field_is_refused_naming_its_path_and_type(tmp_path) -> None:
    data = copy.deepcopy(SOURCE_DATA)
    data["interactions"][1]["response"]["status"]["code"] = "200"
    del data["metadata"]["mandapi_replay"]["thread"]["task"]
    data["interactions"][0]["request"]["headers"] = ["Content-Type"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReplayFailure) as info:
        replay(path, db=str(tmp_path / "r.sqlite"))
    message = str(info.value)
    assert "interactions[1].response.status.code: Input should be a valid integer" in message
    assert "metadata.mandapi_replay.thread.task: Field required" in message
    assert "interactions[0].request.headers: Input should be a valid dictionary" in message
    assert not list(tmp_path.glob("r.sqlite*")), "refused before any graph ran"


@pytest.mark.parametrize("text", [RAW["deep array"], RAW["deep object"]])
def test_a_deeply_nested_file_is_refused_not_a_recursion_error(tmp_path, text) -> None:
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(ReplayFailure, match="nested deeper than 100"):
        replay(path, db=str(tmp_path / "r.sqlite"))



@pytest.mark.parametrize("path", [("version",), ("metadata", "mandapi_replay", "format"),
                                  ("metadata", "mandapi_replay", "thread", "max_attempts"),
                                  ("metadata", "mandapi_replay", "exchanges", 0, "attempt")])
def test_true_is_not_the_integer_1(tmp_path, path) -> None:
    data = copy.deepcopy(SOURCE_DATA)
    _parent(data, path)[path[-1]] = True
    bad = tmp_path / "bool.json"
    bad.write_text(json.dumps(data))
    name = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")
    with pytest.raises(ReplayFailure, match=re.escape(f"{name}: Input should be a valid integer")):
        replay(bad, db=str(tmp_path / "r.sqlite"))
