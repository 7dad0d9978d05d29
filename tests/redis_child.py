"""A process the Redis lease tests race, pause and kill.

Started by `forked(argv, conn)` as a `multiprocessing` process forked from the preloaded
forkserver (`tests.crash_child.PRELOAD`), so it costs no interpreter start; or as
`python -m tests.redis_child MODE URL THREAD ...`. Each event is one JSON-able dict: sent on
`conn`, or printed as one JSON line (flushed). The process exits with the `RunError`'s exit
code when one ends it: 5 for busy, 6 for not durable.

Modes:

* `race START`: waits for an item on list START (so every racer starts together), then
  counts and claims attempts without a lease until the thread is spent; reports each
  attempt it claimed.
* `hold LEASE_MS START DONE`: waits on START, takes the thread's lease, counts and claims
  one attempt, reports it, and keeps the lease until an item arrives on list DONE.
* `pause LEASE_MS OP`: takes the lease, counts, reports `ready` with the attempt, waits for
  a go (a message on `conn`, or a line on stdin; the test stops and continues the process
  meanwhile), then claims that attempt (OP `claim`) or counts again (OP `count`).
* `keep LEASE_MS`: takes the lease, reports `ready`, and holds it until killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from graph.errors import RunError
from graph.store.redis.conn import connect
from graph.store.redis.ledger import RedisLedger
from graph.store.redis.locks import RedisThreadLocks

Say = Callable[..., None]


def _print(**event: object) -> None:
    print(json.dumps(event), flush=True)


def _claim_one(ledger: RedisLedger, thread_id: str, say: Say) -> None:
    entry = ledger.count(thread_id)
    if entry.unclaimed and ledger.claim(thread_id, entry.attempts):
        say(claimed=entry.attempts)


def main(argv: list[str], say: Say = _print, wait_go: Callable[[], Any] = sys.stdin.readline
         ) -> int:
    """Runs MODE (see the module docstring); returns the exit code."""
    mode, url, thread_id, *rest = argv
    client = connect(url)
    locks = RedisThreadLocks(client, url, lease_ms=int(rest[0]) if mode != "race" else 1000)
    ledger = RedisLedger(client, url, tokens=locks.token)
    try:
        if mode == "race":
            client.blpop([rest[0]], timeout=60)
            while not ledger.count(thread_id).spent:
                _claim_one(ledger, thread_id, say)
        elif mode == "hold":
            client.blpop([rest[1]], timeout=60)
            with locks.hold(thread_id):
                _claim_one(ledger, thread_id, say)
                client.blpop([rest[2]], timeout=60)
        elif mode == "pause":
            with locks.hold(thread_id):
                attempt = ledger.count(thread_id).attempts
                say(ready=attempt)
                wait_go()
                if rest[1] == "claim":
                    say(claim=ledger.claim(thread_id, attempt))
                else:
                    say(count=ledger.count(thread_id).attempts)
        elif mode == "keep":
            with locks.hold(thread_id):
                say(ready=True)
                while True:
                    time.sleep(1)
    except RunError as exc:
        say(error=str(exc.error_code))
        return int(exc.exit_code)
    return 0


def forked(argv: list[str], conn: Any) -> None:
    """Process target: `main(argv)` reporting events on `conn` and waiting for a go there."""
    code = main(argv, say=lambda **event: conn.send(event), wait_go=conn.recv)
    conn.close()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
