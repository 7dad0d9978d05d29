"""A batch's request cap cannot be lowered, retyped or overrun through its table (I2 for caps)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from graph.batch import main as batch_main
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


def _batch(tmp_path: Path, db: str) -> int:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"thread_id": f"b{i}", "task": TASK}) + "\n"
                             for i in range(3)))
    return batch_main([str(tasks), "--db", db, "--once", "--max-requests", "4",
                       "--batch-id", "cap1", "--json"])


def _cap_rows(db: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT * FROM request_caps").fetchall()


@pytest.mark.parametrize("sql", ["UPDATE request_caps SET requests = 0",
                                 "UPDATE request_caps SET max_requests = 99",
                                 "UPDATE request_caps SET cap_id = 'other'"])
def test_the_cap_row_cannot_be_lowered_changed_or_renamed(sqlite_db: Path, tmp_path: Path,
                                                          sql: str) -> None:
    run_cli(["--thread", "seed", "--task", TASK, "--once", "--db", str(sqlite_db)])
    _batch(tmp_path, str(sqlite_db))
    before = _cap_rows(str(sqlite_db))
    assert before == [("cap1", 3, 4)]
    with sqlite3.connect(sqlite_db) as conn, pytest.raises(sqlite3.IntegrityError,
                                                           match="never decreases"):
        conn.execute(sql)
    assert _cap_rows(str(sqlite_db)) == before


@pytest.mark.parametrize("sql", [
    "UPDATE request_caps SET cap_id = CAST(cap_id AS BLOB)",
    "INSERT INTO request_caps VALUES ('odd', 1.5, 4)",
    "INSERT INTO request_caps VALUES ('text', 1, 'x')",
])
def test_a_retyped_cap_row_is_refused_before_any_request(sqlite_db: Path, tmp_path: Path,
                                                         sql: str, capsys) -> None:
    run_cli(["--thread", "seed", "--task", TASK, "--once", "--db", str(sqlite_db)])
    _batch(tmp_path, str(sqlite_db))
    with sqlite3.connect(sqlite_db) as conn:
        conn.execute("DROP TRIGGER request_caps_never_decreases")  # as an outside editor could
        conn.execute(sql)
        conn.execute("CREATE TRIGGER request_caps_never_decreases BEFORE UPDATE ON request_caps "
                     "BEGIN SELECT RAISE(ABORT, 'request cap never decreases'); END")
    capsys.readouterr()
    ledger = sqlite3.connect(f"file:{sqlite_db}?mode=ro", uri=True)
    before = ledger.execute("SELECT thread_id, attempts FROM attempt_ledger ORDER BY 1").fetchall()
    ledger.close()
    code = _batch(tmp_path, str(sqlite_db))
    assert code == 4, capsys.readouterr()
    ledger = sqlite3.connect(f"file:{sqlite_db}?mode=ro", uri=True)
    after = ledger.execute("SELECT thread_id, attempts FROM attempt_ledger ORDER BY 1").fetchall()
    ledger.close()
    assert after == before


@pytest.mark.parametrize("value", ["'garbage'", "1.5", "'2026-11-30T10:00:00'"])
def test_a_ledger_time_that_is_not_an_iso_utc_time_is_refused_by_run_prune_and_verify(
    sqlite_db: Path, value: str, capsys
) -> None:
    from graph.prune import main as prune_main
    from graph.verify import main as verify_main

    run_cli(["--thread", "d", "--task", TASK, "--db", str(sqlite_db)])  # runs to done
    with sqlite3.connect(sqlite_db) as conn:
        conn.execute(f"UPDATE attempt_ledger SET updated_at = {value} WHERE thread_id = 'd'")
    out = run_cli(["--thread", "d", "--db", str(sqlite_db)])
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    capsys.readouterr()
    for argv in (["--completed", "0s", "--failed", "0s"], ["--completed", "0s", "--dry-run"]):
        assert prune_main(["--db", str(sqlite_db), *argv, "--json"]) == 4
        assert json.loads(capsys.readouterr().out)["error_code"] == "damaged"
    assert verify_main(["--db", str(sqlite_db)]) == 4


@pytest.mark.parametrize("sql", ["UPDATE thread_tombstones SET final_status = 'zzz'",
                                 "UPDATE thread_tombstones SET pruned_at = 'garbage'",
                                 "UPDATE thread_tombstones SET final_status = 'ready'"])
def test_a_damaged_tombstone_is_refused_by_run_and_listed_by_verify(sqlite_db: Path, sql: str,
                                                                    capsys) -> None:
    from graph.prune import main as prune_main
    from graph.verify import main as verify_main

    run_cli(["--thread", "d", "--task", TASK, "--db", str(sqlite_db)])  # runs to done
    assert prune_main(["--db", str(sqlite_db), "--completed", "0s"]) == 0
    with sqlite3.connect(sqlite_db) as conn:
        conn.execute(sql)
    out = run_cli(["--thread", "d", "--task", TASK, "--db", str(sqlite_db)])
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    capsys.readouterr()
    assert verify_main(["--db", str(sqlite_db), "--json"]) == 4
    assert "thread_tombstones" in json.loads(capsys.readouterr().out)["problems"][0]
