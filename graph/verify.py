"""Check a whole checkpoint database: SQLite's full integrity check and every thread.

  python -m graph.verify [--db PATH_OR_URL] [--json]

Reads only. On SQLite it runs `PRAGMA integrity_check` (slow on large files, which is
why ordinary steps do only a bounded check), then reads every thread the way
`graph.run` does (checksums, strict decoding, schema, ledger cross-checks) and every
older checkpoint of its history, listing each problem instead of stopping at the first.
Exit 0 when everything is intact, 4 when anything is refused (each problem is listed),
2 for usage errors.
"""

from __future__ import annotations

import json
import sys

from graph.cli import Parser, emit, guard, report_error, resolve_db
from graph.errors import RefusedError
from graph.exitcodes import ErrorCode, ExitCode


def verify(db: str) -> list[str]:
    """Returns one line per problem found in database `db` (empty when intact).

    Raises:
        RefusedError: The file is missing or not a checkpoint database at all.
    """
    from graph.loading import check_stored_thread
    from graph.storage import integrity_problems, open_store

    problems = integrity_problems(db)
    if problems:
        return problems
    with open_store(db, create=False, read_only=True) as store:
        for thread_id in store.thread_ids():
            try:
                store.tombstones.get(thread_id)  # a tombstone graph.run would refuse to read
                check_stored_thread(store, store.graph, thread_id)
            except RefusedError as exc:
                problems.append(exc.message)
    return problems


def main(argv: list[str] | None = None) -> int:
    """Runs the check and prints the problems; returns the exit code."""
    parser = Parser("python -m graph.verify", __doc__)
    parser.add_db()
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    as_json = "--json" in (sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = parser.parse_args(argv)
        try:
            problems = verify(resolve_db(args.db))
        except RefusedError as exc:  # not a checkpoint database at all
            return report_error(exc, as_json, ok=False, problems=[exc.message])
        code = ExitCode.REFUSED if problems else ExitCode.OK
        if as_json:
            emit(json.dumps({"ok": not problems, "problems": problems,
                             "error": problems[0] if problems else None,
                             "error_code": ErrorCode.DAMAGED if problems else None,
                             "exit_code": int(code)}, ensure_ascii=False))
        else:
            emit("\n".join(problems) if problems else "ok: every thread reads back intact")
        return int(code)

    return guard(body, as_json, ok=False, problems=[])

if __name__ == "__main__":
    sys.exit(main())
