"""Retention deletes only what its rules select, whole; cancel stops a thread for good (I10)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from graph.errors import UsageError
from graph.prune import main as prune_main
from graph.store import open_store
from graph.store.ages import parse_age
from graph.threads.retention import prune, select
from tests.conftest import run_cli
from tests.fakes import NeverFinishes
from tests.pg_pool import create_database, own_name

TASK = "How long does shipping take at the demo shop?"


def backdate(backend, thread_id: str, days: float) -> None:
    when = (datetime.now(UTC) - timedelta(days=days)).isoformat()
    backend.update_ledger(thread_id, updated_at=when)


def make_threads(backend) -> None:
    """done_old, done_new, exhausted_old, exhausted_mid, cancelled_old, ready_old."""
    for name in ("done_old", "done_new"):
        run_cli(["--thread", name, "--task", TASK, "--db", backend.db])
    for name in ("exhausted_old", "exhausted_mid"):
        model = NeverFinishes()
        run_cli(["--thread", name, "--task", TASK, "--db", backend.db],
                model_factory=lambda m, s, model=model: model)
    run_cli(["--thread", "cancelled_old", "--task", TASK, "--once", "--db", backend.db])
    assert run_cli(["--thread", "cancelled_old", "--cancel", "--db", backend.db])["exit_code"] == 0
    run_cli(["--thread", "ready_old", "--task", TASK, "--once", "--db", backend.db])
    for name, days in (("done_old", 2), ("done_new", 0.5), ("exhausted_old", 8),
                       ("exhausted_mid", 3), ("cancelled_old", 8), ("ready_old", 400)):
        backdate(backend, name, days)


class Seeds:
    """`make_threads` once per backend: the first test of a backend makes them in its own
    database and keeps a copy; later tests get the copy in theirs. The same rows and keys
    as made (SQLite: the file; PostgreSQL: `CREATE DATABASE ... TEMPLATE`; Redis: every key
    by DUMP and RESTORE, TTLs kept), ages included: they are days, the copies seconds old."""

    def __init__(self) -> None:
        self.sources: dict[str, Any] = {}
        self.fingerprints: dict[str, str] = {}
        self.dropped: list[Any] = []

    def __call__(self, backend: Any) -> None:
        source = self.sources.get(backend.name)
        if source is None:
            make_threads(backend)
            self.sources[backend.name] = self._keep(backend)
            self.fingerprints[backend.name] = backend.fingerprint()
            return
        if backend.name == "sqlite":
            shutil.copy2(source, backend.path)
        elif backend.name == "postgres":
            self._admin(backend.dbname, source)  # the pool's database, anew as a copy
        else:
            with open_store(backend.db, create=True):  # the search indexes, as a first run sets up
                pass
            pipe = backend._client.pipeline(transaction=False)
            for key, (dumped, pttl) in source.items():
                pipe.restore(key, max(pttl, 0), dumped, replace=True)
            pipe.execute()
        assert backend.fingerprint() == self.fingerprints[backend.name], "an incomplete copy"

    def _keep(self, backend: Any) -> Any:
        if backend.name == "sqlite":  # SQLite's backup: what the -wal holds too (conftest's
            kept = backend.path.with_name("retention-source.sqlite")  # helpers leave it there)
            with closing(sqlite3.connect(backend.path)) as src, closing(sqlite3.connect(kept)) as dst:
                src.backup(dst)
            kept.chmod(backend.path.stat().st_mode)
            return kept
        if backend.name == "postgres":
            name = own_name("retention")
            self._admin(name, backend.dbname)
            self.dropped.append(name)
            return name
        client = backend._client
        return {key: (client.dump(key), client.pttl(key)) for key in client.scan_iter(count=1000)}

    @staticmethod
    def _admin(dbname: str, template: str | None = None, *, drop: bool = False) -> None:
        """Makes `dbname` anew as a copy of `template` (`tests.pg_pool.create_database`), or drops it."""
        import psycopg

        from tests.conftest import postgres_admin_url

        with psycopg.connect(postgres_admin_url(), autocommit=True) as conn:
            if drop:
                conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            else:
                create_database(conn, dbname, template)


@pytest.fixture(scope="module")
def seeded() -> Iterator[Seeds]:
    """`seeded(backend)` puts `make_threads`'s six threads into the test's database."""
    seeds = Seeds()
    yield seeds
    for name in seeds.dropped:
        seeds._admin(name, drop=True)


def test_prune_deletes_only_what_the_rules_select(backend, seeded: Seeds) -> None:
    seeded(backend)
    with open_store(backend.db, create=False) as store:
        chosen, notes = select(store, completed=timedelta(hours=24), failed=timedelta(days=7))
        assert sorted(c.thread_id for c in chosen) == ["cancelled_old", "done_old", "exhausted_old"]
        assert notes == []
        report = prune(store, chosen)
    assert sorted(report["pruned"]) == ["cancelled_old", "done_old", "exhausted_old"]
    for gone in report["pruned"]:
        out = run_cli(["--thread", gone, "--task", TASK, "--db", backend.db])
        assert (out["exit_code"], out["error_code"]) == (4, "pruned")
        assert backend.ledger_row(gone) is None
    for kept in ("done_new", "exhausted_mid", "ready_old"):
        assert backend.ledger_row(kept) is not None
    assert run_cli(["--thread", "ready_old", "--once", "--db", backend.db])["status"] == "done"


def test_zero_age_selects_every_finished_thread_but_never_a_live_one(backend, seeded: Seeds) -> None:
    seeded(backend)
    before = {t: backend.ledger_row(t) for t in ("ready_old",)}
    assert prune_main(["--db", backend.db, "--completed", "0s", "--failed", "0s"]) == 0
    assert backend.ledger_row("ready_old") == before["ready_old"]
    for gone in ("done_old", "done_new", "exhausted_old", "exhausted_mid", "cancelled_old"):
        assert backend.ledger_row(gone) is None


def test_dry_run_changes_nothing(backend, seeded: Seeds, capsys) -> None:
    seeded(backend)
    before = backend.fingerprint()
    assert prune_main(["--db", backend.db, "--completed", "0s", "--dry-run"]) == 0
    assert "would prune done_old" in capsys.readouterr().out
    assert backend.fingerprint() == before


def test_a_crash_between_the_two_commits_leaves_the_thread_gone(backend, seeded: Seeds,
                                                              monkeypatch) -> None:
    seeded(backend)
    with open_store(backend.db, create=False) as store:
        chosen, _ = select(store, completed=timedelta(hours=24), failed=timedelta(days=7))

        def crash(thread_id: str) -> None:
            raise KeyboardInterrupt("killed between the tombstone and delete_thread")

        monkeypatch.setattr(store.checkpointer, "delete_thread", crash)
        with pytest.raises(KeyboardInterrupt):
            prune(store, chosen[:1])
        gone = chosen[0].thread_id
        # Buried: its ledger row and log are gone with the tombstone; its checkpoints wait.
        assert store.ledger.row(gone) is None and store.log.rows(gone) == []
        assert store.count_checkpoints(gone) > 0
        if backend.name == "redis":  # the backend's own record, under the TTL layer's
            from graph.store.redis.backend import RedisBackend

            assert gone in RedisBackend.buried_with_checkpoints(store.backend)  # type: ignore[arg-type]
        else:
            assert gone in store.backend.buried_with_checkpoints()
    out = run_cli(["--thread", gone, "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "pruned")
    monkeypatch.undo()
    with open_store(backend.db, create=False) as store:
        assert prune(store, [])["swept"] == 1
        assert store.count_checkpoints(gone) == 0


def test_restart_pruned_starts_anew_on_purpose_only(backend) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--db", backend.db])
    prune_main(["--db", backend.db, "--completed", "0s"])
    out = run_cli(["--thread", "t1", "--restart-pruned", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    out = run_cli(["--thread", "t1", "--task", TASK, "--restart-pruned", "--once", "--db", backend.db])
    assert (out["status"], out["attempts"]) == ("ready", 1)


@pytest.mark.parametrize("at", ["tools", "reason"])
def test_cancel_stops_the_thread_for_good(backend, at: str) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", backend.db])
    if at == "reason":  # as if a request failed and the thread waits at budget -> reason
        backend.update_ledger("t1", attempts=2)
    out = run_cli(["--thread", "t1", "--cancel", "--db", backend.db])
    assert (out["exit_code"], out["status"], out["_next"]) == (0, "cancelled", [])
    before = backend.fingerprint()
    for argv in ([], ["--once"], ["--task", TASK]):
        out = run_cli(["--thread", "t1", "--db", backend.db, *argv])
        assert (out["exit_code"], out["error_code"]) == (4, "cancelled")
    row = backend.ledger_row("t1")
    assert backend.fingerprint() == before and row[1] == 1
    # Even the graph invoked directly (as from a notebook) never counts again.
    from graph.agent import build_graph
    from nodes.context import StepContext
    from tests.fakes import ScriptedModel

    with open_store(backend.db, create=False) as store:
        graph = build_graph(store.checkpointer)
        graph.invoke(None, {"configurable": {"thread_id": "t1"}},
                     context=StepContext("t1", store.ledger, ScriptedModel([])), durability="sync")
    assert backend.ledger_row("t1") == row


@pytest.mark.parametrize(("first", "status", "code"), [
    (None, "done", 0), (["--cancel"], "cancelled", 0)])
def test_cancelling_a_finished_thread_says_it_was_already_finished_and_changes_nothing(
        sqlite_db, first: list[str], status: str, code: int, capsys) -> None:
    """Issue 30: `--cancel` on a done thread printed the thread as if cancelled, exit 0,
    without saying that nothing was cancelled."""
    from graph.run import main as run_main
    from tests.conftest import SqliteBackend

    db = str(sqlite_db)
    run_cli(["--thread", "t1", "--task", TASK, "--db", db, *(["--once"] if first else [])])
    if first:
        run_cli(["--thread", "t1", "--db", db, *first])
    before = SqliteBackend(sqlite_db).fingerprint()
    capsys.readouterr()
    assert run_main(["--thread", "t1", "--cancel", "--db", db]) == code
    out = capsys.readouterr().out
    assert out.startswith(f"thread t1: {status} (")
    assert f"not cancelled: the thread was already {status}; nothing changed" in out
    assert SqliteBackend(sqlite_db).fingerprint() == before
    again = run_cli(["--thread", "t1", "--cancel", "--db", db])
    assert (again["status"], again["exit_code"], again["error"]) == (status, code, None)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("24h", 86400),
                                               ("7d", 604800), ("0s", 0)])
def test_ages(text: str, seconds: int) -> None:
    assert parse_age(text).total_seconds() == seconds


@pytest.mark.parametrize("bad", ["", "7", "1w", "-1d", "1.5h", "d7", "99999999999d", "40000d"])
def test_bad_ages_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_age(bad)
