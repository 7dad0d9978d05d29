"""graph.copy moves threads between backends intact; existing target threads are refused.

Each test copies from a SQLite file to a fresh PostgreSQL database and to a flushed Redis
database (and, where it says so, back to a new SQLite file).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.copy import main as copy_main
from graph.store import open_store
from graph.threads.history import thread_history
from graph.verify import verify
from tests.conftest import PostgresBackend, SqliteBackend, postgres_admin_url, run_cli

TASK = "How long does shipping take at the demo shop?"


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres),
                        pytest.param("redis", marks=pytest.mark.redis)])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SqliteBackend, Any]]:
    """(a SQLite source, a PostgreSQL or Redis target)."""
    src = SqliteBackend(tmp_path / "src.sqlite")
    if request.param == "redis":
        from tests.redis_adapter import RedisBackend

        rb = RedisBackend(request.getfixturevalue("redis_url"))
        try:
            yield src, rb
        finally:
            rb.close()
        return
    pg = PostgresBackend(postgres_admin_url())
    try:
        yield src, pg
    finally:
        pg.drop()


def test_copied_thread_resumes_exactly_where_it_stopped(pair, tmp_path: Path) -> None:
    src, dst = pair
    run_cli(["--thread", "a", "--task", TASK, "--once", "--db", src.db])
    run_cli(["--thread", "b", "--task", TASK, "--db", src.db])
    assert copy_main(["--from", src.db, "--to", dst.db]) == 0
    assert dst.ledger_row("a") == src.ledger_row("a") == (1, 1, 4)
    with open_store(src.db, create=False, read_only=True) as s, \
            open_store(dst.db, create=False, read_only=True) as d:
        before, after = thread_history(s, "b"), thread_history(d, "b")
    assert after["steps"] == before["steps"] and after["header"] == before["header"]
    out = run_cli(["--thread", "a", "--once", "--db", dst.db])
    assert (out["status"], out["attempts"]) == ("done", 2)  # resumed: attempt 1 not repeated
    assert src.ledger_row("a") == (1, 1, 4), "the source is not changed"
    back = str(tmp_path / "back.sqlite")  # and back again, with its budget
    assert copy_main(["--from", dst.db, "--to", back, "--thread", "a"]) == 0
    with open_store(back, create=False, read_only=True) as store:
        header = thread_history(store, "a")["header"]
    assert (header["status"], header["attempts"]) == ("done", 2)
    assert verify(back) == []


def test_copy_refuses_threads_that_exist_at_the_target(pair) -> None:
    src, dst = pair
    run_cli(["--thread", "a", "--task", TASK, "--db", src.db])
    run_cli(["--thread", "a", "--task", "other", "--once", "--db", dst.db])
    before = dst.fingerprint()
    assert copy_main(["--from", src.db, "--to", dst.db, "--thread", "a"]) == 4
    assert dst.fingerprint() == before


def test_tombstones_travel_with_the_copy_and_are_not_counted_as_threads(pair, capsys) -> None:
    """A fresh user read `copied 2 thread(s)` for one thread and one pruned thread's tombstone."""
    from graph.prune import main as prune_main

    src, dst = pair
    run_cli(["--thread", "a", "--task", TASK, "--db", src.db])
    prune_main(["--db", src.db, "--completed", "0s"])
    run_cli(["--thread", "b", "--task", TASK, "--db", src.db, "--once"])
    capsys.readouterr()
    assert copy_main(["--from", src.db, "--to", dst.db]) == 0
    assert capsys.readouterr().out.strip() == "copied 1 thread(s) and 1 tombstone(s) of pruned threads"
    out = run_cli(["--thread", "a", "--task", TASK, "--db", dst.db])
    assert (out["exit_code"], out["error_code"]) == (4, "pruned")


def test_request_caps_travel_with_the_copy(pair, tmp_path) -> None:
    from graph.batch import main as batch_main

    src, dst = pair
    tasks = tmp_path / "cap.jsonl"
    tasks.write_text("".join(f'{{"thread_id": "c{i}", "task": "{TASK}"}}\n' for i in range(3)))
    assert batch_main([str(tasks), "--db", src.db, "--once", "--max-requests", "2"]) == 8
    assert copy_main(["--from", src.db, "--to", dst.db]) == 0
    assert batch_main([str(tasks), "--db", dst.db, "--once", "--max-requests", "2"]) == 8
    claimed = sum((dst.ledger_row(f"c{i}") or (0, 0, 0))[1] for i in range(3))
    assert claimed == 2, "the cap is never reset by moving databases"


@pytest.mark.parametrize("refusal", ["no_such_thread", "incompatible"])
def test_a_copy_refused_at_the_source_creates_no_target_file(tmp_path: Path, capsys,
                                                              refusal: str) -> None:
    """A refusal changes nothing (INVARIANTS I13): a copy refused for its source made an
    empty target SQLite file, with our tables, before it said no."""
    import json
    import sqlite3

    src, dst = tmp_path / "src.sqlite", tmp_path / "dst.sqlite"
    assert run_cli(["--thread", "a", "--task", "How long does shipping take?", "--db", str(src),
                    "--once"])["exit_code"] == 0
    if refusal == "incompatible":  # a checkpoint blob no serializer reads
        with sqlite3.connect(src) as conn:
            conn.execute("UPDATE checkpoints SET checkpoint = X'00' WHERE thread_id = 'a'")
    argv = ["--from", str(src), "--to", str(dst), "--json"]
    if refusal == "no_such_thread":
        argv += ["--thread", "nosuch"]
    assert copy_main(argv) == 4
    assert json.loads(capsys.readouterr().out)["error_code"] == refusal
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("dst")) == []
