"""What `graph.run` reports after SIGINT or SIGTERM: the thread as it stands.

The step was stopped mid-way (often mid-request); its lock is released by then. The
thread is read again through a read-only `graph.api.Database` (as every entry point
opens its database), so the report shows
the counted attempts, the maximum and the status instead of nulls. Reading never
writes, counts or sends anything.
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

from graph.exitcodes import ErrorCode, ExitCode
from graph.outcome import Outcome

INTERRUPTED = "interrupted; any counted attempt stays counted"


def _args(argv: list[str]) -> tuple[str | None, str | None]:
    """`--thread` (checked) and `--db` of `argv`; None for what is missing or invalid."""
    from graph.settings_spec import check_thread_id

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--thread")
    parser.add_argument("--db")
    known, _ = parser.parse_known_args(argv)
    if known.thread is None:
        return None, known.db
    return check_thread_id(known.thread), known.db


def _fill(outcome: Outcome, db_flag: str | None) -> None:
    """Fills `outcome` from the thread's stored state and ledger (read-only)."""
    from graph.api import Database
    from graph.checkpoints.load import load_thread
    from graph.cli import resolve_db
    from graph.settings import Settings

    thread_id = outcome.thread_id
    assert thread_id is not None
    with Database(Settings(db=resolve_db(db_flag)), read_only=True, source="flags") as db:
        entry = db.store.ledger.read(thread_id)
        loaded = load_thread(db.store.graph, thread_id, db.location)
    if loaded is not None:
        state = Outcome.from_state(thread_id, loaded.values, loaded.snapshot.next)
        for name in ("status", "attempts", "max_attempts", "model", "answer", "stop_reason",
                     "usage", "max_tokens", "next_nodes"):
            setattr(outcome, name, getattr(state, name))
    if entry is not None:
        outcome.attempts = max(entry.attempts, outcome.attempts or 0)
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
