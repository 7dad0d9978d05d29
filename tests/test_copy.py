"""graph.copy moves threads between backends intact; existing target threads are refused."""

from __future__ import annotations

import pytest

from graph.copy import main as copy_main
from graph.storage import open_store
from graph.thread_history import thread_history
from tests.conftest import PostgresBackend, SqliteBackend, postgres_admin_url, run_cli

TASK = "How long does shipping take at the demo shop?"
pytestmark = pytest.mark.postgres


@pytest.fixture
def pair(tmp_path):
    pg = PostgresBackend(postgres_admin_url())
    try:
        yield SqliteBackend(tmp_path / "src.sqlite"), pg
    finally:
        pg.drop()


def test_copied_thread_resumes_exactly_where_it_stopped(pair) -> None:
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
    assert (out["status"], out["attempts"]) == ("done", 2)
    assert src.ledger_row("a") == (1, 1, 4), "the source is not changed"


def test_copy_refuses_threads_that_exist_at_the_target(pair) -> None:
    src, dst = pair
    run_cli(["--thread", "a", "--task", TASK, "--db", src.db])
    run_cli(["--thread", "a", "--task", "other", "--once", "--db", dst.db])
    before = dst.fingerprint()
    assert copy_main(["--from", src.db, "--to", dst.db, "--thread", "a"]) == 4
    assert dst.fingerprint() == before


def test_tombstones_travel_with_the_copy(pair) -> None:
    from graph.prune import main as prune_main

    src, dst = pair
    run_cli(["--thread", "a", "--task", TASK, "--db", src.db])
    prune_main(["--db", src.db, "--completed", "0s"])
    assert copy_main(["--from", src.db, "--to", dst.db]) == 0
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
