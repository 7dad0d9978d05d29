"""Advance a mandapi-resume thread: at most one model request per graph invocation.

  python -m graph.run --thread task_abc --task "How long does shipping take?" --once
  python -m graph.run --thread task_abc --once

The first call creates the thread in the checkpoint database (default
./checkpoints.sqlite, or $GRAPH_DB, or --db) and asks the model once; later calls
resume it from its checkpoint. Without --once it keeps stepping until the task is
done, the budget is spent or a request fails. Real MandAPI requests need --live with
MANDAPI_API_KEY (and a model: --model or MANDAPI_MODEL_ID); the default model is the
offline demo. Also installed as `mandapi-resume run` (see `mandapi-resume --help`).

exit codes:
  0 the step ran or the task is done     4 stored data refused (identity, missing, ...)
  1 unexpected error (a bug)              5 thread busy in another process
  2 usage, configuration or permission    6 the model request failed, or the database
  3 budget exhausted, or a model error      connection was lost (counted; run again)
    no rerun can fix stopped the thread   7 awaiting human approval
  130 interrupted by SIGINT/SIGTERM (a counted attempt stays counted)
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from graph.cli import Finished, Parser, emit, exit_now, resolve_db, seconds, whole_number
from graph.errors import (
    ErrorCode,
    ExitCode,
    RunError,
    UsageError,
    error_line,
    missing_dependency,
)
from graph.outcome import Outcome
from graph.settings import (
    InvalidThreadId,
    Settings,
    ThreadSpec,
    check_paid,
    check_thread_id,
    resolve_settings,
)
from graph.step.tracing import flush_traces, watch_uploads
from graph.store import creates_file
from graph.store.failures import known_error
from graph.store.poll import quick_answer
from nodes.demo_model import DEMO_MODEL_ID

if TYPE_CHECKING:
    from graph.step.advance import StepRequest

__all__ = [
    "INTERRUPTED",
    "interrupted_outcome",
    "main",
    "run",
]


INTERRUPTED = "interrupted; any counted attempt stays counted"


def _args(argv: list[str]) -> tuple[str | None, str | None]:
    """`--thread` (checked) and `--db` of `argv`; None for what is missing or invalid."""
    parser = Parser("run", None)  # its parsing keeps `--thread=--`
    parser.add_argument("--thread")
    parser.add_argument("--db")
    known, _ = parser.parse_known_args(argv)
    if known.thread is None:
        return None, known.db
    return check_thread_id(known.thread), known.db


def _fill(outcome: Outcome, db_flag: str | None) -> None:
    """Fills `outcome` from the thread's stored state and ledger (read-only)."""
    from graph.api import Database  # noqa: PLC0415 - LangGraph: only once the quick answer declined (tests/test_poll.py)
    from graph.checkpoints.load import graph_of, load_thread  # noqa: PLC0415 - LangGraph: only once the quick answer declined (tests/test_poll.py)

    thread_id = outcome.thread_id
    assert thread_id is not None
    with Database(Settings(db=resolve_db(db_flag)), read_only=True, source="flags") as db:
        entry = db.store.ledger.read(thread_id)
        loaded = load_thread(graph_of(db.store), thread_id, db.location)
        figures = db.store.figures(thread_id, entry=entry) if entry is not None else None
    if loaded is not None and figures is not None:
        state = Outcome.from_state(thread_id, loaded.values, loaded.snapshot.next, figures)
        for name in ("status", "attempts", "max_attempts", "model", "answer", "partial_answer",
                     "stop_reason", "usage", "max_tokens", "next_nodes"):
            setattr(outcome, name, getattr(state, name))
    if entry is not None:
        outcome.attempts = entry.attempts
        outcome.max_attempts = entry.max_attempts


def interrupted_outcome(argv: list[str], thread_id: str | None) -> Outcome:
    """The exit-130 outcome of an interrupted `graph.run`, with the thread as it stands.

    Args:
        argv: The command's arguments (for `--thread` and `--db`).
        thread_id: The `--thread` value as given, reported even when it is invalid.

    Returns:
        An outcome with exit code 130 and `error_code` `interrupted`. When the thread
        can be read, `status`, `attempts` (the ledger's count), `max_attempts`,
        `model` and `usage` are filled; when it cannot (or another signal arrives
        while reading), they stay null and `error` says why.
    """
    outcome = Outcome(thread_id, ExitCode.INTERRUPTED, error=INTERRUPTED,
                      error_code=ErrorCode.INTERRUPTED)
    previous = signal.signal(signal.SIGTERM, _stop_reading)
    try:
        checked, db_flag = _args(argv)
        if checked is not None:
            _fill(outcome, db_flag)
    except (Exception, KeyboardInterrupt) as exc:  # the report must still come out
        why = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        outcome.error = f"{INTERRUPTED}; the thread could not be read afterwards ({why})"
    finally:
        signal.signal(signal.SIGTERM, previous)
    return outcome


def _stop_reading(signum: int, frame: Any) -> None:
    """SIGTERM while reading the report stops the read like Ctrl-C does."""
    raise KeyboardInterrupt


def _parser() -> Parser:
    parser = Parser("python -m graph.run", __doc__)
    parser.add_argument("--thread", required=True, help="thread id (1-128 of A-Z a-z 0-9 . _ : -)")
    parser.add_argument("--task", help="task text; creates the thread, must match on resume")
    parser.add_argument("--once", action="store_true", help="one graph invocation, then stop")
    parser.add_db()
    parser.add_argument("--live", action="store_true", help="allow real, paid MandAPI requests")
    parser.add_argument("--model", help="model id for a new thread; must match on resume")
    parser.add_argument("--timeout", type=seconds, metavar="SECONDS",
                        help="MandAPI request timeout (default: $MANDAPI_TIMEOUT, else 60)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.add_argument("--workspace", metavar="DIR",
                        help="read-only folder the model may list, read and search (fixed at creation)")
    parser.add_argument("--max-attempts", type=whole_number, metavar="N",
                        help="model requests allowed for a new thread (default 4; fixed at creation)")
    parser.add_argument("--max-tokens", type=whole_number, metavar="N",
                        help="stop before a request once the thread used N tokens (fixed at creation)")
    parser.add_argument("--context-tokens", type=whole_number, metavar="N",
                        help="context limit per request, estimated tokens (default 16000; fixed at "
                             "creation); older material is compacted")
    parser.add_argument("--keep-checkpoints", type=_keep, metavar="N|all",
                        help="checkpoints the thread keeps, older ones deleted after each step "
                             "(default 10; 'all' keeps LangGraph's full history; fixed at "
                             "creation)")
    parser.add_argument("--allow-writes", metavar="DIR",
                        help="offer write tools confined to DIR, each applied only after a person "
                             "approves it (fixed at creation)")
    parser.add_argument("--approve", action="append", default=[], metavar="CALL_ID",
                        help="approve a pending write call (repeatable)")
    parser.add_argument("--reject", action="append", default=[], metavar="CALL_ID",
                        help="reject a pending write call (repeatable)")
    parser.add_argument("--reason", help="why the --reject calls were rejected (told to the model)")
    parser.add_argument("--cancel", action="store_true",
                        help="mark the thread cancelled: no request is ever made for it again")
    parser.add_argument("--reopen", action="store_true",
                        help="put a thread stopped by a model error (model_not_found, "
                             "invalid_request, content_filter) back to ready, its attempts "
                             "still counted; sends nothing")
    parser.add_argument("--restart-pruned", action="store_true",
                        help="start a pruned thread anew, with a fresh budget (needs --task)")
    parser.add_trace()
    return parser


def _keep(text: str) -> int | str:
    """`--keep-checkpoints`: `all`, or a whole number (its bounds are `ThreadSpec`'s)."""
    return text if text == "all" else whole_number(text)


_keep.__name__ = "number or 'all'"


class _Interrupted(BaseException):
    pass


def _on_sigterm(signum: int, frame: Any) -> NoReturn:
    raise _Interrupted()


def run(argv: list[str] | None = None, **step_kwargs: Any) -> Outcome:
    """Parses `argv` and advances the thread; the whole command except printing.

    Args:
        argv: Command-line arguments (without the program name).
        **step_kwargs: Passed to `graph.api.Database` and `graph.step.advance` (tests
            inject `model_factory`).

    Returns:
        The outcome. Known failures come back as outcomes with their exit code;
        unexpected exceptions propagate.
    """
    thread_id = None
    try:
        parser = _parser()
        args = parser.parse_args(argv)

        try:
            spec = _spec(args)  # the one check of --thread (first) and of every thread flag
        except InvalidThreadId:
            raise
        except UsageError:
            thread_id = args.thread  # checked first and valid: the refusal names its thread
            raise
        thread_id = spec.thread_id
        quick, settings = _quick_answer(parser, args, thread_id)
        if quick is not None:
            return quick
        request = _request(args, spec)
        settings = settings or _settings(args)  # resolved once: the quick path's, if it ran
        from graph.api import Database  # noqa: PLC0415 - LangGraph: only once the quick answer declined (tests/test_poll.py)

        with Database(settings, create=args.task is not None and not args.cancel,
                      model_factory=step_kwargs.pop("model_factory", None),
                      source="flags") as db:
            return db.advance(request, **step_kwargs)
    except RunError as exc:
        return Outcome.from_error(thread_id, exc)
    except Exception as exc:
        known = known_error(exc)
        if known is None:
            raise
        return Outcome.from_error(thread_id, known)


_QUICK_FLAGS = frozenset({"thread", "once", "json", "db", "timeout"})
"""The flags a finished, pruned or busy thread's answer does not depend on."""


def _quick_answer(parser: Parser, args: argparse.Namespace, thread_id: str
                  ) -> tuple[Outcome | None, Settings | None]:
    """The answer of `graph.store.poll` (no LangGraph import), or None for the full path.

    Only when every other flag is at its default: a task, model, limit, folder,
    `--live`, `--trace`, `--cancel`, `--reopen` or a decision must be checked against the thread;
    and not for a `--db` URL holding a password, which the full path warns about.

    Returns:
        The answer (None: take the full path) and the settings it resolved: with every
        other flag at its default they are exactly what `_settings` would resolve, so
        the full path reuses them (None when not resolved here).
    """
    if any(value != parser.get_default(name) for name, value in vars(args).items()
           if name not in _QUICK_FLAGS):
        return None, None
    if args.db and "://" in args.db and _has_password(args.db):
        return None, None

    try:
        settings = resolve_settings(db=args.db, live=False, timeout_s=args.timeout)
    except UsageError:
        return None, None  # the full path reports it
    return quick_answer(settings.db, thread_id), settings


def _spec(args: argparse.Namespace) -> ThreadSpec:
    """The thread's settings from the flags, each checked once (`graph.settings.ThreadSpec`).

    Raises:
        InvalidThreadId: `--thread` is not a valid thread id (checked first).
        UsageError: Another invalid setting.
    """
    return ThreadSpec(thread_id=args.thread, task=args.task, model=args.model,
                      max_attempts=args.max_attempts, max_tokens=args.max_tokens,
                      context_tokens=args.context_tokens, workspace=args.workspace,
                      allow_writes=args.allow_writes, keep_checkpoints=args.keep_checkpoints,
                      source="flags")


def _request(args: argparse.Namespace, spec: ThreadSpec) -> StepRequest:
    """The step request of the parsed flags: the thread's checked spec and the mode.

    Raises:
        UsageError: Flags that do not go together.
    """
    from graph.step.advance import StepRequest  # noqa: PLC0415 - LangGraph: only once the quick answer declined (tests/test_poll.py)

    if args.reason is not None and not args.reject:
        raise UsageError("--reason explains a --reject: give the calls it rejects")
    if args.cancel and (args.approve or args.reject or args.restart_pruned):
        raise UsageError("--cancel stops the thread; it cannot be combined with --approve, "
                         "--reject or --restart-pruned")
    if args.reopen and (args.cancel or args.approve or args.reject or args.restart_pruned):
        raise UsageError("--reopen puts a stopped thread back to ready; it cannot be combined "
                         "with --cancel, --approve, --reject or --restart-pruned")
    return StepRequest(spec, once=args.once, cancel=args.cancel, reopen=args.reopen,
                       restart_pruned=args.restart_pruned, approve=tuple(args.approve),
                       reject=tuple(args.reject), reason=args.reason)


def _settings(args: argparse.Namespace) -> Settings:
    """The invocation's settings; a paid model for a certainly new database is refused.

    Raises:
        UsageError: See `graph.settings.resolve_settings`; a paid `--model` without
            `--live` when the SQLite file does not exist (before it is created).
    """
    if args.db and "://" in args.db and _has_password(args.db):
        print("warning: a password in --db is visible in the process list; "
              "put the URL in GRAPH_DB (PostgreSQL: or the password in PGPASSWORD or ~/.pgpass)",
              file=sys.stderr)
    settings = resolve_settings(db=args.db, live=args.live, timeout_s=args.timeout,
                                trace=args.trace)
    if args.model not in (None, DEMO_MODEL_ID) and creates_file(settings.db):
        check_paid(args.model, args.live)  # certainly a new thread: before the file exists
    return settings


def _has_password(url: str) -> bool:
    try:
        return bool(urlsplit(url).password)
    except ValueError:  # unparsable: refused with its reason when the database is opened
        return False


def _thread_of(argv: list[str]) -> str | None:
    """The `--thread` value of `argv`, for reporting failures that happen after parsing."""
    for index, arg in enumerate(argv):
        if arg == "--thread" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--thread="):
            return arg.split("=", 1)[1]
    return None


def main(argv: list[str] | None = None) -> int:
    """Runs the command and prints its outcome; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    if "-h" in argv or "--help" in argv:
        emit(_parser().format_help().rstrip("\n"))
        return 0
    if "--trace" in argv:  # LangSmith's upload failures: one line at the end (graph.step.tracing)

        watch_uploads()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        outcome = run(argv)
    except Finished as done:  # --version was printed
        return done.code
    except (KeyboardInterrupt, _Interrupted):
        outcome = interrupted_outcome(argv, _thread_of(argv))  # the thread as it stands
    except Exception as exc:  # a bug: report it in the promised shape, then fail
        missing = missing_dependency(exc)  # unless this Python lacks a dependency: exit 2
        outcome = Outcome.from_error(_thread_of(argv), missing) if missing else Outcome(
            _thread_of(argv), ExitCode.UNEXPECTED,
            error=" ".join(f"{type(exc).__name__}: {exc} (this is a bug)".split()),
            error_code=ErrorCode.UNEXPECTED)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if "--trace" in argv:
            flush_traces()
    if as_json:
        emit(outcome.to_json())
    else:
        # The thread's status on stdout for the outcomes a scheduler reads there (done,
        # exhausted, awaiting approval), else on stderr; the error line always on stderr.
        status = outcome.to_text(with_error=False)
        if status:
            emit(status, sys.stdout if outcome.exit_code in (0, 3, 7) else sys.stderr)
        if outcome.error:
            emit(error_line(outcome.error_code, outcome.error), sys.stderr)
    return int(outcome.exit_code)


if __name__ == "__main__":
    exit_now(main())  # after main closed the store: flush, then exit without teardown
