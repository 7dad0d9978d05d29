"""Delete finished threads after an age; threads that can continue are never deleted.

  python -m graph.prune [--db PATH_OR_URL] [--completed 24h] [--failed 7d] [--dry-run] [--json]

`done` threads older than --completed and `exhausted` or `cancelled` threads older
than --failed (measured from their last update) are deleted with their ledger rows
and attempt log, leaving a tombstone: a later `graph.run` on that thread id is
refused (exit 4, `pruned`) unless it passes --restart-pruned. Every other thread is
trimmed to its checkpoint window (--keep-checkpoints of graph.run). Ages: 90s, 30m,
24h, 7d (0s selects every finished thread). Exit 0, 2 for usage errors, 4 for a refused
database.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from graph.api import Database
from graph.cli import Parser, emit, guard, resolve_db
from graph.settings import Settings
from graph.store.ages import parse_age

if TYPE_CHECKING:
    from graph.threads.retention import PruneReport

__all__ = [
    "main",
]


def main(argv: list[str] | None = None) -> int:
    """Selects and (unless --dry-run) deletes threads; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser("python -m graph.prune", __doc__)
    parser.add_db()
    parser.add_argument("--completed", default="24h", help="age for done threads (default 24h)")
    parser.add_argument("--failed", default="7d",
                        help="age for exhausted and cancelled threads (default 7d)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    as_json = "--json" in argv

    def body() -> int:
        args = parser.parse_args(argv)

        completed, failed = parse_age(args.completed), parse_age(args.failed)
        with Database(Settings(db=resolve_db(args.db)), source="flags") as db:
            report = db.prune_report(completed=completed, failed=failed, dry_run=args.dry_run)
        _print_report(report, as_json)
        return 0

    return guard(body, as_json)


def _print_report(report: PruneReport, as_json: bool) -> None:
    if as_json:
        emit(json.dumps({**report.to_dict(), "exit_code": 0}, ensure_ascii=False))
    elif report.dry_run:
        for c in report.candidates:
            emit(f"would prune {c.thread_id} ({c.status}, last update {c.updated_at})")
        emit(f"{len(report.candidates)} thread(s) would be pruned")
    else:
        candidates = {c.thread_id: c for c in report.candidates}
        for thread_id in report.pruned:
            c = candidates[thread_id]
            emit(f"pruned {thread_id} ({c.status}, last update {c.updated_at}): its checkpoints, "
                 "ledger row and attempt log; a tombstone keeps its id")
        emit(f"pruned {len(report.pruned)} thread(s), trimmed {report.trimmed} older "
             f"checkpoint(s) of the other threads, freed {report.freed_bytes} bytes")
    for note in report.skipped:
        emit(note, sys.stderr)

if __name__ == "__main__":
    sys.exit(main())
