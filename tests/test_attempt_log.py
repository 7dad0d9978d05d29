"""A step reads only the attempt log's highest attempt; every row is checked where rows are read."""

from __future__ import annotations

import pytest

from graph.attempt_log import SqlAttemptLog
from graph.errors import RefusedError
from graph.storage import open_store
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
