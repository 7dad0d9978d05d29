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

from graph.cli import Parser, emit, guard
from graph.database import Store
from graph.errors import RefusedError
from graph.exitcodes import ErrorCode


def _exists(store: Store, thread_id: str) -> bool:
    return (store.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}}) is not None
            or store.ledger.read(thread_id) is not None
            or store.tombstones.get(thread_id) is not None)


def _all_threads(store: Store) -> list[str]:
    """Every thread id with a checkpoint, a ledger row or a tombstone.

    A thread whose ledger row is gone is checked (and refused), never skipped.
    """
    return store.thread_ids()


def copy_threads(src: Store, dst: Store, thread_ids: list[str] | None = None) -> list[str]:
    """Copies threads from store `src` to store `dst` (see module doc).

    Returns:
        The copied thread ids, sorted.

    Raises:
        RefusedError: A thread exists at the target (`exists`), is missing at the source
            (`no_such_thread`), or fails its checks at the source.
    """
    from graph.loading import check_stored_thread

    ids = sorted(thread_ids) if thread_ids else _all_threads(src)
    for thread_id in ids:  # the whole source thread is checked before anything is written
        tombstone = src.tombstones.get(thread_id)
        if check_stored_thread(src, src.graph, thread_id) is None and tombstone is None:
            raise RefusedError(f"no such thread {thread_id!r} in {src.location}",
                               error_code=ErrorCode.NO_SUCH_THREAD)
        if _exists(dst, thread_id):
            raise RefusedError(f"thread {thread_id!r} already exists in {dst.location}; "
                               "nothing was copied", error_code=ErrorCode.EXISTS)
    _copy_caps(src, dst)
    for thread_id in ids:
        dst.import_thread(src.export_thread(thread_id))
    return ids


def _copy_caps(src: Store, dst: Store) -> None:
    """Copies request caps the target lacks; a cap present on both must agree."""
    for cap_id, (requests, maximum) in src.ledger.caps().items():  # typed: refuses damage
        existing = dst.ledger.cap(cap_id)
        if existing is None:
            dst.ledger.insert_cap(cap_id, requests, maximum)
        elif existing[1] != maximum or existing[0] < requests:
            raise RefusedError(f"request cap {cap_id!r} differs in {dst.location}; nothing "
                               "more was copied", error_code=ErrorCode.EXISTS)


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
        from graph.settings import check_db_flag
        from graph.spec import check_thread_id
        from graph.storage import open_store

        check_db_flag(args.source, "--from")
        check_db_flag(args.target, "--to")
        for thread_id in args.thread:
            check_thread_id(thread_id)
        with open_store(args.source, create=False) as src, \
                open_store(args.target, create=True) as dst:
            copied = copy_threads(src, dst, list(dict.fromkeys(args.thread)) or None)
        emit(json.dumps({"copied": copied, "exit_code": 0}) if as_json
             else f"copied {len(copied)} thread(s)")
        return 0

    return guard(body, as_json, copied=[])

if __name__ == "__main__":
    sys.exit(main())
