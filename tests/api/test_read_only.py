"""A database opened `read_only=True` refuses every writing call as a usage error, unchanged."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from graph.api import open_database
from graph.errors import ErrorCode, ExitCode, UsageError

TASK = "How long does shipping take at the demo shop?"

WRITING_CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("run", lambda db: db.run("t1")),
    ("run", lambda db: db.run("new", task=TASK)),
    ("cancel", lambda db: db.cancel("t1")),
    ("reopen", lambda db: db.reopen("t1")),
    ("decide", lambda db: db.decide("t1", approve=["call_1"])),
    ("batch", lambda db: db.batch([])),
    ("prune", lambda db: db.prune(completed="0s")),
    ("prune", lambda db: db.prune_report(completed="0s")),
    ("invocation", lambda db: db.invocation("t1").__enter__()),
]


def digest(path: Path) -> str:
    """The database's bytes (file and non-empty -wal; reading may create empty sidecars)."""
    return "".join(hashlib.sha256(p.read_bytes()).hexdigest() for p in (path, Path(f"{path}-wal"))
                   if p.exists() and p.stat().st_size)


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.sqlite"
    with open_database(path, create=True) as db:
        assert db.run("t1", task=TASK).exit_code == ExitCode.OK
    return path


@pytest.mark.parametrize(("name", "call"), WRITING_CALLS, ids=[f"{n}-{i}" for i, (n, _) in
                                                               enumerate(WRITING_CALLS)])
def test_a_writing_call_on_a_read_only_database_is_a_usage_error_naming_it(
        database: Path, name: str, call: Callable[[Any], Any]) -> None:
    before = digest(database)
    with open_database(database, read_only=True) as db, pytest.raises(UsageError) as refused:
        call(db)
    assert refused.value.error_code == ErrorCode.USAGE and refused.value.exit_code == ExitCode.USAGE
    assert refused.value.message.startswith(
        f"{name} writes to the database, which was opened with read_only=True")
    assert digest(database) == before


def test_reading_calls_and_a_dry_run_prune_still_work_read_only(database: Path) -> None:
    with open_database(database, read_only=True) as db:
        assert db.history("t1")["header"]["thread_id"] == "t1"
        assert db.prune(completed="0s", dry_run=True)["would_prune"] == []
        assert [t["thread_id"] for t in db.threads()] == ["t1"]


async def _arun(database: Path) -> None:
    async with open_database(database, read_only=True) as db:
        await db.arun("t1")


def test_the_async_run_on_a_read_only_database_is_refused_too(database: Path) -> None:
    import asyncio

    with pytest.raises(UsageError, match="^run writes to the database"):
        asyncio.run(_arun(database))
