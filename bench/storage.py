"""Storage growth of one long thread, and resume latency against history length.

  python -m bench.storage [--steps 50,100,200,400] [--postgres URL]

Database bytes after N steps (~2 KB of new conversation per step) for ours (the stored
conversation is compacted to the context limit, so each checkpoint is bounded) and for
bare LangGraph (the whole message list in every checkpoint), with the fitted exponent k
in size ∝ N^k; then `get_state` and a full `get_state_history` listing at each length.
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ToolLoopModel, ms, table
from bench.step_cost import MAX_ATTEMPTS, _initial
from tests.memory_ledger import MemoryLedger


def _fit(points: list[tuple[int, int]]) -> float:
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(size) for _, size in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def _size(db: str) -> int:
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


def _latency(graph: Any, config: dict[str, Any]) -> tuple[float, float]:
    start = time.perf_counter()
    graph.get_state(config)
    state_s = time.perf_counter() - start
    start = time.perf_counter()
    sum(1 for _ in graph.get_state_history(config))
    return state_s, time.perf_counter() - start


def grow(kind: str, db: str, checkpoints: list[int]) -> list[tuple[int, int, float, float]]:
    """Steps one thread to each length; returns (steps, bytes, get_state s, history s)."""
    from graph.factory import build_graph
    from graph.storage import open_store
    from nodes.context import StepContext

    rows, done, model = [], 0, ToolLoopModel()
    with open_store(db, create=True) as store:
        saver = store.checkpointer
        if kind == "bare":  # LangGraph's own saver, no checksum, whole history kept
            saver = type(saver)(saver.conn)
        graph = build_graph(saver)
        config = {"configurable": {"thread_id": "t"}}
        ledger = MemoryLedger()
        ledger.create("t", MAX_ATTEMPTS)
        state = _initial()
        state["thread"]["context_tokens"] = 16_000 if kind == "ours" else 10**9
        graph_input: Any = state
        for target in checkpoints:
            while done < target:
                graph.invoke(graph_input, config, context=StepContext("t", ledger, model),
                             durability="sync")
                graph_input, done = None, done + 1
            rows.append((target, _size(db), *_latency(graph, config)))
    return rows


def run(steps: list[int], postgres: str | None) -> str:
    """Measures and returns the report."""
    work = Path(tempfile.mkdtemp())
    report = []
    targets = [("SQLite", lambda kind: str(work / f"{kind}.sqlite"))]
    if postgres:
        targets.append(("PostgreSQL", lambda kind: _fresh_pg(postgres, kind)))
    for backend, make_db in targets:
        results = {kind: grow(kind, make_db(kind), steps) for kind in ("bare", "ours")}
        rows = []
        for kind, label in (("bare", "bare LangGraph"), ("ours", "ours (compacted)")):
            for n, size, state_s, history_s in results[kind]:
                rows.append([label, n, f"{size / 1e6:.2f} MB", ms(state_s), ms(history_s)])
            rows.append([label, "k", f"{_fit([(n, s) for n, s, *_ in results[kind]]):.2f}", "", ""])
        report.append(table(f"Storage and resume on {backend} (one thread, ~2 KB per step)",
                            ["what", "steps", "database", "get_state", "full history"], rows))
    return "\n\n".join(report)


def _fresh_pg(url: str, kind: str) -> str:
    import uuid

    import psycopg

    name = f"bench_{kind}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="50,100,200,400")
    parser.add_argument("--postgres", help="also measure on this PostgreSQL server")
    args = parser.parse_args(argv)
    print(run([int(n) for n in args.steps.split(",")], args.postgres))


if __name__ == "__main__":
    main()
