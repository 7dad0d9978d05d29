"""The ledger row counts the attempt log's rows on Redis: a row popped off the list's end is damage.

Each log row holds its place in the list (`seq`, covered by its digest), so a row deleted
from the start or the middle shows; one popped off the end left a list that read whole.
After a fork the checkpoint shows fewer replies and tokens than the log, so nothing else
noticed either, and the token cap counted fewer tokens than the thread was paid for (issue
28, second attack). `APPEND` now keeps the count in the ledger row (`logged`) in the same
script as the push, and every read of the log compares the two
(`graph.store.redis.tables._log_rows`). A log written before the count has none until
its next append: it reads as before, then is counted.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from graph.api import open_database
from graph.errors import RefusedError
from graph.history import main as history_main
from graph.store.redis import keys
from graph.verify import main as verify_main
from tests.fakes import ScriptedModel, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def _json(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, dict[str, Any]]:
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        code = main([*argv, "--json"])
    return code, json.loads(shown.getvalue())


def _dump(client: Any, thread_id: str) -> dict[bytes, Any]:
    found = [k for k in client.scan_iter(match=b"*", count=1000)
             if thread_id.encode() in k]
    return {k: (client.type(k), client.dump(k) if client.type(k) != b"set" else
                sorted(client.smembers(k)), client.pttl(k)) for k in sorted(found)}


def test_a_log_row_popped_off_the_end_after_a_fork_is_refused_before_any_request(
        redis_url: str, redis_client: Any) -> None:
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2"), tool_call_reply("c3")])
    thread_id = f"lc-{uuid.uuid4().hex[:12]}"
    with open_database(redis_url, create=True, model_factory=lambda m, s: model) as db:
        db.run(thread_id, task=TASK, max_attempts=10, max_tokens=100)
        db.run(thread_id)
        config = {"configurable": {"thread_id": thread_id}}
        start = [s for s in db.graph.get_state_history(config) if s.next == ("budget",)][-1]
        db.graph.update_state(start.config, {"messages": [  # time travel: no reply shown
            {"role": "user", "content": "Answer in one line."}]})
    assert len(model.requests) == 2
    rows = redis_client.llen(keys.log_key(thread_id))
    redis_client.rpop(keys.log_key(thread_id))  # the last row
    lost = f"holds {rows - 1} rows, but its ledger row counted {rows}"
    before = _dump(redis_client, thread_id)
    code, shown = _json(history_main, ["--db", redis_url, "--thread", thread_id])
    assert (code, shown["error_code"]) == (4, "damaged"), shown
    assert lost in shown["error"]
    code, checked = _json(verify_main, ["--db", redis_url])
    assert code == 4 and any(thread_id in p and lost in p for p in checked["problems"])
    with (open_database(redis_url, model_factory=lambda m, s: model) as db,
          pytest.raises(RefusedError) as refused):
        db.run(thread_id)
    assert refused.value.error_code == "damaged" and lost in str(refused.value)
    assert len(model.requests) == 2
    assert _dump(redis_client, thread_id) == before


def test_a_log_from_before_the_count_reads_as_before_and_is_counted_from_its_next_append(
        redis_url: str, redis_client: Any) -> None:
    from graph.store.redis.tables import RedisAttemptLog, _row_digest

    log, thread_id = RedisAttemptLog(redis_client, redis_url), f"lc-{uuid.uuid4().hex[:12]}"
    redis_client.hset(keys.ledger_key(thread_id), mapping={
        "attempts": "2", "claimed": "2", "max_attempts": "4",
        "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00"})
    payload = {"outcome": "answer", "tool_calls": [], "usage": {"total_tokens": 10}}
    for attempt in (1, 2):  # rows as the program wrote them before the count
        row = {"attempt": attempt, "kind": "reason", "payload": payload,
               "created_at": "2026-01-01T00:00:00+00:00", "thread_id": thread_id,
               "seq": attempt - 1}
        redis_client.rpush(keys.log_key(thread_id), json.dumps({**row, "digest": _row_digest(row)}))
    assert log.used_tokens(thread_id) == 20
    redis_client.rpop(keys.log_key(thread_id))  # uncounted: not noticed, as before the count
    assert log.used_tokens(thread_id) == 10
    log.record(thread_id, 3, "reason", payload)
    assert redis_client.hget(keys.ledger_key(thread_id), "logged") == b"2"
    assert log.used_tokens(thread_id) == 20
    redis_client.rpop(keys.log_key(thread_id))
    with pytest.raises(RefusedError) as refused:
        log.used_tokens(thread_id)
    assert refused.value.error_code == "damaged" and "counted 2" in str(refused.value)
