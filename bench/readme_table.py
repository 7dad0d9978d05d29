"""The README's Performance table, in its Markdown format, from one `bench.run_all` run.

Each cell with two values gives pass 1 / pass 2. `bench.run_all` prints the table at
the end of a run so it can be pasted into the README as it is; the last column, what a
figure means for a user, states only what the figures show, for the writer to refine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.common import pass_names


def _ms(passes: Sequence[dict[str, float]]) -> str:
    return " / ".join(f"{p['median'] * 1000:.{0 if p['median'] >= 0.1 else 1}f}" for p in passes) + " ms"


def _x(values: Sequence[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values) + " ×"


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f}" if size >= 1e6 else f"{size / 1e6:.2f}"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def startup_rows(r: dict[str, Any]) -> list[str]:
    """Cold start of a step, and of an invocation with nothing to do."""
    s, x = r["summaries"], r["ratios"]
    anchor = (f"`import langgraph.graph`: {_ms(s['floor'])} (`python -c pass` {_ms(s['pass'])}, "
              f"JSON-file step {_ms(s['json'])})")
    return [
        _row("cold start of one `--once` step (whole process)", _ms(s["once"]), anchor,
             f"{_x(x['once'])} the import floor",
             f"start-up is mostly importing LangGraph; our own modules add {r['own_import_ms']:.0f} ms"),
        _row("an invocation with nothing to do (thread done)", _ms(s["done"]), "the import floor",
             f"{_x(x['done'])} the import floor", "what a scheduler polling a finished thread pays"),
    ]


def step_rows(r: dict[str, Any]) -> list[str]:
    """One step in process, with commits per step."""
    s, x, counted = r["summaries"], r["ratios"], r["syncs"]

    def commits(variant: str) -> str:
        c = counted.get(variant)
        return f"{c['commits']:.0f} commits ({c['syncs']:.0f} fsync/fdatasync)" if c else "commits n/a"

    return [_row(
        f"one step in process, default `--context-tokens` ({r['context_tokens']}), state growing "
        "~2 KB per step",
        f"{_ms(s['ours'])}, {commits('ours')}",
        f"InMemorySaver, same graph and compaction, {_ms(s['memory'])}; SqliteSaver with LangGraph's "
        f"default async durability and no ledger {_ms(s['bare'])}, {commits('bare')}; with "
        f"`durability=\"sync\"` (the durable floor) {_ms(s['bare_sync'])}, "
        f"{_x(x['bare_sync/memory'])} InMemorySaver",
        f"{_x(x['ours/memory'])} InMemorySaver, {_x(x['ours/bare'])} bare SQLite, "
        f"{_x(x['ours/bare_sync'])} the durable floor",
        "durable bookkeeping per step beside a model call of seconds")] + server_step_rows(r)


SERVER_STEPS = {
    "postgres": ("PostgreSQL", "round trips to the server; each LangGraph call commits on its own "
                 "connection"),
    "redis": ("Redis", "each write is fsynced to the append-only file before the server answers "
              "(`appendfsync always`), and each claim waits for it (`WAITAOF`)"),
}
"""Server variant of `bench.step_cost` -> (its name, what its cost is made of)."""


def server_step_rows(r: dict[str, Any]) -> list[str]:
    """One step of ours on PostgreSQL and on Redis (those measured), in the same loop."""
    s, x = r["summaries"], r["ratios"]
    return [_row(f"one step in process on {name}, same loop", _ms(s[key]),
                 f"InMemorySaver {_ms(s['memory'])}; ours on SQLite {_ms(s['ours'])}",
                 f"{_x(x[f'{key}/memory'])} InMemorySaver, {_x(x[f'{key}/ours'])} ours on SQLite", means)
            for key, (name, means) in SERVER_STEPS.items() if key in s]


def storage_rows(backend: str, points: list[dict[str, Any]], k: dict[str, float]) -> list[str]:
    """Database size at each length, with the attempt log; get_state and history."""
    lengths = " / ".join(str(p["steps"]) for p in points)
    ours = " / ".join(_mb(p["sizes"]["ours"]["total"]) for p in points)
    logs = " / ".join(_mb(p["sizes"]["ours"]["log"]) for p in points)
    bare = " / ".join(_mb(p["sizes"]["bare"]["total"]) for p in points)
    last, lat = points[-1], points[-1]["latency"]
    ratio = last["sizes"]["ours"]["total"] / last["sizes"]["bare"]["total"]
    k_text = f"k ≈ {k['ours']:.1f} ({k['ours_without_log']:.1f} without the log)"
    what, aof = f"database after {lengths} steps, {backend}", ""
    if "aof" in last["sizes"]["ours"]:
        what = f"memory of one thread (`MEMORY USAGE` of its keys) after {lengths} steps, {backend}"
        aof = "; its steps appended " + " / ".join(_mb(p["sizes"]["ours"]["aof"]) for p in points) \
            + " MB to the append-only file (bare: " \
            + " / ".join(_mb(p["sizes"]["bare"]["aof"]) for p in points) + " MB)"
    return [
        _row(what, f"{ours} MB, of which attempt log {logs} MB; {k_text}{aof}",
             f"bare LangGraph: {bare} MB, k ≈ {k['bare']:.1f}", f"{ratio:.3g} × at {last['steps']} steps",
             "each checkpoint holds the compacted, bounded conversation; the log keeps every step"),
        _row(f"`get_state` / full history after {last['steps']} steps, {backend}",
             f"{_ms(lat['ours get_state'])}; history {_ms(lat['ours history'])}",
             f"bare: {_ms(lat['bare get_state'])}; history {_ms(lat['bare history'])}",
             _x([o["median"] / b["median"] for o, b in zip(lat["ours get_state"], lat["bare get_state"],
                                                           strict=True)]) + " (get_state)",
             "resuming reads the latest checkpoint; `graph.history` pages the full listing"),
    ]


def threads_rows(r: dict[str, Any]) -> list[str]:
    """Many threads in one process, and one step's peak memory."""
    speed = r["threads_per_s"]
    per = " / ".join(f"{v:.0f}" for v in speed["ours"])
    anchor = " / ".join(f"{v:.0f}" for v in speed["memory"])
    rss = r["one_step_rss_mb"]
    return [
        _row(f"{r['threads']:,} threads × {r['steps']} steps, one process, SQLite", f"{per} threads/s",
             f"InMemorySaver, graph compiled once: {anchor} threads/s", _x(r["ratio"]),
             "durable work per thread-step on one store"),
        _row("one `--once` step, peak RSS", f"{rss:.0f} MB" if rss is not None else "n/a", "", "", ""),
    ]


def workers_rows(r: dict[str, Any]) -> list[str]:
    """Queue workers (queue in PostgreSQL): concurrency in one process, processes, checkpoints
    in Redis, peak memory."""
    def speed(key: str) -> str:
        return " / ".join(f"{v:.1f}" for v in r["steps_per_s"][key])

    c, m = r["concurrency"], r["memory"]
    fake = f"fake model answering in {r['delay']} s"
    rows = [_row(f"one queue worker process, `--concurrency {c}` vs 1, {fake}",
                 f"{speed(f'c{c}')} steps/s", f"`--concurrency 1`: {speed('c1')} steps/s",
                 _x(r["x_concurrency"]), "steps waiting on the model overlap in one process")]
    rows += [_row(f"{n} worker processes × `--concurrency {c}`, {fake}", f"{speed(f'p{n}')} steps/s",
                  f"one process: {speed(f'c{c}')} steps/s", _x(r["x_processes"][str(n)]),
                  "processes add CPU, up to the cores they share") for n in r["processes"][1:]]
    if "x_redis" in r:
        rows.append(_row(f"one queue worker process × `--concurrency {c}`, checkpoints in Redis "
                         f"(queue in PostgreSQL), {fake}", f"{speed(f'redis{c}')} steps/s",
                         f"checkpoints in PostgreSQL: {speed(f'c{c}')} steps/s",
                         _x(r["x_redis"]), "the same queue; only the checkpoint database differs"))
    peaks = " / ".join(f"{mb:.0f}" for mb in m["vm_hwm_mb"])
    jobs = " / ".join(f"{j:,}" for j in m["jobs"])
    rows.append(_row(f"worker peak memory (VmHWM) after {jobs} jobs", f"{peaks} MB",
                     f"after {m['jobs'][0]:,} jobs", f"{m['ratio']:.2f} ×",
                     "one store per job slot, reused: memory stays flat"))
    return rows


def render(results: dict[str, Any], rss: dict[str, float | None], config: str,
           skipped: list[str] | None = None) -> str:
    """The whole table, its configuration line before it and the per-script memory after it.

    Args:
        results: Script name -> that script's JSON results (missing scripts are left out).
        rss: Script name -> peak RSS in MB of its largest process (None: unknown).
        config: The sentence stating how and where the figures were measured.
        skipped: Sentences naming rows not measured and why (printed after the table as they are).
    """
    lines = [config, "", _row("what", "ours", "anchor", "ratio", "what it means for you"),
             "|---|---|---|---|---|"]
    if "startup" in results:
        lines += startup_rows(results["startup"])
    if "step_cost" in results:
        lines += step_rows(results["step_cost"])
    if "storage" in results:
        for backend, points in results["storage"]["points"].items():
            lines += storage_rows(backend, points, results["storage"]["k"][backend])
    if "threads" in results:
        lines += threads_rows(results["threads"])
    if "workers" in results:
        lines += workers_rows(results["workers"])
    if "step_cost" in results:
        claim = results["step_cost"]["ratios"]["claim"]
        lines += ["", f"The claim checkpoint costs **{_x(claim)}** a step without it (same loop, "
                  f"median of {results['step_cost']['steps']} steps each, "
                  f"{pass_names(results['step_cost']['passes'])})."]
    if skipped:
        lines += ["", *skipped]
    known = {name: mb for name, mb in rss.items() if mb is not None}
    if known:
        lines += ["", "Peak RSS of each script's largest process: "
                  + ", ".join(f"`bench.{name}` {mb:.0f} MB" for name, mb in known.items()) + "."]
    return "\n".join(lines)
