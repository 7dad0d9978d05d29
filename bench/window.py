"""Database size of one long thread with the checkpoint window, against `all` and bare SqliteSaver.

  python -m bench.window [--steps 50,100,400] [--postgres URL] [--redis URL]

Ours steps the thread through `graph.step.advance` (ledger, attempt log, digests, the
trim after every step) in the default configuration (`--context-tokens 16000`), with
the default window (`--keep-checkpoints 10`) and with `all`. The anchor is bare
LangGraph: `SqliteSaver` with the whole message list in every checkpoint (no
compaction), stepped by the same graph. Sizes include the attempt log; SQLite sizes are
the file after a `TRUNCATE` WAL checkpoint. On PostgreSQL deleted rows free their space
only through (auto)vacuum; the bench runs a plain `VACUUM` every `VACUUM_EVERY` steps,
as autovacuum would (a test server may run with it off). On Redis (`--redis URL`, a
server with the append-only file on) a thread's size is memory, `MEMORY USAGE` summed
over its keys (`bench.redis_db`); a second row gives what its steps appended to the
append-only file, which grows with every write, trims included, until the server
rewrites it. Each variant's thread is new and its keys are deleted afterwards. Prints
each size and its ratio to bare. Temporary folders and databases are removed.
"""

from __future__ import annotations

import argparse
import sqlite3
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


def ours(db: str, keep: str, steps: list[int], thread: str = "t",
         aof: list[int] | None = None) -> list[int]:
    """Steps one thread with `--keep-checkpoints keep`; the size at each of `steps`.

    On Redis the size is the thread's memory, and `aof` (when given) gets what its
    steps appended to the append-only file at each of `steps`.
    """
    from bench.redis_db import AofMeter, thread_sizes
    from graph.settings import Settings, ThreadSpec
    from graph.step.advance import StepRequest, advance
    from graph.store import is_redis, open_store

    sizes, done, model = [], 0, ToolLoopModel()
    spec = ThreadSpec(thread, task=TASK, max_attempts=10**6,
                      keep_checkpoints=keep if keep == "all" else int(keep))
    meter = AofMeter(db) if is_redis(db) else None
    with open_store(db, create=True) as store:
        for target in steps:
            while done < target:
                def step() -> None:
                    advance(store, StepRequest(spec), Settings(db=db), model_factory=lambda m, s: model)

                if meter:
                    meter.step(step)
                else:
                    step()
                done += 1
                if db.startswith("postgresql://") and done % VACUUM_EVERY == 0:
                    _vacuum(db)
            sizes.append(thread_sizes(db, thread)["total"] if meter else file_size(db))
            if meter and aof is not None:
                aof.append(meter.appended)
    if meter:
        meter.close()
    return sizes


def _vacuum(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM")


def bare(db: str, steps: list[int]) -> list[int]:
    """Bare LangGraph: `SqliteSaver`, every checkpoint with the whole (uncompacted) list."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from graph.agent import build_graph, initial_state
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


def _redis(url: str, keeps: tuple[str, ...], steps: list[int]) -> dict[str, list[int]]:
    """Ours on Redis with each window: memory and AOF rows (each thread deleted afterwards)."""
    from bench.redis_db import drop_thread, thread_id

    sizes: dict[str, list[int]] = {}
    for keep in keeps:
        thread, aof = thread_id(f"window_{keep}"), []
        try:
            sizes[f"ours, Redis memory, keep {keep}"] = ours(url, keep, steps, thread, aof)
            sizes[f"ours, Redis AOF appended, keep {keep}"] = aof
        finally:
            drop_thread(url, thread)
    return sizes


def run(steps: list[int], postgres: str | None, redis: str | None = None) -> str:
    """Measures every variant and returns the report (temporary files and databases removed)."""
    from bench.scratch import fresh_database, workdir

    default = str(DEFAULT_KEEP_CHECKPOINTS)
    with workdir("window") as work:
        sizes = {"bare SqliteSaver": bare(str(work / "bare.sqlite"), steps),
                 f"ours, SQLite, keep {default}": ours(str(work / "k.sqlite"), default, steps),
                 "ours, SQLite, keep all": ours(str(work / "all.sqlite"), "all", steps)}
    for keep in ((default, "all") if postgres else ()):
        with fresh_database(postgres or "", "window") as url:
            sizes[f"ours, PostgreSQL, keep {keep}"] = ours(url, keep, steps)
    if redis:
        sizes |= _redis(redis, (default, "all"), steps)
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
    parser.add_argument("--redis", help="also measure ours on this Redis server (a redis:// URL)")
    args = parser.parse_args(argv)
    print(run([int(n) for n in args.steps.split(",")], args.postgres, args.redis))


if __name__ == "__main__":
    main()
