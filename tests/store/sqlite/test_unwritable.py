"""SQLite that cannot take a write (locked past the busy timeout, disk full) is coded, not exit 1."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import graph.store.sqlite.open as sqlite_store
from tests.conftest import SqliteBackend, run_cli

TASK = "How long does shipping take at the demo shop?"


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    pragmas = tuple(p if "busy_timeout" not in p else "PRAGMA busy_timeout = 200"
                    for p in sqlite_store._PRAGMAS)
    monkeypatch.setattr(sqlite_store, "_PRAGMAS", pragmas)


@pytest.mark.parametrize("resume", [False, True])
def test_a_write_lock_held_past_the_busy_timeout_is_db_write_failed_and_counts_nothing_more(
    sqlite_db: Path, short_busy_timeout: None, resume: bool
) -> None:
    backend = SqliteBackend(sqlite_db)
    first = run_cli(["--thread", "t", "--task", TASK, "--once", "--db", str(sqlite_db)])
    assert first["exit_code"] == 0
    before = backend.ledger_row("t")
    holder = sqlite3.connect(sqlite_db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's writer, never finishing
        argv = ["--thread", "t" if resume else "u", "--once", "--db", str(sqlite_db)]
        out = run_cli(argv if resume else [*argv, "--task", TASK])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (out["exit_code"], out["error_code"]) == (6, "db_write_failed"), out
    assert "busy timeout" in out["error"] and "Traceback" not in out["error"]
    assert backend.ledger_row("t") == before
    again = run_cli(["--thread", "t", "--once", "--db", str(sqlite_db)])
    assert again["exit_code"] == 0 and again["status"] == "done", again


def test_known_sqlite_write_failures_map_to_db_write_failed() -> None:
    from graph.store.failures import known_error

    for text in ("database or disk is full", "disk I/O error", "database is locked"):
        error = known_error(sqlite3.OperationalError(text))
        assert error is not None and (error.error_code, int(error.exit_code)) == (
            "db_write_failed", 6), text
    assert known_error(sqlite3.OperationalError("no such column: x")) is None
