"""Check a whole checkpoint database: SQLite's full integrity check and every thread.

  python -m graph.verify [--db PATH_OR_URL] [--json]

Reads only. On SQLite it runs `PRAGMA integrity_check` (slow on large files, which is
why ordinary steps do only a bounded check), then reads every thread the way
`graph.run` does (checksums, strict decoding, schema, ledger cross-checks) and every
older checkpoint of its history, listing each problem instead of stopping at the first.
Exit 0 when everything is intact, 4 when anything is refused (each problem is listed;
error_code studio_db for the database of Studio's ledger, whose threads have their
checkpoints in langgraph dev's own storage), 2 for usage errors.
"""

from __future__ import annotations

import json
import sys

from graph.api import verify_database
from graph.cli import Parser, emit, guard, report_error, resolve_db
from graph.errors import ErrorCode, ExitCode, RefusedError, error_line

__all__ = [
    "main",
    "verify",
]


def verify(db: str) -> list[str]:
    """Returns one line per problem found in database `db` (empty when intact).

    `graph.api.verify_database(db).problems`, kept for callers of this module.

    Raises:
        RefusedError: The file is missing or not a checkpoint database at all.
    """
    return verify_database(db, source="flags").problems


def main(argv: list[str] | None = None) -> int:
    """Runs the check and prints the problems; returns the exit code."""
    parser = Parser("python -m graph.verify", __doc__)
    parser.add_db()
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    as_json = "--json" in (sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = parser.parse_args(argv)

        db = resolve_db(args.db)
        try:
            checked = verify_database(db, source="flags")
        except RefusedError as exc:  # not a checkpoint database at all (Studio's ledger too)
            return report_error(exc, as_json, ok=False, problems=[exc.message],
                                threads=getattr(exc, "threads", 0), checkpoints=0,
                                pruned_threads=0)
        problems = checked.problems
        code = ExitCode.REFUSED if problems else ExitCode.OK
        if as_json:
            emit(json.dumps({"ok": not problems, "problems": problems,
                             "threads": checked.threads, "checkpoints": checked.checkpoints,
                             "pruned_threads": checked.pruned,
                             "error": problems[0] if problems else None,
                             "error_code": ErrorCode.DAMAGED if problems else None,
                             "exit_code": int(code)}, ensure_ascii=False))
            return int(code)
        counted = f"{checked.threads} thread(s) and {checked.checkpoints} checkpoint(s)"
        pruned = (f"; {checked.pruned} pruned thread(s) remembered by their tombstones"
                  if checked.pruned else "")
        if not problems:
            emit(f"ok: checked {counted}{pruned}; every thread reads back intact")
            return int(code)
        emit("\n".join(problems))
        emit(error_line(ErrorCode.DAMAGED, f"{len(problems)} problem(s) found ({counted} "
                        f"checked{pruned}); the first: {problems[0]}"), sys.stderr)
        return int(code)

    return guard(body, as_json, ok=False, problems=[], threads=0, checkpoints=0,
                 pruned_threads=0)

if __name__ == "__main__":
    sys.exit(main())
