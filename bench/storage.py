"""Storage of one long thread, split by table, and resume latency against its length.

  python -m bench.storage [--steps 50,100,200,400] [--repeat N] [--passes N] [--postgres URL]
                          [--redis URL] [--json PATH]

Two threads grow in the same loop, one step of each per round, with the offline
scripted tool-loop model (~2 KB of new conversation per step): ours through
`graph.step.advance` in the default configuration (the stored conversation compacted to
`--context-tokens`, the attempt log keeping every step's text), and bare LangGraph (its
own saver, the whole conversation in every checkpoint, no ledger, no log). At each
length: the bytes of LangGraph's tables, of the attempt log and of our other tables,
the file (SQLite, after a WAL checkpoint) or the tables' total (PostgreSQL), on Redis
the memory of the thread's keys (`MEMORY USAGE`, bare LangGraph on its `RedisSaver`)
and what its steps appended to the append-only file (`bench.redis_db`), the fitted
exponent k in size ∝ steps^k, and `get_state` and a full `get_state_history` listing,
alternated between the two, in two passes (`--passes`).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    PASSES,
    alternate,
    cli_parser,
    ms,
    pass_names,
    pass_summaries,
    per_pass,
    table,
    write_json,
)
from bench.scratch import fresh_database, workdir

LANGGRAPH_TABLES = frozenset({"checkpoints", "writes", "checkpoint_blobs", "checkpoint_writes",
                              "checkpoint_migrations"})
"""LangGraph's own tables (SQLite and PostgreSQL savers)."""
ATTEMPT_LOG = "attempt_log"
KINDS = ("ours", "bare")


def _group(sizes: dict[str, int], total: int) -> dict[str, int]:
    """Bytes by table group: `langgraph`, `log`, `ours` (our other tables), `total`."""
    grouped = {"langgraph": 0, "log": 0, "ours": 0, "total": total}
    for table_name, size in sizes.items():
        kind = ("langgraph" if table_name in LANGGRAPH_TABLES else "log" if table_name == ATTEMPT_LOG
                else "ours")
        grouped[kind] += size
    return grouped


def sqlite_sizes(path: str) -> dict[str, int]:
    """Bytes per table group of a SQLite file (indexes with their table; `total`: file + `-wal`)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_schema"))
        sizes: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table_name = owner.get(name, name)
            if not table_name.startswith("sqlite_"):
                sizes[table_name] = sizes.get(table_name, 0) + int(size)
    finally:
        conn.close()
    wal = Path(path + "-wal")
    total = Path(path).stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return _group(sizes, total)


def postgres_sizes(url: str) -> dict[str, int]:
    """Bytes per table group of a PostgreSQL database (indexes and TOAST with their table)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                            "JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')").fetchall()
    sizes = {name: int(size) for name, size in rows}
    return _group(sizes, sum(sizes.values()))


@dataclass
class Grown:
    """One growing thread: how to step it, its compiled graph, its id and its sizes."""

    step: Callable[[], object]
    graph: Any
    thread_id: str
    sizes: Callable[[], dict[str, int]]


def _sql(thread: Any, thread_id: str, sizes: Callable[[], dict[str, int]]) -> Grown:
    return Grown(lambda: thread.step(thread_id), thread.graph(), thread_id, sizes)


@contextmanager
def _threads(backend: str, admin_url: str | None, redis_url: str | None) -> Iterator[dict[str, Grown]]:
    """Kind -> its growing thread on fresh databases, closed and removed on exit."""
    from bench.project import BareThreads, OurStore, ToolLoopModel, postgres_saver, sqlite_saver

    sizes: Callable[[str], dict[str, int]]
    with ExitStack() as stack:
        if backend == "Redis":
            assert redis_url is not None
            yield _redis_threads(stack, redis_url)
            return
        if backend == "SQLite":
            work = stack.enter_context(workdir("storage"))
            ours_db, bare_db = str(work / "ours.sqlite"), str(work / "bare.sqlite")
            saver, sizes = stack.enter_context(sqlite_saver(bare_db)), sqlite_sizes
        else:
            assert admin_url is not None
            ours_db = stack.enter_context(fresh_database(admin_url, "storage_ours"))
            bare_db = stack.enter_context(fresh_database(admin_url, "storage_bare"))
            saver, sizes = stack.enter_context(postgres_saver(bare_db)), postgres_sizes
        ours = OurStore(ours_db, ToolLoopModel())
        stack.callback(ours.close)
        bare = BareThreads(saver, ToolLoopModel(), durability="async", context_tokens=10**9)
        yield {"ours": _sql(ours, "t", lambda: sizes(ours_db)),
               "bare": _sql(bare, "t", lambda: sizes(bare_db))}


def _redis_threads(stack: ExitStack, url: str) -> dict[str, Grown]:
    """Both kinds on one Redis server, each thread's keys deleted on exit (see `bench.redis_db`)."""
    from bench.project import BareThreads, OurStore, ToolLoopModel, redis_saver
    from bench.redis_db import AofMeter, drop_thread, thread_id, thread_sizes

    ours = OurStore(url, ToolLoopModel())
    stack.callback(ours.close)
    bare = BareThreads(stack.enter_context(redis_saver(url)), ToolLoopModel(), durability="async",
                       context_tokens=10**9)
    grown = {}
    for kind, thread in (("ours", ours), ("bare", bare)):
        tid, meter = thread_id(f"storage_{kind}"), AofMeter(url)
        stack.callback(meter.close)
        stack.callback(drop_thread, url, tid)

        def step(thread: Any = thread, tid: str = tid, meter: AofMeter = meter) -> None:
            meter.step(lambda: thread.step(tid))

        def sizes(tid: str = tid, meter: AofMeter = meter) -> dict[str, int]:
            return thread_sizes(url, tid) | {"aof": meter.appended, "aof_skipped": meter.skipped}

        grown[kind] = Grown(step, thread.graph(), tid, sizes)
    return grown


HISTORY_REPEAT = 3
"""At most this many full history listings per pass (bare LangGraph's take seconds at 400 steps)."""


def _latency(threads: dict[str, Grown], repeat: int, passes: int) -> dict[str, Any]:
    """`get_state` and a full history listing per kind, alternated, in `passes` passes."""
    states: dict[str, Callable[[int], object]] = {}
    histories: dict[str, Callable[[int], object]] = {}

    def state(graph: Any, config: dict[str, Any]) -> Callable[[int], object]:
        return lambda i: graph.get_state(config)

    def history(graph: Any, config: dict[str, Any]) -> Callable[[int], object]:
        return lambda i: sum(1 for _ in graph.get_state_history(config))

    for kind, grown in threads.items():
        config = {"configurable": {"thread_id": grown.thread_id}}
        states[f"{kind} get_state"] = state(grown.graph, config)
        histories[f"{kind} history"] = history(grown.graph, config)
    return pass_summaries([alternate(states, repeat) | alternate(histories, min(repeat, HISTORY_REPEAT))
                           for _ in range(passes)])


def grow(backend: str, admin_url: str | None, steps: list[int], repeat: int,
         redis_url: str | None = None, passes: int = PASSES) -> list[dict[str, Any]]:
    """Grows both threads to each length in `steps`; one result per length."""
    points, done = [], 0
    with _threads(backend, admin_url, redis_url) as threads:
        for target in steps:
            while done < target:
                for grown in threads.values():
                    grown.step()
                done += 1
            points.append({"steps": target, "sizes": {k: threads[k].sizes() for k in KINDS},
                           "latency": _latency(threads, repeat, passes)})
    return points


def fit(points: list[tuple[int, int]]) -> float:
    """Least-squares exponent k of size ∝ steps^k (nan with fewer than two lengths)."""
    if len({n for n, _ in points}) < 2:
        return math.nan
    xs, ys = [math.log(n) for n, _ in points], [math.log(max(size, 1)) for _, size in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def exponents(points: list[dict[str, Any]]) -> dict[str, float]:
    """k for bare's total, ours' total and ours without the attempt log."""
    def k(kind: str, without_log: bool = False) -> float:
        return fit([(p["steps"], p["sizes"][kind]["total"] - (p["sizes"][kind]["log"] if without_log else 0))
                    for p in points])

    return {"bare": k("bare"), "ours": k("ours"), "ours_without_log": k("ours", True)}


def _mb(size: int) -> str:
    return f"{size / 1e6:.2f}"


def report(backend: str, points: list[dict[str, Any]], passes: int = PASSES) -> str:
    """The table of one backend's points (measured in `passes` passes)."""
    rows = []
    for p in points:
        for kind in KINDS:
            s, lat = p["sizes"][kind], p["latency"]
            rows.append([kind, p["steps"], _mb(s["langgraph"]), _mb(s["log"]), _mb(s["ours"]),
                         _mb(s["total"]),
                         f"{s['total'] / p['sizes']['bare']['total']:.3g}" if kind == "ours" else "1",
                         per_pass([x["median"] for x in lat[f"{kind} get_state"]], ms),
                         per_pass([x["median"] for x in lat[f"{kind} history"]], ms)]
                        + ([_mb(s["aof"])] if "aof" in s else []))
    k = exponents(points)
    redis = "aof" in points[0]["sizes"]["ours"]
    what = ("MB of memory: MEMORY USAGE summed over the thread's keys, search indexes left out; "
            "AOF: MB its steps appended to the append-only file" if redis else "MB")
    return table(f"Storage and resume on {backend} (one thread, ~2 KB per step; {what}; latency "
                 f"medians {pass_names(passes)})\nk (size ∝ steps^k): bare {k['bare']:.2f}, ours "
                 f"{k['ours']:.2f}, ours without the attempt log {k['ours_without_log']:.2f}",
                 ["thread", "steps", "LangGraph tables", "attempt log", "our other tables", "total",
                  "÷ bare", "get_state", "full history"] + (["AOF"] if redis else []), rows)


def measure(steps: list[int], admin_url: str | None, repeat: int,
            redis_url: str | None = None, passes: int = PASSES) -> dict[str, Any]:
    """Every backend's points, as the JSON `bench.run_all` reads."""
    backends = ["SQLite"] + (["PostgreSQL"] if admin_url else []) + (["Redis"] if redis_url else [])
    points = {backend: grow(backend, admin_url, steps, repeat, redis_url, passes) for backend in backends}
    return {"passes": passes, "points": points, "k": {b: exponents(p) for b, p in points.items()}}


def main(argv: list[str] | None = None) -> None:
    """Measures and prints the report (and writes the results as JSON with `--json`)."""
    parser = cli_parser(__doc__, passes=True)
    parser.add_argument("--steps", default="50,100,200,400", help="lengths, comma-separated")
    parser.add_argument("--postgres", help="also measure on this PostgreSQL server (an admin URL)")
    parser.add_argument("--redis", help="also measure on this Redis server (a redis:// URL; "
                        "bench.run_all --redis starts a private one)")
    parser.add_argument("--repeat", type=int, default=5, help="latency samples per pass")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = measure(sorted(int(n) for n in args.steps.split(",")), args.postgres, args.repeat,
                      args.redis, args.passes)
    write_json(args.json, results)
    print("\n\n".join(report(b, p, args.passes) for b, p in results["points"].items()))


if __name__ == "__main__":
    main()
