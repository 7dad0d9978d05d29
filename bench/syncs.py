"""Durable writes per step, counted as `fsync`/`fdatasync` calls under strace.

  python -m bench.syncs [--steps N]

A child process steps one thread (SQLite, default configuration, the scripted
tool-loop model) while `strace -f` records every `fsync` and `fdatasync` with the file
it synced. The thread's creation is left out: the child syncs a marker file before and
after the timed steps, and only the calls between the markers count. In WAL mode with
`synchronous=FULL` every commit syncs the `-wal` once (plus once more for a new WAL
header after the WAL was reset), and a WAL checkpoint syncs the database file, so the
calls are split by file: `-wal` (commits), database file (checkpoints), other.

This replaces counting statements with SQLite's trace callback, which reports an
UPDATE twice when a trigger fires.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import cli_parser, table
from bench.scratch import workdir

VARIANTS = {
    "ours": "ours: graph.step.advance, SQLite",
    "bare": "bare LangGraph: SqliteSaver, async durability, no ledger",
}
_SYNC = re.compile(r"\b(fsync|fdatasync)\(\d+<([^>]*)>\)\s*=\s*0")
_WRITE = re.compile(r"\bpwrite64\(\d+<([^>]*)>, .*, \d+, (\d+)\)\s*=\s*\d+$")
MARK = "sync-marker"


def _mark(work: Path) -> None:
    import os

    with open(work / MARK, "w") as fh:
        os.fsync(fh.fileno())


def child(variant: str, steps: int, work: Path) -> None:
    """Creates a thread, then (between two marker syncs) advances it `steps` times."""
    from bench.project import BareThreads, OurStore, ToolLoopModel, sqlite_saver

    with ExitStack() as stack:
        if variant == "ours":
            thread: Any = OurStore(str(work / "ours.sqlite"), ToolLoopModel())
            stack.callback(thread.close)
        else:
            saver = stack.enter_context(sqlite_saver(str(work / "bare.sqlite")))
            thread = BareThreads(saver, ToolLoopModel(), durability="async")
        thread.step()
        _mark(work)
        for _ in range(steps):
            thread.step()
        _mark(work)


def parse(log: str) -> dict[str, int]:
    """Counts WAL commits and sync calls between the first two marker syncs.

    A `-wal` sync after frames were written is a commit; one after only the WAL header
    was written (the WAL was reset) is a header sync; one with nothing written since the
    last sync is a checkpoint's. Returns counts under `commits`, `wal_header`,
    `wal_checkpoint`, `db` (database file syncs), `other` and `syncs` (all calls).
    """
    counts = dict.fromkeys(("commits", "wal_header", "wal_checkpoint", "db", "other", "syncs"), 0)
    inside, frames, header = False, False, False
    for line in log.splitlines():
        if written := _WRITE.search(line):
            if inside and written.group(1).endswith("-wal"):
                header, frames = (True, frames) if written.group(2) == "0" else (header, True)
            continue
        if not (synced := _SYNC.search(line)):
            continue
        path = synced.group(2)
        if path.endswith(MARK):
            if inside:
                break
            inside = True
            continue
        if not inside:
            continue
        counts["syncs"] += 1
        if path.endswith("-wal"):
            counts["commits" if frames else "wal_header" if header else "wal_checkpoint"] += 1
            frames = header = False
        else:
            counts["db" if path.endswith(".sqlite") else "other"] += 1
    return counts


def count(variant: str, steps: int) -> dict[str, float] | None:
    """Per-step counts of `variant` (the keys of `parse`).

    Returns None where strace is missing or may not trace (no ptrace permission).

    Raises:
        subprocess.CalledProcessError: The traced child itself failed.
    """
    strace = shutil.which("strace")
    if strace is None:
        return None
    with workdir("syncs") as work:
        log = work / "strace.log"
        # A seccomp filter stops the child only at the traced calls, not at each of its
        # imports' system calls (strace >= 5.3); an older strace refuses the flag and
        # traces every call instead.
        for seccomp in (["--seccomp-bpf"], []):
            done = subprocess.run([strace, *seccomp, "-f", "-qq", "-y", "-s", "0", "-e",
                                   "trace=fsync,fdatasync,pwrite64", "-o", str(log), sys.executable,
                                   "-m", "bench.syncs", "--child", variant, "--steps", str(steps),
                                   "--work", str(work)], capture_output=True, text=True)
            text = log.read_text() if log.exists() else ""
            if MARK in text:
                break
    if MARK not in text:  # strace could not start or attach: nothing was traced
        return None
    done.check_returncode()
    return {kind: n / steps for kind, n in parse(text).items()}


def run(steps: int) -> tuple[str, dict[str, Any]]:
    """Counts both variants; returns the report and `{variant: per-step counts or None}`."""
    results = {variant: count(variant, steps) for variant in VARIANTS}
    rows = [[label, *(f"{c[k]:.1f}" if c else "n/a (no strace)"
                      for k in ("commits", "syncs", "wal_header", "wal_checkpoint", "db"))]
            for label, c in ((label, results[v]) for v, label in VARIANTS.items())]
    title = f"Durable writes per step (strace, {steps} steps after the thread's creation)"
    header = ["what", "commits", "fsync+fdatasync", "of which: WAL header", "WAL checkpoint",
              "database file"]
    return table(title, header, rows), results


def main(argv: list[str] | None = None) -> None:
    """Prints the table (or, with `--child`, runs one variant under the parent's strace)."""
    parser = cli_parser(__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.steps, Path(args.work))
    else:
        print(run(args.steps)[0])


if __name__ == "__main__":
    main()
