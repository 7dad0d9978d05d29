"""Runs `graph.run` in a child process that SIGKILLs (or SIGSTOPs) itself at a chosen point.

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

REDIS_KILL_POINTS = ("mid_waitaof", "mid_bury")
"""Redis only: right after the claim and its `WAITAOF` were sent, before the reply was
read; and inside a prune's `bury`, after the tombstone script, before the checkpoints go."""

HOLD_POINTS = ("hold:before_claim", "hold:after_claim", "hold:before_log", "hold:after_log",
               "hold:before_put", "hold:before_writes", "hold:before_outcome")
"""Redis only: points where a `graph.run` child stops itself (SIGSTOP) while it holds the
thread's lease, for the test to let the lease run out, let another writer take the thread,
then continue it (SIGCONT): before and after the claim; before and after the attempt's log
row; before the first checkpoint `put` and the first `put_writes` after the claim; before
the finished thread's outcome (its TTL). Each holds once per process. Named apart from the
kill points (`after_claim` kills)."""

HANG_DUMP_S = 40.0
"""A child still running after this long writes its threads' stacks to its output (again
each period), so a hang in CI says where it waits."""

LEASE_ENV = "TEST_REDIS_LEASE_MS"
"""When set, a Redis writer lease of that many milliseconds (a killed holder blocks less),
and a set-up lock of `SHORT_SETUP_S` (`graph.store.redis.open.SETUP_TIMEOUT_S`)."""

SHORT_SETUP_S = 5.0
"""The Redis set-up lock's lease in children with a short writer lease. Every open that may
write takes it around `RedisSaver.setup()` (milliseconds once the indexes exist), so a child
killed inside it made the next run wait out the default 60 s; a live holder is never near 5 s,
and two set-ups at once only both find the indexes there."""

PRELOAD = ["graph.run", "graph.step.advance", "graph.step.approvals", "graph.store",
           "graph.store.sqlite.open",
           "graph.store.postgres.open", "nodes.mandapi", "langgraph.checkpoint.sqlite",
           "langgraph.checkpoint.postgres", "psycopg", "graph.store.redis.open", "graph.prune",
           "langgraph.checkpoint.redis", "redis", "httpx", "tests.crash_child",
           # imported on first use inside a run: without them every child imports them again
           # (about 0.1 s per child, 0.2 s on a loaded 2-core host)
           "graph.api", "graph.threads.verification", "graph.store.redis.saver", "redis.commands.json",
           "httpcore", "h11", "langchain_core.tracers.stdout",
           "langchain_core.tracers.run_collector", "langchain_core.tracers.context",
           "encodings.unicode_escape", "snowballstemmer", "nodes.demo_model",
           "graph.run", "tests.redis_child", "tests.one_blas_thread"]
"""Modules the forkserver imports once, so that a child forked from it imports nothing a
run needs (checked with `sys.modules` before and after `graph.run.main` on each backend).
`rank_bm25` and numpy come last, through `tests.one_blas_thread`, with one BLAS thread: a
forkserver whose BLAS had started its thread pool made every child slower."""


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _patch(kill_at: str) -> None:
    from graph.store.sql.ledger import SqlLedger

    ledgers: list[Any] = [SqlLedger]
    try:
        from graph.store.redis.ledger import RedisLedger

        ledgers.append(RedisLedger)
    except ImportError:  # without the redis extra
        pass
    claimed: list[bool] = []
    for ledger in ledgers:
        _patch_ledger(ledger, kill_at, claimed)
    _patch_rest(kill_at, claimed)
    if kill_at in REDIS_KILL_POINTS:
        _patch_redis(kill_at)


def _patch_ledger(ledger: Any, kill_at: str, claimed: list[bool]) -> None:
    count, claim = ledger.count, ledger.claim

    def patched_count(self: Any, thread_id: str) -> Any:
        if kill_at == "before_count":
            _die()
        entry = count(self, thread_id)
        if kill_at == "after_count":
            _die()
        return entry

    def patched_claim(self: Any, thread_id: str, attempt: int, charge: Any = None) -> bool:
        ok = claim(self, thread_id, attempt, charge)
        if ok and kill_at == "after_claim":
            _die()
        if ok:
            claimed.append(True)
        return ok

    ledger.count, ledger.claim = patched_count, patched_claim


def _patch_rest(kill_at: str, claimed: list[bool]) -> None:
    from nodes.mandapi import MandApiModel

    complete = MandApiModel.complete

    def patched_complete(self: Any, messages: Any, tools: Any) -> Any:
        reply = complete(self, messages, tools)
        if kill_at == "after_answer":
            _die()
        return reply

    MandApiModel.complete = patched_complete  # type: ignore[method-assign]

    if kill_at.startswith("after_writes:"):
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.sqlite import SqliteSaver

        node, armed = kill_at.split(":", 1)[1], []
        savers: list[Any] = [SqliteSaver, PostgresSaver]
        try:  # our subclass: it writes through its own scripts, not RedisSaver's put
            from graph.store.redis.saver import CheckedRedisSaver

            savers.append(CheckedRedisSaver)
        except ImportError:  # without the redis extra
            pass
        for saver in savers:
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

    import graph.store.sql.window as window

    execute = window.execute

    def patched_execute(sql: Any, statement: str, params: Any) -> int:
        count = execute(sql, statement, params)
        if kill_at == "mid_trim" and claimed and statement.startswith((
                "DELETE FROM checkpoints ", "DELETE FROM checkpoint_digests ")):
            _die()
        return count

    window.execute = patched_execute  # type: ignore[assignment]

    import graph.step.approvals as approvals
    from graph.store.sql.approvals import SqlApprovals

    write, mark = approvals.atomic_write, SqlApprovals.mark_applied

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
    SqlApprovals.mark_applied = patched_mark  # type: ignore[method-assign]


def _patch_redis(kill_at: str) -> None:
    """The Redis-only kill points (`REDIS_KILL_POINTS`)."""
    import redis.connection

    from graph.store.redis.ledger import RedisLedger

    send, make_durable = redis.connection.AbstractConnection.send_packed_command, \
        RedisLedger.make_durable

    def patched_send(self: Any, command: Any, check_health: bool = True) -> None:
        send(self, command, check_health)
        packed = b"".join(command) if isinstance(command, list) else command
        if kill_at == "mid_waitaof" and b"WAITAOF" in packed and b"EVALSHA" in packed:
            _die()

    def patched_durable(self: Any, what: str) -> None:
        if kill_at == "mid_bury" and "buried" in what:
            _die()
        make_durable(self, what)

    redis.connection.AbstractConnection.send_packed_command = patched_send  # type: ignore[method-assign]
    RedisLedger.make_durable = patched_durable  # type: ignore[method-assign]


def _stop() -> None:
    """Stops this whole process (every thread: no lease renewal) until the test continues it."""
    os.kill(os.getpid(), signal.SIGSTOP)


def _patch_hold(hold_at: str) -> None:
    """Stops the process once at `hold_at` (`HOLD_POINTS`).

    Ranking (rank_bm25, numpy) is imported first, before any lease is taken: loading numpy's
    libraries holds the interpreter lock for long enough, on a loaded host, that the lease
    renewal starved past a short lease (the run then ended `busy` before its hold point).
    """
    import rank_bm25  # noqa: F401 - imported for its side effect, see above

    from graph.store.redis.ledger import RedisLedger
    from graph.store.redis.saver import CheckedRedisSaver
    from graph.store.redis.tables import RedisAttemptLog
    from graph.store.redis.ttl import TtlBackend

    claimed, held = [], []

    def hold(point: str, armed: bool = True) -> None:
        if f"hold:{point}" == hold_at and armed and not held:
            held.append(point)
            _stop()

    def wrap(cls: Any, name: str, before: str, after: str | None = None,
             after_claim: bool = False) -> None:
        original = getattr(cls, name)

        def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            armed = bool(claimed) or not after_claim
            hold(before, armed)
            result = original(self, *args, **kwargs)
            if name == "claim" and result:
                claimed.append(True)
            if after is not None:
                hold(after, armed and (name != "claim" or bool(result)))
            return result

        setattr(cls, name, patched)

    wrap(RedisLedger, "claim", "before_claim", "after_claim")
    wrap(RedisAttemptLog, "record", "before_log", "after_log", after_claim=True)
    wrap(CheckedRedisSaver, "put", "before_put", after_claim=True)
    wrap(CheckedRedisSaver, "put_writes", "before_writes", after_claim=True)
    wrap(TtlBackend, "expire_finished", "before_outcome")


def _short_lease(lease_ms: str | None) -> None:
    """A Redis writer lease of `lease_ms` for every lock this process takes, and a set-up
    lock of `SHORT_SETUP_S`."""
    if lease_ms:
        import graph.store.redis.open
        from graph.store.redis.locks import RedisThreadLocks

        defaults = RedisThreadLocks.__init__.__kwdefaults__ or {}
        defaults["lease_ms"] = int(lease_ms)
        graph.store.redis.open.SETUP_TIMEOUT_S = SHORT_SETUP_S


def child_main(argv: list[str], kill_at: str | None, env: dict[str, str], cwd: str,
               out_path: str, entry: str = "graph.run") -> None:
    """Process target: runs `main(argv)` of `entry` (`graph.run`, `graph.prune`) with stdout
    in `out_path`."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    _short_lease(env.get(LEASE_ENV))
    import faulthandler

    # A child that hangs leaves every thread's stack in its output for the test's message.
    faulthandler.dump_traceback_later(HANG_DUMP_S, repeat=True)
    if kill_at in (*KILL_POINTS, *WRITE_KILL_POINTS, *NODE_WRITES_KILL_POINTS, *TRIM_KILL_POINTS,
                   *REDIS_KILL_POINTS):
        _patch(kill_at)
    elif kill_at in HOLD_POINTS:
        _patch_hold(kill_at)
    import importlib

    code = importlib.import_module(entry).main(argv)
    os.fsync(1)
    os._exit(code)
