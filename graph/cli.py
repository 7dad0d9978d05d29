"""Pieces shared by the command-line entry points: one error shape, output, the database.

Every entry point reports a failure the same way: one line on stderr,
`error (CODE): MESSAGE`, or with `--json` one JSON object on stdout with at least
`error`, `error_code` and `exit_code` (plus the command's own fields). A closed stdout
(`| head -1`) ends the command quietly with the exit code it would have had.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn, TextIO

from graph.errors import RunError, SignalledError, UsageError, error_line
from graph.settings import database_location, parse_seconds
from graph.store.failures import known_error
from graph.text import escape_controls, silence, without_key

__all__ = [
    "Finished",
    "PROGRAM",
    "Parser",
    "emit",
    "exit_now",
    "guard",
    "interrupted_error",
    "report_error",
    "resolve_db",
    "seconds",
    "set_console_command",
    "version_line",
    "whole_number",
]

PROGRAM = "mandapi-resume"
"""The distribution's name, its console script's name and the first word of `--version`."""

_JOINED_DASHES = "\x00--"
"""What `Parser` passes argparse in place of a `--` joined to its flag (`--thread=--`)."""

_console_command: str | None = None
"""The subcommand `graph.console` is running, which names every parser's program."""


def set_console_command(command: str | None) -> None:
    """Names the programs `mandapi-resume COMMAND` (from `graph.console`) instead of `python -m`."""
    global _console_command
    _console_command = command


def version_line() -> str:
    """`mandapi-resume X.Y.Z`, the installed distribution's version (`importlib.metadata`)."""
    try:
        return f"{PROGRAM} {version(PROGRAM)}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return f"{PROGRAM} (not installed: version unknown)"


class Finished(Exception):  # noqa: N818 - not an error: --help or --version was answered
    """`--help` or `--version` was printed; the command ends with `code` (0)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Version(argparse.Action):
    """`--version`: prints `version_line()` on stdout and ends the command with exit 0."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any,
                 option_string: str | None = None) -> None:
        emit(version_line())
        raise Finished(0)


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors raise `UsageError` (exit 2, one JSON object with --json).

    Abbreviated flags are refused (`--max-att` is not `--max-attempts`): a prefix must
    never silently become a permanent setting. Every command has `--version`; `--help`
    and `--version` raise `Finished` (exit 0) instead of exiting the interpreter, so
    `main(argv)` returns its exit code to tests and to `graph.console` alike.
    """

    def __init__(self, prog: str, doc: str | None) -> None:
        if _console_command is not None:
            prog = f"{PROGRAM} {_console_command}"
        super().__init__(prog=prog, description=doc, allow_abbrev=False,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
        self.add_argument("--version", action=_Version, help="print the version and exit")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """Parses as argparse does, except that `--flag=--` gives the flag the value `--`.

        Python 3.11's argparse drops every `--` among an option's values, even one joined
        to its flag with `=`, leaving `[]`: the legal thread id `--`
        could not be named. A joined `--` is passed through a stand-in argparse leaves
        alone (a NUL, which no command-line argument can hold) and put back after parsing.
        """
        given = sys.argv[1:] if args is None else list(args)
        swapped = [a[:-2] + _JOINED_DASHES if a.startswith("-") and a.partition("=")[2] == "--"
                   else a for a in given]  # `--task=a=--` is the text `a=--`, left alone
        parsed, rest = super().parse_known_args(swapped, namespace)
        for name, value in vars(parsed).items():
            if value == _JOINED_DASHES:
                setattr(parsed, name, "--")
            elif isinstance(value, list) and _JOINED_DASHES in value:
                setattr(parsed, name, ["--" if v == _JOINED_DASHES else v for v in value])
        return parsed, ["--" if a == _JOINED_DASHES else a for a in rest]

    def error(self, message: str) -> NoReturn:
        """Raises `UsageError` instead of printing and exiting.

        argparse reads a value that starts with `-` (`--thread -x`) as a flag and says
        "expected one argument"; the message then shows the `--flag=VALUE` form that works.
        """
        if message.endswith(": expected one argument"):
            flag = message.removeprefix("argument ").split(":", 1)[0].split("/")[-1]
            message += f" (a value that starts with '-' is joined with '=': {flag}=VALUE)"
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        """Raises `Finished` (after `--help`) instead of exiting the interpreter."""
        if message:
            emit(message.rstrip("\n"), sys.stderr)
        raise Finished(status)

    def add_db(self) -> None:
        """Adds `--db` (SQLite file, PostgreSQL or Redis URL)."""
        self.add_argument("--db", help="SQLite file, postgresql:// or redis:// URL (default: "
                          "$GRAPH_DB, else ./checkpoints.sqlite)")

    def add_trace(self) -> None:
        """Adds `--trace` (LangSmith tracing for this invocation; off by default)."""
        self.add_argument("--trace", action="store_true",
                          help="send this invocation's trace to LangSmith (needs "
                               "LANGSMITH_API_KEY): the task and the whole conversation are "
                               "uploaded")


def whole_number(text: str) -> int:
    """An argparse type: a whole number written with ASCII digits (and an optional `-`).

    Python's `int()` also takes `1_0`, ` 5`, `+5` and other scripts' digits; a number
    flag takes exactly what a tasks line's JSON integer takes, so run and batch agree.
    Bounds are `graph.settings.ThreadSpec`'s.

    Raises:
        argparse.ArgumentTypeError: Anything else (argparse exits 2 with `usage`).
    """
    if not re.fullmatch(r"-?[0-9]{1,30}", text):
        raise argparse.ArgumentTypeError(f"invalid whole number: {text[:40]!r}")
    return int(text)


whole_number.__name__ = "whole number"


def seconds(text: str) -> float:
    """An argparse type: a number of seconds (`graph.settings.parse_seconds`).

    Raises:
        UsageError: Not ASCII digits with an optional fraction (exit 2).
    """
    return parse_seconds(text, "--timeout")


def resolve_db(flag: str | None, name: str = "--db") -> str:
    """`--db`, else `$GRAPH_DB`, else `checkpoints.sqlite` (see `graph.settings`).

    Raises:
        UsageError: The flag was given empty (`graph.settings.check_db_flag`).
    """
    return database_location(flag, name)


def emit(text: str, stream: TextIO | None = None) -> None:
    """Prints `text` and flushes; a closed pipe silences the stream instead of failing.

    Control characters are written as escapes (`graph.text`): text from a
    reply or a database never drives the reader's terminal. `MANDAPI_API_KEY`'s value,
    wherever it comes from (an argument echoed back, a stored value), is printed as
    `[redacted: API key]` (INVARIANTS I9).

    After a `BrokenPipeError` the stream's descriptor is pointed at /dev/null (what
    CPython's documentation recommends), so later output and the interpreter's final
    flush are discarded quietly and the command keeps its own exit code.
    """
    stream = stream or sys.stdout
    try:
        stream.write(escape_controls(without_key(text)) + "\n")
        stream.flush()
    except BrokenPipeError:
        silence(stream)


def exit_now(code: int) -> NoReturn:
    """Flushes stdout and stderr, then ends the process with `code`, skipping teardown.

    For the `__main__` block of an entry point, after `main` returned (its stores are
    closed by then: SQLite's connections closed, the `-wal` checkpointed, every lock
    released). Interpreter teardown would only free what the process holds, which
    with LangGraph loaded costs more than a step; `os._exit` runs no `atexit`
    handlers and flushes no Python buffers, so both streams are flushed here. A
    closed pipe (`| head -1`) is silenced as in `emit`; the exit code stays `code`.
    Never call it from `main`: tests call `main` in their own process.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            silence(stream)
        except (OSError, ValueError):
            pass  # a stream already closed or failing: nothing more can reach it
    os._exit(code)


def report_error(exc: RunError, as_json: bool, **fields: Any) -> int:
    """Prints `exc` in the one error shape (see module doc); returns its exit code.

    Args:
        exc: The failure.
        as_json: One JSON object on stdout (the command's `fields` plus `exc.fields()`)
            instead of one `error (CODE): MESSAGE` line on stderr.
        **fields: The command's own JSON fields, reported with their empty values.
    """
    if as_json:
        emit(json.dumps({**fields, **exc.fields()}, ensure_ascii=False, sort_keys=True))
    else:
        emit(error_line(exc.error_code, exc.message), sys.stderr)
    return int(exc.exit_code)


def interrupted_error() -> SignalledError:
    """The error every entry point reports after SIGINT or SIGTERM (exit 130)."""
    return SignalledError("interrupted by SIGINT or SIGTERM; any attempt counted before "
                          "stays counted")


def guard(body: Callable[[], int], as_json: bool, **fields: Any) -> int:
    """Runs an entry point's `body`, reporting every failure in the one error shape.

    Known failures (`RunError` and `known_error`) get their documented exit code; any
    other exception is a bug: reported the same way with `unexpected` and exit 1.
    """
    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM ends the command like Ctrl-C: reported, exit 130

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    try:
        return body()
    except Finished as done:  # --help or --version was printed
        return done.code
    except KeyboardInterrupt:
        return report_error(interrupted_error(), as_json, **fields)
    except Exception as exc:  # noqa: BLE001 - every failure is reported in one shape
        error = known_error(exc) or RunError(
            " ".join(f"{type(exc).__name__}: {exc} (this is a bug)".split()))
        return report_error(error, as_json, **fields)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)

