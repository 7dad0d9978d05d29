"""Runs `graph.run` in a child process that SIGKILLs itself at a chosen point.

Children are forked from a `multiprocessing` forkserver that has already imported the
project, so a kill/resume cycle costs milliseconds instead of an interpreter start.
Each is still a real process, killed with a real SIGKILL: by itself at a fixed point,
or by the test at a random instant or while the fake server holds its request.
"""

from __future__ import annotations

import os
import signal
from typing import Any

KILL_POINTS = ("before_count", "after_count", "after_claim", "after_answer")
"""Fixed points: before the count commits, after it commits, after the claim (before
sending), and after the answer arrived but before its checkpoint is written."""

NODE_WRITES_KILL_POINTS = ("after_writes:__start__", "after_writes:budget", "after_writes:tools")
"""After a node's writes are saved, before the next checkpoint is (on PostgreSQL LangGraph
then reports no next node, only the finished task; on SQLite the writes wait for that
checkpoint's commit and the node runs again). Not for reason: with `interrupt_after`
LangGraph saves reason's writes and the interrupt checkpoint concurrently."""

WRITE_KILL_POINTS = ("before_write", "after_write", "after_mark")
"""Points of an approved write: decision recorded but nothing written; file renamed into
place but not marked applied; marked applied but the interrupt not yet resumed."""

TRIM_KILL_POINTS = ("mid_trim",)
"""Inside the first transaction after the claim that trims a thread's window, after its
checkpoints (or, after LangGraph's own `prune`, their digests) were deleted but before the
commit: on SQLite the reason checkpoint's own transaction, on PostgreSQL the trim after
the step."""

PRELOAD = ["graph.run", "graph.step", "graph.approvals", "graph.storage", "graph.sqlite_store",
           "graph.postgres_store", "nodes.mandapi", "langgraph.checkpoint.sqlite",
           "langgraph.checkpoint.postgres", "psycopg", "httpx", "tests.crash_child"]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _patch(kill_at: str) -> None:
    from graph.ledger import SqlLedger
    from nodes.mandapi import MandApiModel

    count, claim, complete = SqlLedger.count, SqlLedger.claim, MandApiModel.complete

    def patched_count(self: Any, thread_id: str) -> Any:
        if kill_at == "before_count":
            _die()
        entry = count(self, thread_id)
        if kill_at == "after_count":
            _die()
        return entry

    claimed: list[bool] = []

    def patched_claim(self: Any, thread_id: str, attempt: int, charge: Any = None) -> bool:
        ok = claim(self, thread_id, attempt, charge)
        if ok and kill_at == "after_claim":
            _die()
        if ok:
            claimed.append(True)
        return ok

    def patched_complete(self: Any, messages: Any, tools: Any) -> Any:
        reply = complete(self, messages, tools)
        if kill_at == "after_answer":
            _die()
        return reply

    SqlLedger.count, SqlLedger.claim = patched_count, patched_claim  # type: ignore[method-assign]
    MandApiModel.complete = patched_complete  # type: ignore[method-assign]

    if kill_at.startswith("after_writes:"):
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.sqlite import SqliteSaver

        node, armed = kill_at.split(":", 1)[1], []
        for saver in (SqliteSaver, PostgresSaver):
            def put_writes(self: Any, config: Any, writes: Any, task_id: str, task_path: str = "",
                           _orig: Any = saver.put_writes) -> Any:
                result = _orig(self, config, writes, task_id, task_path)
                if node in str(task_path) and writes:
                    armed.append(True)
                return result

            def put(self: Any, *args: Any, _orig: Any = saver.put, **kwargs: Any) -> Any:
                if armed:
                    _die()
                return _orig(self, *args, **kwargs)

            saver.put_writes, saver.put = put_writes, put  # type: ignore[method-assign]

    import graph.checkpoint_window as window

    execute = window.execute

    def patched_execute(sql: Any, statement: str, params: Any) -> int:
        count = execute(sql, statement, params)
        if kill_at == "mid_trim" and claimed and statement.startswith((
                "DELETE FROM checkpoints ", "DELETE FROM checkpoint_digests ")):
            _die()
        return count

    window.execute = patched_execute  # type: ignore[assignment]

    import graph.approvals as approvals

    write, mark = approvals.atomic_write, approvals.SqlApprovals.mark_applied

    def patched_write(path: Any, data: bytes) -> None:
        if kill_at == "before_write":
            _die()
        write(path, data)
        if kill_at == "after_write":
            _die()

    def patched_mark(self: Any, *args: Any) -> None:
        mark(self, *args)
        if kill_at == "after_mark":
            _die()

    approvals.atomic_write = patched_write  # type: ignore[assignment]
    approvals.SqlApprovals.mark_applied = patched_mark  # type: ignore[method-assign]


def child_main(argv: list[str], kill_at: str | None, env: dict[str, str], cwd: str,
               out_path: str) -> None:
    """Process target: runs `graph.run.main(argv)` with stdout in `out_path`."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if kill_at in (*KILL_POINTS, *WRITE_KILL_POINTS, *NODE_WRITES_KILL_POINTS, *TRIM_KILL_POINTS):
        _patch(kill_at)
    from graph.run import main

    code = main(argv)
    os.fsync(1)
    os._exit(code)
