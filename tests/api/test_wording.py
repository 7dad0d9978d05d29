"""`graph.api` names a refused setting as the Python caller spelled it; the commands keep their flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from graph.api import open_database
from graph.errors import ErrorCode, RefusedError, UsageError
from graph.prune import main as prune_main
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "w.sqlite")


@pytest.mark.parametrize(("settings", "keyword", "flag"), [
    ({"max_attempts": 0}, "max_attempts must be a positive integer",
     "--max-attempts must be a positive integer"),
    ({"max_tokens": 10**13}, "max_tokens must be at most 1000000000000",
     "--max-tokens must be at most 1000000000000"),
    ({"context_tokens": 0}, "context_tokens must be a positive integer",
     "--context-tokens must be a positive integer"),
    ({"keep_checkpoints": 0}, "keep_checkpoints must be a positive integer",
     "--keep-checkpoints must be a positive integer"),
    ({"model": "offline_demo"}, "model 'offline_demo' is not a model",
     "--model 'offline_demo' is not a model"),
])
def test_an_invalid_run_setting_is_named_by_its_keyword_and_by_its_flag_on_the_command_line(
        db_path: str, settings: dict[str, Any], keyword: str, flag: str) -> None:
    with open_database(db_path, create=True) as db, pytest.raises(UsageError) as refused:
        db.run("t1", task=TASK, **settings)
    argv = ["--thread", "t1", "--task", TASK, "--db", db_path]
    for key, value in settings.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    assert refused.value.message.startswith(keyword)
    assert run_cli(argv)["error"].startswith(flag)


def test_a_wrongly_typed_setting_is_named_by_its_keyword(db_path: str) -> None:
    with open_database(db_path, create=True) as db, pytest.raises(UsageError) as refused:
        db.run("t1", task=TASK, max_attempts="4")  # type: ignore[arg-type]
    assert refused.value.message == "max_attempts must be a positive integer, not '4'"


def test_a_resume_with_another_fixed_setting_names_the_keyword_and_the_flag(db_path: str) -> None:
    with open_database(db_path, create=True) as db:
        db.run("t1", task=TASK)
        with pytest.raises(RefusedError) as refused:
            db.run("t1", max_attempts=7)
        with pytest.raises(RefusedError) as other_task:
            db.run("t1", task="another task")
    cli = run_cli(["--thread", "t1", "--db", db_path, "--max-attempts", "7"])
    assert refused.value.error_code == ErrorCode.IDENTITY_MISMATCH
    assert "created with max_attempts 4;" in refused.value.message
    assert "omit task to resume it" in other_task.value.message
    assert "created with --max-attempts 4;" in cli["error"]


def test_a_paid_model_without_live_says_how_to_allow_it_from_python(db_path: str) -> None:
    with open_database(db_path, create=True) as db, pytest.raises(UsageError) as refused:
        db.run("t1", task=TASK, model="mandapi-large")
    assert refused.value.message.endswith("model 'mandapi-large' makes paid requests: open the "
                                          "database with live=True to allow them")
    cli = run_cli(["--thread", "t1", "--task", TASK, "--model", "mandapi-large", "--db", db_path])
    assert cli["error"].endswith("model 'mandapi-large' makes paid requests: add --live to "
                                 "allow them")


def test_live_without_a_key_or_a_model_names_live_true(db_path: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError) as no_key:
        open_database(db_path, live=True)
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-00000000")
    with open_database(db_path, create=True, live=True) as db, \
            pytest.raises(UsageError) as no_model:
        db.run("t1", task=TASK)
    assert no_key.value.message == "live=True needs MANDAPI_API_KEY in the environment"
    assert no_model.value.message.endswith(": live=True needs a model for a new thread: model "
                                           "or MANDAPI_MODEL_ID")


def test_a_missing_write_folder_is_named_allow_writes(db_path: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    with open_database(db_path, create=True) as db, pytest.raises(UsageError) as refused:
        db.run("t1", task=TASK, allow_writes=missing)
    cli = run_cli(["--thread", "t1", "--task", TASK, "--allow-writes", missing, "--db", db_path])
    assert f": allow_writes folder {missing} does not exist" in refused.value.message
    assert refused.value.error_code == ErrorCode.NO_SUCH_WORKSPACE
    assert f": allow-writes folder {missing} does not exist" in cli["error"]


@pytest.mark.parametrize(("db", "message"), [
    ("", "db is empty: give a SQLite file, a postgresql:// or a redis:// URL, or None to use "
         "$GRAPH_DB or ./checkpoints.sqlite"),
    ("host=localhost dbname=x", "db takes a SQLite file path, a postgresql:// or a redis:// URL"),
    ("mysql://h/x", "db mysql:// is not supported"),
    ("postgresql://u@h:99999/x", "db postgresql://u@h:99999/x is not a valid PostgreSQL URL"),
])
def test_a_bad_database_is_named_db(db: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        with open_database(db):
            pass
    assert refused.value.message.startswith(message)


def test_a_folder_given_as_the_database_is_named_db_by_every_entry(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as opened:
        with open_database(str(tmp_path)):
            pass
    with pytest.raises(UsageError) as verified:
        from graph.api import verify_database

        verify_database(str(tmp_path))
    assert opened.value.message == f"db {tmp_path} is a folder, not a checkpoint database file"
    assert verified.value.message == opened.value.message


def test_history_pages_and_prune_ages_are_named_by_their_keywords(
        db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_database(db_path, create=True) as db:
        db.run("t1", task=TASK)
        with pytest.raises(UsageError) as page:
            db.history("t1", checkpoints=0)
        with pytest.raises(UsageError) as completed:
            db.prune(completed="1y")
        with pytest.raises(UsageError) as failed:
            db.prune_report(failed="x")
    assert page.value.message == "checkpoints must be a whole number from 1 to 10000, not 0"
    assert completed.value.message == "completed '1y' must look like 90s, 30m, 24h or 7d"
    assert failed.value.message == "failed 'x' must look like 90s, 30m, 24h or 7d"
    assert prune_main(["--db", db_path, "--completed", "1y"]) == 2
    assert "error (usage): age '1y' must look like" in capsys.readouterr().err


def test_a_batch_cap_is_named_by_its_keywords(db_path: str) -> None:
    with open_database(db_path, create=True) as db:
        with pytest.raises(UsageError) as maximum:
            db.batch([], cap_id="cap", max_requests=0)
        with pytest.raises(UsageError) as name:
            db.batch([], cap_id="a\x01b")
    assert maximum.value.message == "max_requests must be a positive integer up to 1000000000"
    assert name.value.message == "cap_id 'a\\x01b' must be 1-200 printable characters"
