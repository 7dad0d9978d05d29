"""`python -m graph.verify` finds damage that a step's bounded check does not read."""

from __future__ import annotations

from graph.verify import main, verify
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


def test_intact_database_verifies_clean(backend, capsys) -> None:
    for thread in ("a", "b"):
        run_cli(["--thread", thread, "--task", TASK, "--db", backend.db])
    assert verify(backend.db) == []
    assert main(["--db", backend.db]) == 0
    assert "ok" in capsys.readouterr().out


def test_verify_lists_every_damaged_thread_and_changes_nothing(backend) -> None:
    for thread in ("a", "b", "c"):
        run_cli(["--thread", thread, "--task", TASK, "--db", backend.db])
    backend.edit_values("b", lambda v: v["progress"].update(status="running"))
    backend.delete_ledger("c")
    before = backend.fingerprint()
    problems = verify(backend.db)
    assert len(problems) == 2
    assert "'b'" in problems[0] and "status" in problems[0]
    assert "'c'" in problems[1]
    assert main(["--db", backend.db]) == 4
    assert backend.fingerprint() == before


def test_verify_finds_a_damaged_page_that_steps_never_read(sqlite_db) -> None:
    import sqlite3

    run_cli(["--thread", "a", "--task", TASK, "--db", str(sqlite_db)])
    with sqlite3.connect(sqlite_db) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'request_caps'"
                            ).fetchone()[0]
    conn.close()
    data = bytearray(sqlite_db.read_bytes())
    data[(root - 1) * 4096:root * 4096] = bytes(range(256)) * 16
    sqlite_db.write_bytes(bytes(data))
    assert run_cli(["--thread", "a", "--db", str(sqlite_db)])["status"] == "done"
    problems = verify(str(sqlite_db))
    assert problems and "integrity_check" in problems[0]


def test_verify_counts_live_threads_and_pruned_tombstones_apart(backend, capsys) -> None:
    import json

    from graph.prune import main as prune_main

    for thread in ("old1", "old2"):
        run_cli(["--thread", thread, "--task", TASK, "--db", backend.db])
    assert prune_main(["--db", backend.db, "--completed", "0s"]) == 0
    run_cli(["--thread", "live1", "--task", TASK, "--once", "--db", backend.db])
    capsys.readouterr()
    assert main(["--db", backend.db, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["threads"], data["pruned_threads"]) == (1, 2)
    assert main(["--db", backend.db]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: checked 1 thread(s) and ")
    assert "; 2 pruned thread(s) remembered by their tombstones; every thread reads back intact" in out
