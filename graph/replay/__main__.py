"""Export a thread as a recording, to replay it offline in tests (README: "Replay tests").

  python -m graph.replay export --thread ID [--db PATH_OR_URL] -o FILE [--json]

`-o -` writes the recording to standard output (the summary line, or the `--json`
object, then goes to standard error).

The recording holds each request as it was sent and each reply as it came back (with
its token usage), rebuilt from the thread's attempt log and checked against its
latest checkpoint, plus the thread's settings and the review decisions on its write
calls. It never holds the API key or any header but Content-Type. The pytest fixture
`mandapi_replay` (installed with the package) runs the current graph against it with
no network and fails with a diff when a request differs.

Why a vcrpy cassette, and what is ours: vcrpy (and pytest-recording on top of it) is
how Python tests record and replay httpx traffic, so a recording is a vcrpy cassette
and vcrpy plays it back (`graph.replay.session`). vcrpy cannot express the rest, which
lives in the cassette's `metadata` (`graph.replay.format`): a recording is exported from
a database after the fact, not captured from the wire; a request that got no answer
(a timeout) has no response to record; the thread's settings and the people's
decisions drive the replay; and playback must be strictly in order, with leftovers,
a run-out and the ledger checked. pytest-recording's `@pytest.mark.vcr` adds cassette
paths per test and record-mode options, which a replay of a named file does not use.

exit codes:
  0 the recording was written
  2 usage: a bad flag; FILE's folder missing or not writable; or FILE is a folder,
    device, FIFO, socket or symbolic link (only a regular file is replaced)
  4 the database or thread is missing or refused, or the thread cannot be replayed
    (`not_replayable`: its attempt log does not reproduce its requests)
"""

from __future__ import annotations

import json
import sys

from graph.api import Database
from graph.cli import Parser, emit, exit_now, guard, resolve_db
from graph.output_file import check_output_path
from graph.replay.export import export_thread
from graph.replay.format import META_KEY, serialize, write_recording
from graph.settings import check_thread_id, resolve_settings
from graph.text import silence

__all__ = [
    "export",
    "main",
]


def _parser() -> Parser:
    parser = Parser("python -m graph.replay", __doc__)
    parser.add_argument("command", choices=["export"], help="what to do (export a thread)")
    parser.add_argument("--thread", required=True, help="the thread to export")
    parser.add_db()
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the recording to write (replaced if it exists); - for stdout")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def export(db: str, thread_id: str, output: str) -> dict[str, object]:
    """Writes the recording of `thread_id` in database `db` to `output` (`-`: stdout).

    The requests are recorded as sent to `$MANDAPI_BASE_URL` (else MandAPI's default).

    Returns:
        `thread_id`, `output`, `exchanges` (requests recorded) and `status` (the
        thread's, `awaiting_approval` included).

    Raises:
        RefusedError: The thread is missing, refused, or `not_replayable`.
        UsageError: An invalid environment setting, or `output` cannot be written or is
            not a regular file (`graph.output_file.check_output_path`).
    """
    check_thread_id(thread_id)
    if output != "-":
        check_output_path(output, "-o")  # before reading the database: nothing is done for nothing
    settings = resolve_settings(db=db, live=False, timeout_s=None)
    uri = settings.base_url.rstrip("/") + "/chat/completions"
    with Database(settings, read_only=True, source="flags") as database:
        cassette = export_thread(database.store, thread_id, uri)
    if output == "-":
        _write_stdout(serialize(cassette))
    else:
        write_recording(output, cassette)
    meta = cassette["metadata"][META_KEY]
    return {"thread_id": thread_id, "output": output, "exchanges": len(cassette["interactions"]),
            "status": meta["outcome"]["status"]}


def _write_stdout(text: str) -> None:
    """Writes the recording as is (no escapes: it is JSON); a closed pipe is silenced."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence(sys.stdout)


def main(argv: list[str] | None = None) -> int:
    """Runs the command and prints what it wrote; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    if "-h" in argv or "--help" in argv:
        emit(_parser().format_help().rstrip("\n"))
        return 0

    def body() -> int:
        args = _parser().parse_args(argv)
        done = export(resolve_db(args.db), args.thread, args.output)
        emit(json.dumps(done, ensure_ascii=False, sort_keys=True) if as_json else
             f"thread {done['thread_id']}: {done['exchanges']} exchange(s) written to "
             f"{'stdout' if args.output == '-' else done['output']} (status {done['status']})",
             sys.stderr if args.output == "-" else None)
        return 0

    return guard(body, as_json, thread_id=None, output=None)


if __name__ == "__main__":
    exit_now(main())
