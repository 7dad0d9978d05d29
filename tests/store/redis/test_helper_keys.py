"""The keys a Redis database holds beside the threads: caches are rebuilt, data is checked.

Caches: the durability probe (`graph.store.redis.keys.FSYNC`, written only so `WAITAOF` has a
write of its own to wait for) and the module probe (`graph.store.redis.open.MODULE_PROBE`,
never written). Whatever is stored there, a step still waits for the fsync and still finds
the modules. Data: the store id that queued jobs carry (`graph.store.redis.open.STORE_ID`)
and the digest marker (`graph.store.redis.digests.DOCUMENTS_SINCE`): damaged, they are
refused with exit 4 naming the key, and a missing store id is created only on a database
that holds no thread yet.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
from typing import Any

import pytest

from graph.store.redis import keys
from graph.store.redis.conn import WAITAOF, make_durable
from graph.store.redis.digests import DOCUMENTS_SINCE
from graph.store.redis.open import CHECKPOINT_INDEX as CHECKPOINT_INDEX_NAME
from graph.store.redis.open import MODULE_PROBE, STORE_ID
from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"


@pytest.fixture
def client(redis_url: str) -> Any:
    from graph.store.redis.conn import connect

    found = connect(redis_url)
    found.flushall()  # a database of the test's own: it damages keys every thread shares
    try:
        yield found
    finally:
        found.flushall()  # the session server's next test finds no damaged shared key,
        found.set(STORE_ID, secrets.token_hex(16))  # and a store id, as a store leaves it
        found.close()


def _step(redis_url: str, *argv: str) -> dict[str, Any]:
    return run_cli(["--thread", "hk", "--once", "--db", redis_url, *argv])  # the offline model


def _history(redis_url: str) -> tuple[int, dict[str, Any]]:
    from graph.history import main as history

    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        code = history(["--db", redis_url, "--thread", "hk", "--json"])
    return code, json.loads(shown.getvalue())


@pytest.mark.parametrize("retype", ["hash", "list", "text"])
def test_a_damaged_durability_probe_is_rebuilt_and_the_wait_for_the_fsync_still_happens(
        client: Any, retype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client.delete(keys.FSYNC)
    {"hash": lambda: client.hset(keys.FSYNC, "a", "b"),
     "list": lambda: client.rpush(keys.FSYNC, "a"),
     "text": lambda: client.set(keys.FSYNC, "not a number")}[retype]()
    sent: list[tuple[Any, ...]] = []
    pipeline = client.pipeline

    def watched(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        execute = pipe.execute

        def recorded(*a: Any, **k: Any) -> Any:
            commands = [c[0] for c in pipe.command_stack]
            replies = execute(*a, **k)
            sent.extend(zip(commands, replies, strict=True))
            return replies
        pipe.execute = recorded
        return pipe
    monkeypatch.setattr(client, "pipeline", watched)
    make_durable(client, "test", "the write")
    assert client.type(keys.FSYNC) == b"string"
    assert not any(isinstance(reply, Exception) for _, reply in sent), sent
    assert any(args[:2] == WAITAOF[:2] and int(reply[0]) >= 1 for args, reply in sent), sent


def test_a_step_with_a_retyped_durability_probe_is_counted_and_waits(
        client: Any, redis_url: str) -> None:
    client.hset(keys.FSYNC, "a", "b")
    out = _step(redis_url, "--task", TASK)
    assert (out["exit_code"], out["status"]) == (0, "ready"), out
    assert client.type(keys.FSYNC) == b"string"


def test_a_string_at_the_module_probe_is_not_a_missing_module(client: Any, redis_url: str) -> None:
    assert _step(redis_url, "--task", TASK)["exit_code"] == 0
    client.set(MODULE_PROBE, "someone's text")
    assert _history(redis_url)[0] == 0
    out = _step(redis_url)
    assert out["exit_code"] == 0, out
    assert client.get(MODULE_PROBE) == b"someone's text"


def test_a_deleted_store_id_on_a_database_with_threads_is_refused_naming_the_key(
        client: Any, redis_url: str) -> None:
    assert _step(redis_url, "--task", TASK)["exit_code"] == 0
    client.delete(STORE_ID)
    out = _step(redis_url)
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    assert STORE_ID in out["error"]
    code, shown = _history(redis_url)
    assert (code, shown["error_code"]) == (4, "damaged")
    assert client.get(STORE_ID) is None  # never replaced by a new id jobs do not carry


@pytest.mark.parametrize("value", ["", "0" * 31, "g" * 32, "0" * 33])
def test_a_store_id_of_the_wrong_shape_is_refused_naming_the_key(
        client: Any, redis_url: str, value: str) -> None:
    assert _step(redis_url, "--task", TASK)["exit_code"] == 0
    client.set(STORE_ID, value)
    out = _step(redis_url)
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    assert STORE_ID in out["error"]
    assert client.get(STORE_ID) == value.encode()


def test_a_store_id_is_created_on_a_database_without_threads(client: Any, redis_url: str) -> None:
    out = _step(redis_url, "--task", TASK)
    assert out["exit_code"] == 0, out
    found = client.get(STORE_ID)
    assert found is not None and len(found) == 32


@pytest.mark.parametrize("damage", ["retyped", "not an id"])
def test_a_damaged_digest_marker_is_refused_naming_the_key(
        client: Any, redis_url: str, damage: str) -> None:
    assert _step(redis_url, "--task", TASK)["exit_code"] == 0
    if damage == "retyped":
        client.delete(DOCUMENTS_SINCE)
        client.hset(DOCUMENTS_SINCE, "a", "b")
    else:
        client.set(DOCUMENTS_SINCE, "yesterday")
    out = _step(redis_url)
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    assert DOCUMENTS_SINCE in out["error"]


def test_a_set_up_lock_of_the_wrong_type_is_refused_naming_the_key_at_once(
        client: Any, redis_url: str) -> None:
    """A hash at the set-up lock's key made every run on a database not yet set up wait
    the lock's 60 s, then exit 5 `busy`, until someone deleted it (issue 28's attack)."""
    from graph.store.redis.open import SETUP_LOCK

    client.flushall()  # a database never set up: the first run sets the indexes up
    assert CHECKPOINT_INDEX_NAME.encode() not in client.execute_command("FT._LIST")
    client.hset(SETUP_LOCK, "owner", "someone")
    out = _step(redis_url, "--task", TASK)
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    assert SETUP_LOCK in out["error"]
    assert client.hgetall(SETUP_LOCK) == {b"owner": b"someone"}


@pytest.mark.parametrize("kind", ["hash", "list", "set", "zset"])
def test_a_retyped_thread_lock_is_refused_by_run_history_and_verify_naming_the_key(
        client: Any, redis_url: str, kind: str) -> None:
    """A third attack: run refused a thread whose lock key held a hash, list, set or sorted
    set, while history and verify (which take no lock) said it was fine."""
    from graph.verify import main as verify_main

    assert _step(redis_url, "--task", TASK)["exit_code"] == 0
    lock = keys.lock_key("hk")
    {"hash": lambda: client.hset(lock, "x", "1"), "list": lambda: client.rpush(lock, "x"),
     "set": lambda: client.sadd(lock, "x"), "zset": lambda: client.zadd(lock, {"x": 1})}[kind]()
    out = _step(redis_url)
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
    code, shown = _history(redis_url)
    assert (code, shown["error_code"]) == (4, "damaged") and "mandapi-resume:lock:hk" in shown["error"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert verify_main(["--db", redis_url, "--json"]) == 4
    assert "mandapi-resume:lock:hk" in printed.getvalue()
    assert client.type(lock).decode() == kind  # left as it was
