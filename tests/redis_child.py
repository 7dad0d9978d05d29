"""A process the Redis tests race, pause and kill: `python -m tests.redis_child MODE URL THREAD ...`.

Modes (each prints one JSON line per event, flushed, and exits with the `RunError`'s exit
code when one ends it: 5 for busy, 6 for not durable):

* `race START`: waits for an item on list START (so every racer starts together), then
  counts and claims attempts without a lease until the thread is spent; prints each
  attempt it claimed.
* `hold LEASE_MS START DONE`: waits on START, takes the thread's lease, counts and claims
  one attempt, prints it, and keeps the lease until an item arrives on list DONE.
* `pause LEASE_MS OP`: takes the lease, counts, prints `ready` with the attempt, waits for
  a line on stdin (the test stops and continues the process meanwhile), then claims that
  attempt (OP `claim`) or counts again (OP `count`).
* `keep LEASE_MS`: takes the lease, prints `ready`, and holds it until killed.
"""

from __future__ import annotations

import json
import sys
import time

from graph.errors import RunError
from graph.redis_conn import connect
from graph.redis_ledger import RedisLedger
from graph.redis_locks import RedisThreadLocks


def _say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def _claim_one(ledger: RedisLedger, thread_id: str) -> None:
    entry = ledger.count(thread_id)
    if entry.unclaimed and ledger.claim(thread_id, entry.attempts):
        _say(claimed=entry.attempts)


def main(argv: list[str]) -> int:
    mode, url, thread_id, *rest = argv
    client = connect(url)
    locks = RedisThreadLocks(client, url, lease_ms=int(rest[0]) if mode != "race" else 1000)
    ledger = RedisLedger(client, url, tokens=locks.token)
    try:
        if mode == "race":
            client.blpop([rest[0]], timeout=60)
            while not ledger.count(thread_id).spent:
                _claim_one(ledger, thread_id)
        elif mode == "hold":
            client.blpop([rest[1]], timeout=60)
            with locks.hold(thread_id):
                _claim_one(ledger, thread_id)
                client.blpop([rest[2]], timeout=60)
        elif mode == "pause":
            with locks.hold(thread_id):
                attempt = ledger.count(thread_id).attempts
                _say(ready=attempt)
                sys.stdin.readline()
                if rest[1] == "claim":
                    _say(claim=ledger.claim(thread_id, attempt))
                else:
                    _say(count=ledger.count(thread_id).attempts)
        elif mode == "keep":
            with locks.hold(thread_id):
                _say(ready=True)
                while True:
                    time.sleep(1)
    except RunError as exc:
        _say(error=str(exc.error_code))
        return int(exc.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
