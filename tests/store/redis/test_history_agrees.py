"""`graph.history` refuses every edit that `graph.run` and `graph.verify` refuse (Redis).

An outside attack (issue 28) found history exiting 0, showing the thread, over a ledger
row or an attempt log that disagreed with the checkpoint, or a missing older checkpoint,
where run and verify exit 4 `damaged`: history loaded the latest checkpoint only. It now
makes the same checks (`graph.checkpoints.load.check_stored_thread`). Redis is where
these edits are one command each; on SQL the triggers refuse most of them outright.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from graph.history import main as history_main
from graph.store.redis import keys
from graph.verify import main as verify_main
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


def _oldest_checkpoint(client: Any, thread_id: str) -> bytes:
    found = sorted(client.scan_iter(match=f"checkpoint:{thread_id}:*".encode(), count=1000))
    return found[0]


EDITS: dict[str, Callable[[Any, str], Any]] = {
    "ledger maximum raised": lambda c, t: c.hset(keys.ledger_key(t), "max_attempts", 5),
    "ledger deleted": lambda c, t: c.delete(keys.ledger_key(t)),
    "ledger claimed lowered": lambda c, t: c.hincrby(keys.ledger_key(t), "claimed", -1),
    "log deleted": lambda c, t: c.delete(keys.log_key(t)),
    "log's first row removed": lambda c, t: c.lpop(keys.log_key(t)),
    "oldest checkpoint renamed": lambda c, t: c.rename(_oldest_checkpoint(c, t),
                                                       b"elsewhere:" + _oldest_checkpoint(c, t)),
}


def _code(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, dict[str, Any]]:
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        code = main([*argv, "--json"])
    return code, json.loads(shown.getvalue())


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_history_refuses_what_run_and_verify_refuse(redis_url: str, redis_client: Any,
                                                    edit: str) -> None:
    thread_id = "ha-" + "".join(ch for ch in edit if ch.isalnum())[:20]
    done = run_cli(["--thread", thread_id, "--task", TASK, "--db", redis_url])
    assert (done["exit_code"], done["status"]) == (0, "done"), done
    EDITS[edit](redis_client, thread_id)
    code, shown = _code(history_main, ["--db", redis_url, "--thread", thread_id])
    assert (code, shown["error_code"]) == (4, "damaged"), shown
    code, checked = _code(verify_main, ["--db", redis_url])
    assert code == 4 and any(thread_id in p for p in checked["problems"]), checked
    again = run_cli(["--thread", thread_id, "--once", "--db", redis_url])
    # a finished thread carries its TTL: a key gone from it may have expired (`pruned`)
    assert again["exit_code"] == 4 and again["error_code"] in ("damaged", "pruned"), again
