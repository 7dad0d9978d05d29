"""The `mandapi-resume` console script: one command, a subcommand per entry point.

  mandapi-resume run --thread task_abc --task "How long does shipping take?" --once
  mandapi-resume history --list
  mandapi-resume prune | verify | copy | batch | replay ...
  mandapi-resume --version

Each subcommand is the `main(argv)` of its module (`mandapi-resume run ...` is
`python -m graph.run ...`: same flags, output and exit codes). Unlike `python -m`, a
console script does not put the current folder first on `sys.path`, so a `graph.py` or
`nodes/` of your own in the folder you run it from cannot shadow this package.

exit codes: those of the subcommand (see `mandapi-resume run --help`); 2 for an unknown
or missing subcommand.
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

from graph.cli import PROGRAM, emit, exit_now, report_error, set_console_command, version_line
from graph.errors import UsageError

__all__ = [
    "COMMANDS",
    "main",
    "script",
]

COMMANDS = {
    "run": "graph.run",
    "history": "graph.history",
    "prune": "graph.prune",
    "verify": "graph.verify",
    "copy": "graph.copy",
    "batch": "graph.batch",
    "replay": "graph.replay.__main__",
}
"""Each subcommand and the module whose `main(argv)` it runs, imported only when chosen."""

_EXIT_WITHOUT_TEARDOWN = frozenset({"run"})
"""Subcommands whose `python -m` form ends with `graph.cli.exit_now` (see `script`)."""


def _usage() -> str:
    return (f"usage: {PROGRAM} {{{','.join(COMMANDS)}}} [ARGS ...]\n"
            f"       {PROGRAM} --version\n\n" + (__doc__ or "").strip())


def main(argv: list[str] | None = None) -> int:
    """Runs the subcommand named by `argv[0]` with the rest of `argv`; returns its exit code.

    The subcommand's module is imported only now, so `mandapi-resume history` never
    imports `graph.batch`. A subcommand whose module is not part of this installation
    (`replay` before it ships) is a usage error, exit 2, in the one error shape.
    """
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    if not argv:
        return report_error(UsageError(f"a command is required: {', '.join(COMMANDS)} "
                                       f"(see {PROGRAM} --help)"), as_json)
    if argv[0] in ("-h", "--help"):
        emit(_usage())
        return 0
    if argv[0] == "--version":
        emit(version_line())
        return 0
    command, rest = argv[0], argv[1:]
    module_name = COMMANDS.get(command)
    if module_name is None:
        return report_error(UsageError(
            f"unknown command {command[:40]!r}; choose one of {', '.join(COMMANDS)} "
            f"(see {PROGRAM} --help)"), as_json)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not f"{module_name}.".startswith(f"{exc.name}."):
            raise  # a dependency of the module is missing: a bug, reported by the script
        return report_error(UsageError(
            f"the {command!r} command is not part of this installation of {PROGRAM} "
            f"({version_line()})"), as_json)
    set_console_command(command)
    try:
        return int(module.main(rest))
    finally:
        set_console_command(None)


def script() -> NoReturn:
    """The console script's entry point: `main()`, then exit as `python -m` would.

    `run` ends with `graph.cli.exit_now` like `python -m graph.run` (its store is closed
    by then; the interpreter's teardown is skipped); the others with `sys.exit`.
    """
    code = main()
    if sys.argv[1:2] and sys.argv[1] in _EXIT_WITHOUT_TEARDOWN:
        exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    script()
