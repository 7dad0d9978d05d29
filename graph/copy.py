"""Copy threads between databases (a SQLite file to PostgreSQL when one machine is outgrown).

  python -m graph.copy --from PATH_OR_URL --to PATH_OR_URL [--thread ID ...] [--json]

Copies every checkpoint (oldest first, with its pending writes), the ledger row (first,
so an interrupted copy leaves a thread that is refused, never one with a fresh budget),
the attempt log, write-approval decisions, tombstones and the request caps, through LangGraph's own
checkpointer API on both sides, so the copy is re-serialized with fresh checksums and a
copied thread resumes exactly where it stopped. Every source thread is loaded and
checked first; a thread that already exists at the target (checkpoints, ledger row or
tombstone) is refused (exit 4) and nothing is copied. It is a copy, not a move: the
source is left as it was, so switch every scheduler to the target afterwards. Exit 0,
2 usage, 4 refused.
"""

from __future__ import annotations

import json
import sys

from graph.api import Database
from graph.cli import Parser, emit, guard
from graph.settings import Settings, check_db_flag, check_thread_id

__all__ = [
    "main",
]


def main(argv: list[str] | None = None) -> int:
    """Copies the threads; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser("python -m graph.copy", __doc__)
    parser.add_argument("--from", dest="source", required=True, help="source SQLite file or URL")
    parser.add_argument("--to", dest="target", required=True, help="target SQLite file or URL")
    parser.add_argument("--thread", action="append", default=[], help="copy only this thread")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    as_json = "--json" in argv

    def body() -> int:
        args = parser.parse_args(argv)

        check_db_flag(args.source, "--from")
        check_db_flag(args.target, "--to")
        for thread_id in args.thread:
            check_thread_id(thread_id)
        with Database(Settings(db=args.source), source="flags") as src:
            src.check_copy(args.thread or None)  # a refused copy creates no target
            with Database(Settings(db=args.target), create=True, source="flags") as dst:
                copied = src.copy_to(dst, args.thread or None)
                pruned = [t for t in copied if dst.store.tombstones.get(t) is not None]
        shown = f"copied {len(copied) - len(pruned)} thread(s)" + (
            f" and {len(pruned)} tombstone(s) of pruned threads" if pruned else "")
        emit(json.dumps({"copied": copied, "tombstones": pruned, "exit_code": 0}) if as_json
             else shown)
        return 0

    return guard(body, as_json, copied=[], tombstones=[])

if __name__ == "__main__":
    sys.exit(main())
