"""The claim's own commit skips its `-wal` sync; every other commit keeps `synchronous=FULL`.

The claim's `TRUNCATE` checkpoint (`graph.store.sqlite.ledger`) syncs the `-wal` and the
database file before the request leaves, so the claim's commit needs no sync of its
own; nothing else may ever commit with less than `FULL`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graph.settings import Settings, ThreadSpec
from graph.step.advance import StepRequest, advance
from graph.store import open_store
from tests.fakes import NeverFinishes

FULL = 2
"""`PRAGMA synchronous` of FULL."""


def _step(store: Any, model: Any, task: str | None = None) -> Any:
    request = StepRequest(ThreadSpec("t1", task=task))
    return advance(store, request, Settings(db=store.location), model_factory=lambda m, s: model)


def test_only_the_claim_commits_with_normal_sync_and_full_is_back_before_the_request(
        tmp_path: Path) -> None:
    statements: list[str] = []
    with open_store(str(tmp_path / "c.sqlite"), create=True) as store:
        conn = store.sql.conn

        class Peek(NeverFinishes):
            def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
                seen.append(conn.execute("PRAGMA synchronous").fetchone()[0])
                return super().complete(messages, tools)

        seen: list[int] = []
        conn.set_trace_callback(statements.append)
        _step(store, Peek(), task="q")
        _step(store, Peek())
        conn.set_trace_callback(None)
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == FULL
    assert seen == [FULL, FULL]
    normal = [i for i, s in enumerate(statements) if s == "PRAGMA synchronous = NORMAL"]
    assert len(normal) == 2
    for i in normal:  # the claim, its checkpoint, FULL again: nothing else in between
        window = statements[i + 1:statements.index("PRAGMA synchronous = FULL", i)]
        assert window[0].startswith("UPDATE attempt_ledger SET claimed")
        assert window[-1] == "PRAGMA wal_checkpoint(TRUNCATE)"
        assert not [s for s in window if s.startswith(("INSERT", "BEGIN", "COMMIT"))]


def test_a_claim_with_writes_kept_back_commits_them_with_full_sync(tmp_path: Path) -> None:
    statements: list[str] = []
    with open_store(str(tmp_path / "c.sqlite"), create=True) as store:
        store.ledger.create("t1", 4)
        store.commit()
        store.ledger.count("t1")  # kept back for the next commit, as within a step
        store.sql.conn.set_trace_callback(statements.append)
        assert store.ledger.claim("t1", 1)
        store.sql.conn.set_trace_callback(None)
        assert store.sql.conn.execute("PRAGMA synchronous").fetchone()[0] == FULL
        assert store.ledger.read("t1").claimed == 1
    assert not [s for s in statements if s.startswith("PRAGMA synchronous")]
