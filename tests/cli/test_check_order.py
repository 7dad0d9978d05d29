"""Which refusal an input with two bad values reports, pinned for every source.

The thread id is checked once per invocation, by `graph.settings.ThreadSpec`
(`check_thread_id`), in each source's order: from `graph.run`'s flags the thread id
first (and a refusal of another flag still names the valid thread); from a tasks line
or `graph.api` keywords each setting's type and range first, then the thread id.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.api._args import thread_spec
from graph.errors import UsageError
from graph.run import main
from graph.settings import InvalidThreadId, ThreadSpec

BAD_ID = "invalid thread id 'bad id': use 1-128 letters, digits, '.', '_', ':' or '-'"


@pytest.mark.parametrize(("argv", "error", "thread_id"), [
    (["--thread", "bad id", "--max-attempts", "0"], BAD_ID, None),
    (["--thread", "bad id", "--task", " "], BAD_ID, None),
    (["--thread", "ok", "--max-attempts", "0"], "--max-attempts must be a positive integer", "ok"),
    (["--thread", "ok", "--task", " "], "--task must not be blank", "ok"),
])
def test_run_reports_a_bad_thread_before_any_other_flag_and_names_a_valid_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], error: str,
        thread_id: str | None) -> None:
    db = tmp_path / "c.sqlite"
    assert main([*argv, "--json", "--db", str(db)]) == 2
    report = json.loads(capsys.readouterr().out)
    assert (report["error"], report["error_code"], report["thread_id"]) == (error, "usage", thread_id)
    assert not db.exists()


@pytest.mark.parametrize(("fields", "error"), [
    ({"thread_id": "bad id", "task": "x", "max_attempts": 0}, "max_attempts must be a positive integer"),
    ({"thread_id": "bad id", "task": "x", "max_attempts": "3"}, "max_attempts must be a positive integer"),
    ({"thread_id": "bad id", "task": " "}, BAD_ID),
])
def test_a_tasks_line_reports_a_bad_setting_before_a_bad_thread_id(fields: dict, error: str) -> None:
    with pytest.raises(UsageError) as refused:
        ThreadSpec.from_line(fields, live=False)
    assert refused.value.message == error


@pytest.mark.parametrize(("given", "error", "kind"), [
    ({"max_attempts": 0}, "max_attempts must be a positive integer", UsageError),
    ({"task": " "}, BAD_ID, InvalidThreadId),
])
def test_api_keywords_report_a_bad_setting_before_a_bad_thread_id(given: dict, error: str,
                                                                 kind: type) -> None:
    with pytest.raises(UsageError) as refused:
        thread_spec("keywords", "bad id", **given)
    assert refused.value.message == error and type(refused.value) is kind
