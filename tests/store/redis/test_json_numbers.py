"""Every number this program stores in a RedisJSON document comes back exactly as sent.

RedisJSON parses the text it is given and serialises its own value again, and its float
parser is not exact: a float of 17 significant digits came back one unit off now and then
(seen with `checkpoint_ts`, upstream's wall clock with its fraction). The whole-document
digests (`graph.store.redis.digests`) are taken of the text sent, so such a float would make
a sound thread read as damaged (exit 4) and stop it for good: INVARIANTS I4 refuses damage,
it must not invent it. So no document may carry a number that is not an integer of at most
2**53 (exact in a double and printed the same by any parser): `checkpoint_ts` is whole
milliseconds (`graph.store.redis.saver`), and the state schema (`graph.store.shape`,
`graph.checkpoints`) holds no float. A later change that stores a float (a price, a score)
fails here, before it can lose a thread (issue 28, "the Redis float-digest quirk").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graph.api import open_database
from tests.conftest import run_cli
from tests.step.test_approvals import Writer

TASK = "How long does shipping take at the demo shop?"
WRITE_TASK = "Write the shipping summary to report.md and log it."


def _numbers(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every number in a parsed JSON value (booleans aside), with its path."""
    if isinstance(value, dict):
        return [n for key, item in value.items() for n in _numbers(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [n for i, item in enumerate(value) for n in _numbers(item, f"{path}[{i}]")]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [(path, value)]
    return []


def _inexact(client: Any, thread_id: str) -> list[str]:
    """Numbers in the thread's JSON documents that RedisJSON may not give back exactly."""
    found = []
    documents = 0
    for key in client.scan_iter(match=f"*{thread_id}*".encode()):
        if client.type(key) != b"ReJSON-RL":
            continue
        documents += 1
        raw = client.execute_command("JSON.GET", key)
        for path, number in _numbers(json.loads(raw)):
            if isinstance(number, float) and not (number.is_integer() and abs(number) <= 2**53):
                found.append(f"{key.decode()}{path} = {number!r}")
    assert documents, f"no JSON document of {thread_id} found: the key names changed"
    return found


def test_a_whole_thread_stores_no_number_redisjson_could_change(redis_url: str,
                                                               redis_client: Any) -> None:
    """A thread through tools to its answer, then forked by `update_state`: its checkpoints,
    pending writes and every other JSON document it owns hold integers only."""
    first = run_cli(["--thread", "numbers", "--task", TASK, "--db", redis_url])
    assert first["exit_code"] == 0 and first["status"] == "done", first
    with open_database(redis_url) as database:
        config = {"configurable": {"thread_id": "numbers"}}
        fork = next(s for s in database.graph.get_state_history(config) if s.next == ("budget",))
        database.graph.update_state(fork.config, {"messages": []})
    assert _inexact(redis_client, "numbers") == []


def test_a_thread_paused_for_approval_and_approved_stores_no_number_redisjson_could_change(
        redis_url: str, redis_client: Any, tmp_path: Path) -> None:
    """The approval path writes interrupts, decision records and an applied write as well."""
    model = Writer()
    statuses = []
    for argv in (["--task", WRITE_TASK, "--allow-writes", str(tmp_path)], [], ["--approve", "w1"],
                 ["--approve", "w2"]):
        out = run_cli(["--thread=approve-n", "--once", "--db", redis_url, *argv],
                      model_factory=lambda m, s: model)
        assert out["exit_code"] in (0, 7), out  # 7: awaiting approval
        statuses.append(out["status"])
    assert "awaiting_approval" in statuses and statuses[-1] != "awaiting_approval", statuses
    assert _inexact(redis_client, "approve-n") == []
