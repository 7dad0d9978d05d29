"""A lost or damaged SQLite `-wal` never brings back a claimed attempt (INVARIANTS I1, I2).

Each case stops a step as a kill would (the database files are imaged at that instant,
and put back after the step), then deletes, truncates or flips bytes of the `-wal`,
and resumes: the requests the model received never exceed the attempts the ledger
claims. The real-process SIGKILL variant is in `tests/step/test_crash.py`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from graph.errors import NotDurableError
from graph.store.base import Store
from tests.conftest import SqliteBackend, run_cli
from tests.fakes import tool_call_reply
from tests.wal_damage import DAMAGE, FRAME_HEADER, HEADER

TASK = "How long does shipping take at the demo shop?"
WHEN = ("during_request", "after_step")
"""When the step dies: while its request is out (claim committed), or after the reply's
checkpoint is written but before the process closes the database."""


class Crash:
    """Images the database files at the chosen instant, and puts them back afterwards."""

    def __init__(self, db: Path) -> None:
        self.db, self.image, self.armed = db, None, False

    def files(self) -> list[Path]:
        return [self.db.with_name(self.db.name + suffix) for suffix in ("", "-wal", "-shm")]

    def take(self) -> None:
        if self.armed:
            self.armed = False
            self.image = {p: p.read_bytes() for p in self.files() if p.exists()}

    def restore(self) -> None:
        assert self.image is not None, "the crash point was never reached"
        for path in self.files():
            if path in self.image:
                path.write_bytes(self.image[path])
            else:
                path.unlink(missing_ok=True)


class Server:
    """A model that counts the requests it received and may crash during one."""

    def __init__(self, crash: Crash, when: str) -> None:
        self.received, self.crash, self.when = 0, crash, when

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        self.received += 1
        if self.when == "during_request":
            self.crash.take()
        return tool_call_reply(f"call_{self.received}")


def _step(db: Path, server: Server, task: str | None = None) -> dict[str, Any]:
    argv = ["--thread", "t1", "--once", "--db", str(db), "--max-attempts", "10"]
    argv += ["--task", task] if task else []
    return run_cli(argv, model_factory=lambda model_id, settings: server)


def _crash_damage_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str,
                         damage: Callable[[Path], None]) -> tuple[int, tuple[int, int, int]]:
    """Two steps, the second killed at `when`; damage the `-wal`; three more steps.

    Returns:
        Requests received, and the ledger row `(attempts, claimed, max_attempts)`.
    """
    db = tmp_path / "c.sqlite"
    crash = Crash(db)
    server = Server(crash, when)
    close = Store.close

    def close_after_image(store: Store) -> None:
        if when == "after_step":
            crash.take()
        close(store)

    monkeypatch.setattr(Store, "close", close_after_image)
    assert _step(db, server, TASK)["exit_code"] == 0
    crash.armed = True
    _step(db, server)
    crash.restore()
    wal = db.with_name(db.name + "-wal")
    if when == "after_step":  # the reply's writes are in the -wal: the damage hits them
        assert wal.stat().st_size > HEADER + 4 * (FRAME_HEADER + 4096)
    if wal.exists():
        damage(wal)
    for _ in range(3):
        assert _step(db, server)["exit_code"] == 0
    row = SqliteBackend(db).ledger_row("t1")
    assert row is not None
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    return server.received, row


@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_lost_or_damaged_wal_never_brings_back_a_claimed_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str, damage: Callable[[Path], None]
) -> None:
    received, (attempts, claimed, maximum) = _crash_damage_resume(tmp_path, monkeypatch, when,
                                                                  damage)
    assert received <= claimed <= attempts <= maximum, (received, attempts, claimed)
    assert received >= 4  # the thread went on after the damage


def test_without_the_claim_checkpoint_a_deleted_wal_loses_the_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scenario above is real: with the plain shared ledger, the server gets more."""
    import graph.store.sqlite.open
    from graph.store.sql.ledger import SqlLedger

    monkeypatch.setattr(graph.store.sqlite.open, "SqliteLedger", SqlLedger)
    received, (attempts, claimed, _) = _crash_damage_resume(tmp_path, monkeypatch,
                                                            "during_request", DAMAGE["deleted"])
    assert received > claimed


def test_claim_is_in_the_database_file_before_the_request_leaves(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    seen: list[tuple[int, int]] = []

    class Peek:
        def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
            wal = db.with_name(db.name + "-wal")
            # Read the main file alone, as SQLite would after losing the -wal.
            with sqlite3.connect(f"{db.as_uri()}?mode=ro&immutable=1", uri=True) as conn:
                seen.append(conn.execute("SELECT claimed, attempts FROM attempt_ledger").fetchone())
            assert not wal.exists() or wal.stat().st_size == 0
            return tool_call_reply(f"call_{len(seen)}")

    for i in range(3):
        argv = ["--thread", "t1", "--once", "--db", str(db)] + (["--task", TASK] if i == 0 else [])
        assert run_cli(argv, model_factory=lambda m, s: Peek())["exit_code"] == 0
    assert seen == [(1, 1), (2, 2), (3, 3)]


def test_a_claim_that_cannot_reach_the_database_file_is_spent_and_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import graph.store.sqlite.open

    monkeypatch.setattr(graph.store.sqlite.open, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(graph.store.sqlite.open, "_PRAGMAS", ("PRAGMA busy_timeout = 50",
                                                         "PRAGMA journal_mode = WAL",
                                                         "PRAGMA synchronous = FULL"))
    db = tmp_path / "c.sqlite"
    sent: list[int] = []

    class Model:
        def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
            sent.append(1)
            return tool_call_reply(f"call_{len(sent)}")

    def step(task: str | None = None) -> dict[str, Any]:
        argv = ["--thread", "t1", "--once", "--db", str(db)] + (["--task", task] if task else [])
        return run_cli(argv, model_factory=lambda m, s: Model())

    assert step(TASK)["exit_code"] == 0
    reader = sqlite3.connect(db)  # another process's reader, holding an old snapshot
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM attempt_ledger").fetchall()
    try:
        out = step()
    finally:
        reader.close()
    assert (out["exit_code"], out["error_code"]) == (6, "wal_busy"), out
    assert "nothing was sent" in out["error"]
    assert len(sent) == 1
    assert SqliteBackend(db).ledger_row("t1")[:2] == (2, 2)  # spent, never uncounted
    out = step()  # the next run counts a new attempt and sends it
    assert out["exit_code"] == 0 and len(sent) == 2
    assert SqliteBackend(db).ledger_row("t1")[:2] == (3, 3)


class CheckpointLockHolder:
    """Another process holding SQLite's WAL checkpoint lock, as its own checkpoint does.

    SQLite's unix VFS takes that lock as a write lock on byte 121 of the `-shm` file
    (`UNIX_SHM_BASE` 120 + `WAL_CKPT_LOCK` 1, sqlite3.c); the process releases it when
    told to, by exiting.
    """

    CODE = ("import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 121)\n"
            "print('held', flush=True)\n"
            "sys.stdin.readline()\n")

    def __init__(self, shm: Path) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(shm)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "held\n"

    def release(self) -> None:
        self.proc.communicate(timeout=30)  # closes its stdin: it exits, and the lock goes
        assert self.proc.returncode == 0


def _claim_in_an_open_database(db: Path, holder_started: Callable[[Path], Any]) -> Any:
    from graph.store.sqlite.open import open_sqlite

    with open_sqlite(db, create=True) as store:
        store.ledger.create("t1", 4)
        store.ledger.count("t1")
        holder = holder_started(db.with_name(db.name + "-shm"))
        try:
            return store.ledger.claim("t1", 1), holder
        finally:
            if holder.proc.poll() is None:
                holder.release()


def test_a_claim_waits_for_another_process_checkpoint_then_reaches_the_database_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight processes' claims at once once failed with `wal_busy` at random: SQLite
    returns busy at once, without its busy handler, while another checkpoint runs."""
    import time
    from types import SimpleNamespace

    import graph.store.sqlite.ledger

    db = tmp_path / "c.sqlite"
    pauses: list[float] = []
    holders: list[CheckpointLockHolder] = []

    def pause(seconds: float) -> None:  # the first wait ends the other checkpoint
        pauses.append(seconds)
        if len(pauses) == 1:
            holders[0].release()

    def start(shm: Path) -> CheckpointLockHolder:
        holders.append(CheckpointLockHolder(shm))
        return holders[-1]

    # The ledger's waits between checkpoints only (Popen's own waits must stay real).
    monkeypatch.setattr(graph.store.sqlite.ledger, "time",
                        SimpleNamespace(sleep=pause, monotonic=time.monotonic))
    claimed, _ = _claim_in_an_open_database(db, start)
    assert claimed and len(pauses) == 1
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert SqliteBackend(db).ledger_row("t1")[:2] == (1, 1)


def test_a_claim_refused_while_another_process_checkpoints_past_the_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import graph.store.sqlite.open

    monkeypatch.setattr(graph.store.sqlite.open, "_PRAGMAS", ("PRAGMA busy_timeout = 50",
                                                         "PRAGMA journal_mode = WAL",
                                                         "PRAGMA synchronous = FULL"))
    db = tmp_path / "c.sqlite"
    with pytest.raises(NotDurableError, match="reading or checkpointing for the whole busy"):
        _claim_in_an_open_database(db, CheckpointLockHolder)
    assert SqliteBackend(db).ledger_row("t1")[:2] == (1, 1)  # spent, never uncounted
