"""Drives a recorded thread through `graph.run` during a replay, and checks how it ended.

Part of `graph.replay.session` (which answers the requests): this module creates the
thread from the recording's settings, steps it with `--once`, decides paused write
calls as the recording says, and afterwards checks the leftovers, the ledger and the
final outcome. Every problem raises `ReplayFailure`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graph.replay.diff import outcome_difference
from graph.replay.format import Recording
from graph.replay.session import ReplayFailure

_FINAL = ("done", "exhausted", "cancelled")


def _folder(kind: str, given: str | Path | None, recorded: str | None) -> list[str]:
    """The `--workspace` / `--allow-writes` flags of the replayed thread."""
    flag = f"--{kind.replace('_', '-')}"
    if recorded is None:
        if given is not None:
            raise ReplayFailure(f"the recorded thread has no {kind} folder; do not pass {kind}=")
        return []
    if given is None and kind == "allow_writes":  # never write into the recorded folder
        raise ReplayFailure("the recorded thread could write: pass allow_writes= with an empty folder")
    folder = Path(given if given is not None else recorded)
    if not folder.is_dir():
        raise ReplayFailure(f"the {kind} folder {folder} does not exist here: pass {kind}= with "
                            + ("the recorded files" if kind == "workspace" else "an empty folder"))
    return [flag, str(folder)]


def identity_flags(rec: Recording, workspace: str | Path | None,
                   allow_writes: str | Path | None) -> list[str]:
    """The `graph.run` flags that create the recorded thread anew."""
    thread = rec.thread
    keep = thread.get("keep_checkpoints")
    flags = ["--task", str(thread["task"]), "--model", str(thread["model"]),
             "--max-attempts", str(thread["max_attempts"]),
             "--context-tokens", str(thread["context_tokens"]),
             "--keep-checkpoints", "all" if keep is None else str(keep)]
    if thread.get("max_tokens") is not None:
        flags += ["--max-tokens", str(thread["max_tokens"])]
    flags += _folder("workspace", workspace, thread.get("workspace"))
    flags += _folder("allow_writes", allow_writes, thread.get("allow_writes"))
    return flags


def refuse_existing(db: str, thread_id: str) -> None:
    """Refuses a replay into a database that already holds the recorded thread.

    A replay creates the thread anew; run in a database where it exists, it would
    advance that thread (counting its attempts) and then report a misleading diff.
    Read-only: a missing SQLite file or an empty PostgreSQL database holds no thread.

    Raises:
        RefusedError: `exists` (exit 4), naming the thread and the database; nothing
            was run or written. Or the database's own refusal (damaged, unreachable).
    """
    from graph.errors import ErrorCode, RefusedError
    from graph.store import open_store
    from graph.threads.copy import thread_exists

    try:
        with open_store(db, create=False, read_only=True, name="db") as store:
            found, location = thread_exists(store, thread_id), store.location
    except RefusedError as exc:
        if exc.error_code == ErrorCode.NO_SUCH_FILE:
            return
        raise
    if found:
        raise RefusedError(f"thread {thread_id!r} already exists in {location}: a replay creates the "
                           "recorded thread anew; replay into another database (the mandapi_replay "
                           "fixture makes a new one when db= is not given); nothing was run",
                           error_code=ErrorCode.EXISTS)


def _decide(rec: Recording, out: dict[str, Any]) -> list[list[str]] | None:
    """The decision flags for each undecided paused call; None when the recording ends here."""
    decisions = {(d["attempt"], d["tool_call_id"]): d for d in rec.decisions}
    undecided = [c for c in out.get("pending_calls") or [] if c.get("decision") is None]
    found = [decisions.get((out["attempts"], c["tool_call_id"])) for c in undecided]
    if not any(found) and rec.outcome["status"] == "awaiting_approval":
        return None
    runs = []
    for call, decision in zip(undecided, found, strict=True):
        if decision is None:
            raise ReplayFailure(f"the graph paused write call {call['tool_call_id']} ({call['name']}, "
                                f"turn {out['attempts']}) for review, and the recording has no "
                                "decision for it")
        flag = "--approve" if decision["decision"] == "approve" else "--reject"
        reason = ["--reason", decision["reason"]] if flag == "--reject" and decision["reason"] else []
        runs.append([flag, call["tool_call_id"], *reason])
    return runs


def drive(rec: Recording, db: str, flags: list[str], model_factory: Callable[[str, Any], Any],
          playback: Any) -> list[dict[str, Any]]:
    """Creates and steps the thread until it ends as far as the recording goes.

    Returns:
        Each invocation's `--json` outcome, in order.

    Raises:
        ReplayFailure: A request failed to match (raised by the transport), a step
            failed in a way a replay never should (exit 1, 2, 4, 5), a paused call has
            no recorded decision, or the thread keeps going past any sensible count.
    """
    from graph.run import run

    base = ["--thread", str(rec.thread["thread_id"]), "--db", db, "--live", "--json"]
    outcomes: list[dict[str, Any]] = []

    def step(argv: list[str]) -> dict[str, Any]:
        out = json.loads(run(argv, model_factory=model_factory).to_json())
        if playback.failure:
            raise ReplayFailure(playback.failure)
        outcomes.append(out)
        if out["exit_code"] not in (0, 3, 6, 7):
            raise ReplayFailure(f"step {len(outcomes)} ended with exit {out['exit_code']} "
                                f"({out['error_code']}): {out['error']}")
        return out

    out = step([*base, "--once", *flags])
    for _ in range(2 * len(rec.exchanges) + len(rec.decisions) + 2):
        if out["status"] == "awaiting_approval":
            runs = _decide(rec, out)
            if runs is None:
                return outcomes
            for decision in runs:
                out = step([*base, *decision])
            continue
        played_all = playback.next_index() is None
        if out["status"] in _FINAL or (played_all and rec.outcome["status"] == "ready"):
            return outcomes
        # A thread cancelled after its last exchange is cancelled again here.
        out = step([*base, "--cancel"] if played_all and rec.outcome["status"] == "cancelled"
                   else [*base, "--once"])
    raise ReplayFailure(f"the thread was still {out['status']} after {len(outcomes)} invocations")


def check_end(rec: Recording, db: str, outcomes: list[dict[str, Any]], played: int) -> None:
    """Checks leftovers, the ledger (attempts == claimed == replies) and the final outcome.

    Raises:
        ReplayFailure: The first difference found.
    """
    from graph.api import Database
    from graph.settings import Settings

    total, final = len(rec.exchanges), outcomes[-1]
    if played < total:
        raise ReplayFailure(f"{total - played} recorded exchange(s) were never requested: the thread "
                            f"stopped {final['status']} after request {played} of {total} "
                            f"({rec.path})")
    thread_id = str(rec.thread["thread_id"])
    with Database(Settings(db=db), read_only=True) as database:
        entry = database.store.ledger.read(thread_id)
    counts = (entry.attempts, entry.claimed) if entry else (0, 0)
    if counts != (played, played):
        raise ReplayFailure(f"the ledger counts {counts[0]} attempt(s), {counts[1]} sent, for "
                            f"{played} recorded replies")
    expected = rec.outcome
    got = {"status": final["status"], "answer": final.get("answer"), "usage": final.get("usage")}
    want = {"status": expected["status"], "answer": expected.get("answer"), "usage": expected.get("usage")}
    diff = outcome_difference(want, got)
    if diff is not None:
        raise ReplayFailure(f"the replayed thread ended unlike the recording ({rec.path}):\n{diff}")
