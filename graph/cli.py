"""Pieces shared by the command-line entry points: argument errors as exit 2, the database."""

from __future__ import annotations

import argparse
import os
from typing import NoReturn

from graph.errors import UsageError


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors raise `UsageError` (exit 2, one JSON object with --json)."""

    def __init__(self, prog: str, doc: str | None) -> None:
        super().__init__(prog=prog, description=doc,
                         formatter_class=argparse.RawDescriptionHelpFormatter)

    def error(self, message: str) -> NoReturn:
        """Raises `UsageError` instead of printing and exiting."""
        raise UsageError(message)

    def add_db(self) -> None:
        """Adds `--db` (SQLite file or PostgreSQL URL)."""
        self.add_argument("--db", help="SQLite file or postgresql:// URL (default: $GRAPH_DB, "
                          "else ./checkpoints.sqlite)")


def resolve_db(flag: str | None) -> str:
    """`--db`, else `$GRAPH_DB`, else `checkpoints.sqlite` (see `graph.settings`)."""
    from graph.settings import DB_ENV, DEFAULT_DB

    return flag or os.environ.get(DB_ENV) or DEFAULT_DB
