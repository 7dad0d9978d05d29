"""Retention by TTL on Redis (`graph.store.redis.ttl`, `graph.store.redis.expiring`): a finished thread's keys
all expire, a thread that can continue never does, and an expired thread (wholly or in part) is
refused as `pruned` (exit 4) without counting an attempt, unless restarted on purpose.

Redis only: a SQL database has no key expiry; `graph.prune` applies the same retention
rules on every backend (`tests/threads/test_retention.py`), and these tests hold the TTLs, the
expiring marks and the partly expired threads that only Redis can have to them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.prune import main as prune_main
from graph.run import main as run_main
from graph.store.redis.ttl import COMPLETED_ENV, FAILED_ENV
from tests.redis_server import start_server

TASK = "Find the capital of France"
DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    from graph.store.redis.conn import connect

    client = connect(redis_url)
    yield client
    client.close()


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A server of the test's own and a client of it, for a test that runs `graph.prune` (it
    reads and changes every thread; the session server holds other tests' threads)."""
    from graph.store.redis.conn import connect

    server = start_server(tmp_path / "own")
    client = connect(server.url)
    try:
        yield server.url, client
    finally:
        client.close()
        server.stop()


@pytest.fixture(autouse=True)
def _default_ages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COMPLETED_ENV, raising=False)
    monkeypatch.delenv(FAILED_ENV, raising=False)


def _thread() -> str:
    return f"ttl-{uuid.uuid4().hex[:12]}"


def _run(capsys: pytest.CaptureFixture[str], db: str, thread_id: str,
         *extra: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = run_main(["--db", db, "--thread", thread_id, "--once", *extra, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _to_done(capsys: pytest.CaptureFixture[str], db: str, thread_id: str) -> dict[str, Any]:
    code, out = _run(capsys, db, thread_id, "--task", TASK)
    for _ in range(8):
        if out["status"] != "ready":
            break
        code, out = _run(capsys, db, thread_id)
    assert code == 0 and out["status"] == "done", out
    return out


def _thread_keys(client: Any, thread_id: str) -> dict[bytes, int]:
    """Every key naming the thread (but its lock and mark) and its PTTL (-1: none)."""
    found = {key for key in client.scan_iter(match=f"*{thread_id}*".encode(), count=1000)
             if b":lock:" not in key and b":expiring:" not in key
             and b":tombstone:" not in key}
    return {key: client.pttl(key) for key in found}


def _expire_now(client: Any, keys: list[bytes]) -> None:
    """Expires `keys` as their TTL would (an expiry time in the past removes a key at once)."""
    for key in keys:
        client.pexpireat(key, 1)


def _attempts(client: Any, thread_id: str) -> bytes | None:
    from graph.store.redis import keys as redis_keys
    value: bytes | None = client.hget(redis_keys.ledger_key(thread_id), "attempts")
    return value


def _tombstoned(db: str) -> set[str]:
    from graph.store import open_store

    with open_store(db, create=False, read_only=True) as store:
        return store.tombstones.thread_ids()


def test_every_key_of_a_done_thread_gets_a_ttl_of_24_hours(
        redis_url: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.store.redis import keys as redis_keys
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    ttls = _thread_keys(client, thread_id)
    names = b" ".join(ttls)
    for family in (b"checkpoint:", b"checkpoint_write:", b"checkpoint_latest:", b"ledger:",
                   b"log:", b"digests:", b"saved:"):
        assert family in names, family
    assert all(DAY_MS - 600_000 < ttl <= DAY_MS for ttl in ttls.values()), ttls
    assert client.ttl(redis_keys.tombstone_key(thread_id)) == -2  # no tombstone yet
    code, out = _run(capsys, redis_url, thread_id)
    assert (code, out["status"]) == (0, "done")  # whole until it expires
    assert thread_id not in _tombstoned(redis_url)


def test_a_ready_thread_has_no_key_with_a_ttl(
        redis_url: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    thread_id = _thread()
    code, out = _run(capsys, redis_url, thread_id, "--task", TASK)
    assert (code, out["status"]) == (0, "ready")
    ttls = _thread_keys(client, thread_id)
    assert ttls and all(ttl == -1 for ttl in ttls.values()), ttls


def test_a_cancelled_thread_gets_the_failed_age_of_7_days(
        redis_url: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    thread_id = _thread()
    _run(capsys, redis_url, thread_id, "--task", TASK)
    code, out = _run(capsys, redis_url, thread_id, "--cancel")
    assert (code, out["status"]) == (0, "cancelled")
    ttls = _thread_keys(client, thread_id)
    assert ttls and all(7 * DAY_MS - 600_000 < ttl <= 7 * DAY_MS for ttl in ttls.values()), ttls


def test_the_ledger_row_of_an_expired_thread_is_never_created_again(
        redis_url: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.errors import RefusedError
    from graph.store import open_store

    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    _expire_now(client, list(_thread_keys(client, thread_id)))
    with open_store(redis_url, create=False) as store, store.locks.hold(thread_id):
        with pytest.raises(RefusedError) as refused:  # keys expired after the tombstone check
            store.ledger.create(thread_id, 4)
    assert refused.value.error_code == "pruned"
    assert _attempts(client, thread_id) is None


def test_the_configured_age_applies(redis_url: str, client: Any, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(COMPLETED_ENV, "90s")
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    ttls = _thread_keys(client, thread_id)
    assert ttls and all(80_000 < ttl <= 90_000 for ttl in ttls.values()), ttls


def test_with_an_age_of_0s_a_done_thread_expires_by_itself_and_leaves_its_mark(
        redis_url: str, client: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(COMPLETED_ENV, "0s")
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    assert _thread_keys(client, thread_id) == {}  # the server removed them, not a test
    assert client.exists(f"mandapi-resume:expiring:{thread_id}".encode()) == 1
    code, out = _run(capsys, redis_url, thread_id, "--task", TASK)
    assert (code, out["error_code"]) == (4, "pruned")


def test_an_unreadable_age_is_refused_as_a_usage_error(
        redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(FAILED_ENV, "a week")
    capsys.readouterr()
    assert run_main(["--db", redis_url, "--thread", _thread(), "--task", TASK, "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error_code"] == "usage"


def test_an_expired_thread_is_refused_as_pruned_without_counting(
        redis_url: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    _expire_now(client, list(_thread_keys(client, thread_id)))
    assert _thread_keys(client, thread_id) == {}
    code, out = _run(capsys, redis_url, thread_id, "--task", TASK)
    assert (code, out["error_code"]) == (4, "pruned")
    assert _thread_keys(client, thread_id) == {}  # no attempt, no ledger row
    assert thread_id in _tombstoned(redis_url)
    code, out = _run(capsys, redis_url, thread_id, "--task", TASK)
    assert (code, out["error_code"]) == (4, "pruned")


@pytest.mark.parametrize("part", [b"ledger:", b"checkpoint:"])
def test_a_partly_expired_thread_is_refused_as_pruned_and_never_restarted(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str], part: bytes) -> None:
    redis_url, client = own
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    before = _attempts(client, thread_id)
    _expire_now(client, [key for key in _thread_keys(client, thread_id) if part in key])
    for _ in range(2):
        code, out = _run(capsys, redis_url, thread_id, "--task", TASK)
        assert (code, out["error_code"]) == (4, "pruned")
    assert _attempts(client, thread_id) in (None, before)
    assert prune_main(["--db", redis_url]) == 0  # sweeps what is left
    assert _thread_keys(client, thread_id) == {}
    code, out = _run(capsys, redis_url, thread_id, "--task", TASK)
    assert (code, out["error_code"]) == (4, "pruned")


def test_restart_pruned_after_expiry_starts_anew_without_ttls(
        redis_url: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    keys = list(_thread_keys(client, thread_id))
    _expire_now(client, [key for key in keys if b"checkpoint" in key])  # the log is left
    code, out = _run(capsys, redis_url, thread_id, "--task", TASK, "--restart-pruned")
    assert (code, out["status"], out["attempts"]) == (0, "ready", 1)
    ttls = _thread_keys(client, thread_id)
    assert ttls and all(ttl == -1 for ttl in ttls.values()), ttls


def test_prune_applies_the_same_rule_at_once_on_redis(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    redis_url, client = own
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    assert prune_main(["--db", redis_url, "--completed", "0s"]) == 0
    assert _thread_keys(client, thread_id) == {}
    assert client.exists(f"mandapi-resume:expiring:{thread_id}".encode()) == 0
    code, out = _run(capsys, redis_url, thread_id, "--task", TASK)
    assert (code, out["error_code"]) == (4, "pruned")


def test_a_finished_threads_ttl_and_mark_survive_a_server_restart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.store.redis.conn import connect

    server = start_server(tmp_path / "redis", private=True)
    thread_id = _thread()
    try:
        _to_done(capsys, server.url, thread_id)
        server.stop()
        folder, url = server.folder, server.url
        server = start_server(folder, private=True)  # same folder: the AOF is loaded again
        client = connect(server.url)
        try:
            ttls = _thread_keys(client, thread_id)
            assert ttls and all(0 < ttl <= DAY_MS for ttl in ttls.values()), (url, ttls)
            _expire_now(client, list(ttls))
            code, out = _run(capsys, server.url, thread_id, "--task", TASK)
            assert (code, out["error_code"]) == (4, "pruned")
        finally:
            client.close()
    finally:
        server.stop()
