"""The token cap (`--max-tokens`) counts every reply the thread paid for, forks included.

`AttemptLog.used_tokens` sums the whole attempt log, which a fork from an older checkpoint
does not shorten (the checkpoint's own totals do shrink). On Redis the log is a list an
outsider can trim: each row carries its place and a digest (`graph.store.redis.tables.log_row`),
so a log that lost rows at its start or middle is refused as damaged instead of lowering
the count (the forked checkpoint's smaller totals no longer hide it).
"""

from __future__ import annotations

from typing import Any

import pytest

from graph.api import open_database
from graph.errors import ErrorCode, RefusedError
from graph.store.redis import keys
from tests.conftest import run_cli
from tests.fakes import ScriptedModel, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def _paid_then_forked(backend: Any) -> tuple[Any, Any]:
    """Thread t1: two replies of 15 tokens each, then forked back before its first request,
    where the fork pays a third: (its checkpoint's total, `used_tokens`)."""
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2"), tool_call_reply("c3")])
    with open_database(backend.db, create=True, model_factory=lambda m, s: model) as db:
        db.run("t1", task=TASK, max_attempts=10, max_tokens=1000, once=True)
        db.run("t1", once=True)
        config = {"configurable": {"thread_id": "t1"}}
        start = [s for s in db.graph.get_state_history(config) if s.next == ("budget",)][-1]
        assert start.values["progress"]["usage"]["total_tokens"] == 0
        with db.invocation("t1") as context:  # the fork pays a third reply
            db.graph.invoke(None, start.config, context=context, durability="sync")
        forked = db.graph.get_state(config).values["progress"]["usage"]["total_tokens"]
        used = db.store.log.used_tokens("t1")
    return model, (forked, used)


def test_after_a_fork_the_cap_still_counts_every_paid_reply(backend: Any) -> None:
    model, (forked, used) = _paid_then_forked(backend)
    assert len(model.requests) == 3
    assert (forked, used) == (15, 45)


def test_a_redis_log_trimmed_after_a_fork_is_refused_before_any_request(backend: Any) -> None:
    if backend.name != "redis":
        pytest.skip("a Redis list only: SQL log rows keep no place of their own (not built)")
    model, _ = _paid_then_forked(backend)
    client = backend._client
    client.lpop(keys.log_key("t1"))  # the first reply's row: the fork's checkpoint shows 1 reply
    left = client.lrange(keys.log_key("t1"), 0, -1)
    out = run_cli(["--thread", "t1", "--once", "--db", backend.db],
                  model_factory=lambda m, s: model)
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    assert "t1" in out["error"]
    assert len(model.requests) == 3
    assert client.lrange(keys.log_key("t1"), 0, -1) == left
    with open_database(backend.db) as db, pytest.raises(RefusedError) as refused:
        db.store.log.used_tokens("t1")
    assert refused.value.error_code == ErrorCode.DAMAGED
