"""Database size of one long thread with the checkpoint window, against `all` and bare SqliteSaver.

  python -m bench.window [--steps 50,100,400] [--postgres URL]

Ours steps the thread through `graph.step.advance` (ledger, attempt log, digests, the
trim after every step) in the default configuration (`--context-tokens 16000`), with
the default window (`--keep-checkpoints 10`) and with `all`. The anchor is bare
LangGraph: `SqliteSaver` with the whole message list in every checkpoint (no
compaction), stepped by the same graph. Sizes include the attempt log; SQLite sizes are
the file after a `TRUNCATE` WAL checkpoint. On PostgreSQL deleted rows free their space
only through (auto)vacuum; the bench runs a plain `VACUUM` every `VACUUM_EVERY` steps,
as autovacuum would (a test server may run with it off). Prints each size and its
ratio to bare.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import table
from bench.project import ToolLoopModel
from nodes.state import DEFAULT_KEEP_CHECKPOINTS

TASK = "Summarise the shop's shipping terms."
VACUUM_EVERY = 25
"""PostgreSQL: steps between two plain `VACUUM`s (what autovacuum does on its own)."""


def file_size(db: str) -> int:
    """Bytes of a SQLite file after folding its WAL in, or of our PostgreSQL tables."""
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            return int(conn.execute("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE "
                                    "n.nspname = 'public' AND c.relkind = 'r'").fetchone()[0])
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return Path(db).stat().st_size


def ours(db: str, keep: str, steps: list[int]) -> list[int]:
    """Steps one thread with `--keep-checkpoints keep`; the size at each of `steps`."""
    from graph.settings import Settings
    from graph.spec import ThreadSpec
    from graph.step import StepRequest, advance
    from graph.storage import open_store

    sizes, done, model = [], 0, ToolLoopModel()
    spec = ThreadSpec("t", task=TASK, max_attempts=10**6,
                      keep_checkpoints=keep if keep == "all" else int(keep))
    with open_store(db, create=True) as store:
        for target in steps:
            while done < target:
                advance(store, StepRequest(spec), Settings(db=db),
                        model_factory=lambda m, s: model)
                done += 1
                if db.startswith("postgresql://") and done % VACUUM_EVERY == 0:
                    _vacuum(db)
            sizes.append(file_size(db))
    return sizes


def _vacuum(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM")


def bare(db: str, steps: list[int]) -> list[int]:
    """Bare LangGraph: `SqliteSaver`, every checkpoint with the whole (uncompacted) list."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from graph.factory import build_graph
    from graph.state import initial_state
    from nodes.context import StepContext
    from tests.memory_ledger import MemoryLedger

    conn = sqlite3.connect(db, check_same_thread=False)
    graph = build_graph(SqliteSaver(conn))
    ledger, model = MemoryLedger(), ToolLoopModel()
    ledger.create("t", 10**6)
    graph_input: Any = initial_state(thread_id="t", task=TASK, model="offline-demo",
                                     max_attempts=10**6, created_at="2026-01-01T00:00:00+00:00",
                                     context_tokens=10**9)
    sizes, done, config = [], 0, {"configurable": {"thread_id": "t"}}
    for target in steps:
        while done < target:
            graph.invoke(graph_input, config, context=StepContext("t", ledger, model),
                         durability="sync")
            graph_input, done = None, done + 1
        sizes.append(file_size(db))
    conn.close()
    return sizes


def _postgres_db(admin: str) -> tuple[str, Callable[[], None]]:
    import psycopg

    name = f"bench_window_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return admin.rsplit("/", 1)[0] + "/" + name, drop


def run(steps: list[int], postgres: str | None) -> str:
    """Measures every variant and returns the report (temporary files and databases removed)."""
    work = Path(tempfile.mkdtemp(prefix="bench_window_"))
    default = str(DEFAULT_KEEP_CHECKPOINTS)
    try:
        sizes = {"bare SqliteSaver": bare(str(work / "bare.sqlite"), steps),
                 f"ours, SQLite, keep {default}": ours(str(work / "k.sqlite"), default, steps),
                 "ours, SQLite, keep all": ours(str(work / "all.sqlite"), "all", steps)}
        for keep in ((default, "all") if postgres else ()):
            url, drop = _postgres_db(postgres or "")
            try:
                sizes[f"ours, PostgreSQL, keep {keep}"] = ours(url, keep, steps)
            finally:
                drop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    anchor = sizes["bare SqliteSaver"]
    rows = [[name, *(f"{s / 1e6:.2f} MB" for s in row),
             *(f"{a / s:.1f}x" for a, s in zip(anchor, row, strict=True))]
            for name, row in sizes.items()]
    header = ["variant", *(f"{n} steps" for n in steps), *(f"bare/ours {n}" for n in steps)]
    return table("Database size of one thread (attempt log included), default --context-tokens",
                 header, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="50,100,400")
    parser.add_argument("--postgres", help="also measure ours on this PostgreSQL server")
    args = parser.parse_args(argv)
    print(run([int(n) for n in args.steps.split(",")], args.postgres))


if __name__ == "__main__":
    main()
