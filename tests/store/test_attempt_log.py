"""A step reads only the attempt log's highest attempt; every row is checked where rows are read."""

from __future__ import annotations

import pytest

from graph.errors import RefusedError
from graph.store import open_store
from graph.store.sql.attempt_log import SqlAttemptLog
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


def test_a_step_reads_the_highest_attempt_not_every_log_row(backend, monkeypatch) -> None:
    run_cli(["--thread", "t", "--task", TASK, "--once", "--db", backend.db])

    def every_row(self: SqlAttemptLog, thread_id: str) -> list:
        raise AssertionError("a step read every attempt-log row")

    monkeypatch.setattr(SqlAttemptLog, "rows", every_row)
    assert run_cli(["--thread", "t", "--once", "--db", backend.db])["status"] == "done"


def test_the_highest_attempt_is_of_reason_rows_and_its_type_is_checked(sqlite_db) -> None:
    db = str(sqlite_db)
    run_cli(["--thread", "t", "--task", TASK, "--db", db])
    with open_store(db, create=False) as store:
        assert store.log.last_attempt("t") == 2
        assert store.log.last_attempt("other") == 0
        store.sql.run("INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
                      "VALUES ('t', 'x', 'reason', '{}', 'x')")
        with pytest.raises(RefusedError, match="attempt_log"):
            store.log.last_attempt("t")


def _log_reason(db: str, payload: str) -> None:
    """Appends one `reason` row for thread `t` with `payload` as stored text (an edited log)."""
    with open_store(db, create=False) as store:
        store.sql.run("INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
                      "VALUES ('t', 1, 'reason', ?, 'x')", (payload,))


@pytest.mark.parametrize("payload", [
    '{"outcome": "answer", "usage": {"total_tokens": "abc"}}',
    '{"outcome": "answer", "usage": {"total_tokens": "12"}}',
    '{"outcome": "answer", "usage": {"total_tokens": -50}}',
    '{"outcome": "answer", "usage": {"total_tokens": [1]}}',
    'not json at all',
], ids=["text", "numeric-text", "negative", "list", "not-json"])
@pytest.mark.sql_only(
    "plants attempt_log rows with SQL; Redis: "
    "tests/store/redis/test_tables.py::test_used_tokens_refuses_a_usage_that_is_not_a_whole_number")
def test_a_logged_token_usage_that_is_not_a_number_is_refused_as_damaged(backend, payload) -> None:
    run_cli(["--thread", "t", "--task", TASK, "--once", "--max-tokens", "100000", "--db", backend.db])
    _log_reason(backend.db, payload)
    with open_store(backend.db, create=False, read_only=True) as store, \
            pytest.raises(RefusedError, match="attempt_log is damaged") as info:
        store.log.used_tokens("t")
    assert info.value.error_code == "damaged"
    out = run_cli(["--thread", "t", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out


@pytest.mark.sql_only(
    "plants attempt_log rows with SQL; Redis: "
    "tests/store/redis/test_tables.py::test_used_tokens_refuses_a_usage_that_is_not_a_whole_number")
def test_logged_numbers_and_missing_usage_still_sum(backend) -> None:
    run_cli(["--thread", "t", "--task", TASK, "--once", "--db", backend.db])
    with open_store(backend.db, create=False, read_only=True) as store:
        before = store.log.used_tokens("t")
    _log_reason(backend.db, '{"outcome": "answer", "usage": {"total_tokens": 7}}')
    _log_reason(backend.db, '{"outcome": "answer", "usage": null}')
    _log_reason(backend.db, '{"outcome": "answer", "usage": {"total_tokens": null}}')
    with open_store(backend.db, create=False, read_only=True) as store:
        assert store.log.used_tokens("t") == before + 7
