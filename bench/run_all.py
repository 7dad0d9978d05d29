"""Runs every benchmark, each in its own process, and prints their tables and the README's.

  python -m bench.run_all [--quick] [--only NAME,...] [--postgres URL] [--redis [URL]] [--skip-400]

Each script (`bench.startup`, `bench.step_cost`, `bench.storage`, `bench.threads`, and
`bench.workers` with `--postgres`; `--only` names some of them) runs as its own process,
so its peak memory (the `ru_maxrss` of its largest process, from `wait4`) is its own,
not the suite's. Every comparison inside a script alternates its variants in one loop
and runs twice (two passes). `--quick` is a smoke run, as the tests do, to show that
everything runs, not how fast: the smallest sizes, and one pass (`--passes 1`) where a
pass costs whole processes (`bench.startup`, `bench.workers`); the full run takes
storage to 400 steps unless `--skip-400`. At the end the README's
Performance table is printed in its Markdown format, ready to paste. Every temporary folder and every
`bench_*` database is removed; `bench_*` databases left by a killed run are dropped
first. This module imports nothing of the project, so its own memory stays small.

With `--postgres` and `--redis`, `bench.step_cost` and `bench.storage` measure ours on
all three backends in one run. `--redis` alone starts a private valkey-server
(`bench.redis_db.private_server`: a free port of 127.0.0.1, RedisJSON and RediSearch,
the append-only file fsynced on every write), stopped and its folder removed at the
end; `--redis URL` uses that server instead (each thread's keys deleted afterwards).
When no private server can start (valkey-server or the modules missing) the Redis rows
are skipped and the run says so, with the reason, before its tables and under the
README table. With both, `bench.workers` adds a worker whose checkpoints are in Redis.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from bench.common import cli_parser
from bench.readme_table import render
from bench.scratch import RUN_ENV, bench_databases, drop_leftover_databases, run_prefix, workdir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The folder holding `bench/` (and `tests/`, whose fakes the scripts use): on the
scripts' `PYTHONPATH`, whatever the working directory."""


SCRIPTS = ("startup", "step_cost", "storage", "threads", "workers")
"""Every script, in running order (`bench.workers` only with `--postgres`)."""


def plan(quick: bool, postgres: str | None, skip_400: bool,
         redis: str | None = None) -> dict[str, list[str]]:
    """Script name -> its arguments (before `--json`), in running order.

    With `quick`, the smallest sizes that still exercise every variant, and one pass
    where each pass starts processes (the others keep two: a second pass from scratch
    costs little there, and shows it starts from scratch).
    """
    steps = "1,2" if quick else "50,100,200" if skip_400 else "50,100,200,400"
    one_pass = ["--passes", "1"] if quick else []
    postgres_url = ["--postgres", postgres] if postgres else []
    servers = postgres_url + (["--redis", redis] if redis else [])
    scripts = {
        "startup": ["--repeat", "1" if quick else "7", *one_pass, *postgres_url],
        "step_cost": ["--steps", "2" if quick else "100", *servers],
        "storage": ["--steps", steps, "--repeat", "1" if quick else "5", *servers],
        "threads": ["--threads", "2" if quick else "1000", "--steps", "2"],
    }
    if postgres:
        scripts["workers"] = [*servers, *(["--quick"] if quick else []), *one_pass]
    return scripts


def run_script(name: str, args: list[str], json_path: str, log_dir: str) -> tuple[str, float]:
    """Runs `python -m bench.<name>` to the end; returns its stdout and peak RSS in MB.

    Raises:
        RuntimeError: The script failed (its stderr in the message).
    """
    out_path, err_path = os.path.join(log_dir, f"{name}.out"), os.path.join(log_dir, f"{name}.err")
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", f"bench.{name}", *args, "--json", json_path],
                                stdout=out, stderr=err, env={**os.environ, "PYTHONPATH": path})
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C: stop the script (its own `finally` cleans up)
            proc.terminate()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    with open(out_path) as out, open(err_path) as err:
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"bench.{name} exited {proc.returncode}:\n{stderr[-4000:]}")
    return stdout, usage.ru_maxrss / 1024  # kilobytes on Linux


def configuration(quick: bool, postgres: str | None, skip_400: bool, context_tokens: Any,
                  redis: str | None = None, only: list[str] | None = None) -> str:
    """The sentence before the README table: the command, the machine and the settings."""
    flags = (" --quick" if quick else "") + (f" --only {','.join(only)}" if only else "") \
        + (" --postgres URL" if postgres else "") \
        + ({None: "", PRIVATE: " --redis"}.get(redis, " --redis URL")) + (" --skip-400" if skip_400 else "")
    runs = ("(`--quick`: a smoke run at the smallest sizes, its figures mean nothing)" if quick
            else "and runs twice; a cell with two values gives pass 1 / pass 2")
    return (f"Measured with `python -m bench.run_all{flags}` on {platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}, in the default "
            f"configuration (`--context-tokens` {context_tokens}, `durability=\"sync\"`, the claim "
            f"checkpoint on). Each comparison alternates its variants in one loop {runs}. "
            "Medians; spreads are printed by the scripts."
            + (" Redis: a private valkey-server with RedisJSON and RediSearch, its append-only file "
               "fsynced on every write (`appendfsync always`)." if redis == PRIVATE else ""))


def run(quick: bool, postgres: str | None, skip_400: bool, redis: str | None = None,
        only: list[str] | None = None) -> dict[str, Any]:
    """Runs the scripts (only those named in `only`, when given), printing each one's tables.

    Returns:
        `{"results": name -> its JSON, "rss": name -> its peak RSS in MB}`.
    """
    results: dict[str, Any] = {}
    rss: dict[str, float | None] = {}
    with workdir("run-all") as work:
        for name, args in plan(quick, postgres, skip_400, redis).items():
            if only and name not in only:
                continue
            json_path = str(work / f"{name}.json")
            stdout, rss[name] = run_script(name, args, json_path, str(work))
            with open(json_path) as fh:
                results[name] = json.load(fh)
            print(stdout.rstrip())
            print(f"\npeak RSS of bench.{name} (its largest process): {rss[name]:.0f} MB\n", flush=True)
    return {"results": results, "rss": rss}


PRIVATE = "private"
"""`--redis` without a URL: start a private server."""


@contextmanager
def redis_server(redis: str | None) -> Iterator[tuple[str | None, str | None]]:
    """`(URL to measure, why Redis is skipped)`: the given URL, a private server's, or none.

    A private server is stopped and its folder removed on exit.
    """
    if redis is None:
        yield None, None
        return
    if redis != PRIVATE:
        yield redis, None
        return
    from bench.redis_db import private_server, unavailable

    why = unavailable()
    with ExitStack() as stack:
        if why is None:
            try:
                url = stack.enter_context(private_server())
            except RuntimeError as exc:  # from starting only: the run's own errors pass through
                why = f"the private valkey-server did not start: {exc}"
            else:
                print(f"Redis: a private valkey-server at {url} (append-only file, fsync always)\n",
                      flush=True)
                yield url, None
                return
    yield None, f"Redis rows skipped: {why}."


def main(argv: list[str] | None = None) -> None:
    """Runs everything and prints the tables, then the README table."""
    parser = cli_parser(__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="the smallest sizes (a smoke run: the figures mean nothing)")
    parser.add_argument("--only", type=lambda text: text.split(","), metavar="NAME,...",
                        help=f"run only these scripts (of {', '.join(SCRIPTS)})")
    parser.add_argument("--postgres", help="also measure PostgreSQL and queue workers (an admin URL)")
    parser.add_argument("--redis", nargs="?", const=PRIVATE, metavar="URL",
                        help="also measure Redis: on a private valkey-server started for the run, "
                        "or on the server at URL")
    parser.add_argument("--skip-400", action="store_true", help="storage up to 200 steps only "
                        "(bare LangGraph at 400 steps takes minutes)")
    args = parser.parse_args(argv)
    if args.only and (unknown := set(args.only) - set(SCRIPTS)):
        parser.error(f"--only: no script named {', '.join(sorted(unknown))}")
    os.environ.setdefault(RUN_ENV, uuid.uuid4().hex[:8])  # names this run's databases
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n")
    if args.postgres and (dropped := drop_leftover_databases(args.postgres)):
        print(f"dropped databases left by an earlier run: {', '.join(dropped)}\n")
    skipped = []
    with redis_server(args.redis) as (redis, why):
        if why:
            print(why + "\n", flush=True)
            print(why, file=sys.stderr)
            skipped.append(why)
        if args.redis and not args.postgres:
            from bench.workers import REDIS_NEEDS_POSTGRES

            skipped.append(f"Not measured: {REDIS_NEEDS_POSTGRES}")
            print(skipped[-1] + "\n", flush=True)
        try:
            done = run(args.quick, args.postgres, args.skip_400, redis, args.only)
        finally:
            if args.postgres and (left := bench_databases(args.postgres, run_prefix())):
                print(f"warning: bench databases left behind: {', '.join(left)}", file=sys.stderr)
    print("README Performance table (paste as it is):\n")
    context_tokens = done["results"].get("step_cost", {}).get("context_tokens", "default")
    config = configuration(args.quick, args.postgres, args.skip_400, context_tokens, redis and args.redis,
                           args.only)
    print(render(done["results"], done["rss"], config, skipped))


if __name__ == "__main__":
    main()
