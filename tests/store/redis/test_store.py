"""What only `--db redis://` (`graph.store.redis.open`) asks of its server, URL and keys, on a real
private server: prune leaves nothing of a buried thread but its tombstone, and burying needs
the thread's lease; damaged keys of a thread are refused; a server without the append-only
file or without the search and JSON modules, a URL the client would misread, and a database
never set up are refused before anything is written; a SQL thread older than the attempt log
is not copied to Redis; eight job slots of one worker set a fresh database up together; and a
server lost mid-step exits 6, not as a bug.

Redis only: each concerns keys, leases, servers or URLs that a SQL database has no
counterpart for. The behaviour every backend shares (the demo thread run to done, a busy
thread, history and verify, the checkpoint window, a crash mid-prune, copying, the Python
API, batch caps, first runs at once on a fresh database) runs on SQLite, PostgreSQL and
Redis alike in the behaviour's own test file (see `tests/MERGED.md`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.prune import main as prune_main
from graph.run import main as run_main
from graph.verify import main as verify_main
from tests.redis_server import start_server

TASK = "Find the capital of France"


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    from graph.store.redis.conn import connect

    client = connect(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def _module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One server for this module's tests that need a database to themselves (`own_url`)."""
    server = start_server(tmp_path_factory.mktemp("own"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_url(_module_server: Any) -> str:
    """An empty database of the test's own, for a test that reads or changes every thread in it
    (listing, verify, prune, copy) or needs one never set up: the session server holds other
    tests' threads, some damaged on purpose (their refusals are right there) or held by a killed
    process's lease. The module's server, emptied first (`FLUSHALL` also drops RediSearch's
    indexes: a database never set up), instead of a server started per test; the tests of a
    module run one at a time in one process, also under xdist."""
    import redis

    with redis.Redis.from_url(_module_server.url) as admin:
        admin.flushall()
        assert admin.dbsize() == 0 and admin.execute_command("FT._LIST") == []
    return str(_module_server.url)


@pytest.fixture
def own_client(own_url: str) -> Iterator[Any]:
    from graph.store.redis.conn import connect

    client = connect(own_url)
    yield client
    client.close()


def _thread() -> str:
    return f"rs-{uuid.uuid4().hex[:12]}"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = run_main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _to_done(capsys: pytest.CaptureFixture[str], db: str, thread_id: str, *extra: str) -> dict[str, Any]:
    code, out = _run(capsys, "--db", db, "--thread", thread_id, "--task", TASK, "--once", *extra)
    for _ in range(8):
        if out["status"] != "ready":
            break
        code, out = _run(capsys, "--db", db, "--thread", thread_id, "--once")
    assert code == 0, out
    return out


def _keys(client: Any, thread_id: str) -> set[bytes]:
    return {key for key in client.scan_iter(match=f"*{thread_id}*".encode()) if b"lock:" not in key}


def test_prune_buries_a_done_thread_and_a_later_task_is_refused_as_pruned(
        own_url: str, own_client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.store.redis import keys as redis_keys
    client = own_client
    thread_id = _thread()
    _to_done(capsys, own_url, thread_id)
    assert prune_main(["--db", own_url, "--completed", "0s"]) == 0
    assert f"pruned {thread_id}" in capsys.readouterr().out
    assert _keys(client, thread_id) == {redis_keys.tombstone_key(thread_id)}
    code, out = _run(capsys, "--db", own_url, "--thread", thread_id, "--task", TASK, "--once")
    assert code == 4 and out["error_code"] == "pruned"
    assert _keys(client, thread_id) == {redis_keys.tombstone_key(thread_id)}
    code, out = _run(capsys, "--db", own_url, "--thread", thread_id, "--task", TASK, "--once",
                     "--restart-pruned")
    assert (code, out["status"], out["attempts"]) == (0, "ready", 1)
    assert redis_keys.tombstone_key(thread_id) not in _keys(client, thread_id)


def test_burying_without_the_threads_lease_is_refused_and_changes_nothing(
        redis_url: str, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.errors import BusyError
    from graph.store import open_store
    from graph.store.redis.locks import RedisThreadLocks
    from graph.store.rows import Tombstone

    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    before = _keys(client, thread_id)
    with open_store(redis_url, create=False) as store:
        with pytest.raises(BusyError):
            store.bury(Tombstone(thread_id, "done", "2026-01-01T00:00:00+00:00"))
        with RedisThreadLocks(client, redis_url).hold(thread_id), pytest.raises(BusyError):
            store.bury(Tombstone(thread_id, "done", "2026-01-01T00:00:00+00:00"))
    assert _keys(client, thread_id) == before


@pytest.mark.parametrize(("key", "value"), [("tombstone", b"not a hash"), ("log", b"[not json"),
                                            ("ledger", b"not a hash")])
def test_damaged_keys_of_a_thread_are_refused(redis_url: str, client: Any, key: str, value: bytes,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Refused with exit 4 by run and verify; a key is named as text, never `b'...'`."""
    from graph.store.redis import keys as redis_keys
    thread_id = _thread()
    _to_done(capsys, redis_url, thread_id)
    if key == "tombstone":
        client.set(redis_keys.tombstone_key(thread_id), value)
    elif key == "ledger":
        client.delete(redis_keys.ledger_key(thread_id))
        client.set(redis_keys.ledger_key(thread_id), value)
    else:
        client.rpush(redis_keys.log_key(thread_id), value)
    code, out = _run(capsys, "--db", redis_url, "--thread", thread_id, "--once")
    assert code == 4 and out["error_code"] == "damaged"
    assert "b'mandapi-resume:" not in out["error"], out["error"]
    assert verify_main(["--db", redis_url]) == 4
    client.delete(redis_keys.tombstone_key(thread_id), redis_keys.log_key(thread_id),
                  redis_keys.ledger_key(thread_id))


def test_a_server_without_the_append_only_file_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import redis

    server = start_server(tmp_path / "no-aof", appendonly=False)
    try:
        code, out = _run(capsys, "--db", server.url, "--thread", "t1", "--task", TASK, "--once")
        assert code == 2 and out["error_code"] == "db_not_durable"
        assert redis.Redis.from_url(server.url).dbsize() == 0
    finally:
        server.stop()


def test_resuming_on_a_database_never_set_up_is_refused(
        own_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "--db", own_url, "--thread", "t1", "--once")
    assert code == 4 and out["error_code"] == "no_such_file"


def test_copy_to_redis_refuses_a_thread_whose_replies_predate_the_attempt_log(
        own_url: str, own_client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Redis cross-checks the log against the replies (`RedisAttemptLog.covers`): an SQL
    thread made before the log existed would be refused there at its next step, so the
    copy refuses it up front, writing nothing; an SQL target still takes it."""
    import sqlite3
    from contextlib import closing

    from graph.copy import main as copy_main

    thread_id, first = _thread(), str(tmp_path / "old.sqlite")
    assert _run(capsys, "--db", first, "--thread", thread_id, "--task", TASK, "--once")[0] == 0
    with closing(sqlite3.connect(first)) as conn, conn:
        conn.execute("DELETE FROM attempt_log")  # as in a database older than the log
    capsys.readouterr()
    assert copy_main(["--from", first, "--to", own_url, "--thread", thread_id, "--json"]) == 4
    out = json.loads(capsys.readouterr().out)
    assert out["error_code"] == "incompatible" and "predate the attempt log" in out["error"]
    assert not _keys(own_client, thread_id), "nothing of the thread was written"
    assert copy_main(["--from", first, "--to", str(tmp_path / "new.sqlite")]) == 0


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:notaport/0", "redis://127.0.0.1:99999/0", "redis://127.0.0.1:-1/0",
    "redis://[::1/0", "redis://", "redis://127.0.0.1:0/0", "redis://127.0.0.1:{port}/xyz",
    "redis://127.0.0.1:{port}/0/1", "redis://127.0.0.1:{port}/7", "redis://127.0.0.1:{port}/0?db=3",
    "redis://127.0.0.1:{port}/0?socket_timeout=abc",
    "rediss://127.0.0.1:{port}/0?ssl_cert_reqs=bogus", "rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none",
    "redis://127.0.0.1:{port}/0?db=3&db=0", "redis://127.0.0.1/0?port={port}",
    "redis://127.0.0.1:{port}/0?decode_responses=1", "redis://127.0.0.1:{port}/0?retry=1",
    "redis://127.0.0.1:1/0?password=hunter2"])
def test_a_redis_url_the_client_would_misread_is_a_usage_error_and_writes_nothing(
        url: str, own_url: str, own_client: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad ports and query values were exit 1 (the client's ValueError or TypeError); a path
    or `?db=` naming another database (the first of two), `?port=`, or a URL with no host,
    reached another database or server than written (localhost:6379 among them), and a
    query password was shown. Only database 0 is taken: RediSearch's indexes span a
    server's database numbers (`graph.store.urls.check_redis_url`). `rediss://` to this plain
    server is refused when its TLS handshake times out: after `CONNECT_TIMEOUT_S`, 1 s
    here instead of 10 (`tests/store/redis/test_connect.py` shows it is not the 30 s command
    timeout)."""
    monkeypatch.setattr("graph.store.redis.conn.CONNECT_TIMEOUT_S", 1.0)
    url = url.replace("{port}", own_url.rsplit(":", 1)[1].split("/")[0])
    code, out = _run(capsys, "--db", url, "--thread", "u1", "--task", TASK, "--once")
    assert code == 2 and out["error_code"] in ("usage", "db_unreachable"), out
    assert "Redis" in out["error"] and own_client.dbsize() == 0
    assert "hunter2" not in json.dumps(out), "a password in the query is shown"


def test_a_server_without_the_search_and_json_modules_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was exit 6 (`db_write_failed`, "unknown command 'FT.INFO'"): a scheduler retries
    exit 6, but no retry brings the modules."""
    import redis

    server = start_server(tmp_path / "bare", modules=False)
    try:
        code, out = _run(capsys, "--db", server.url, "--thread", "m1", "--task", TASK, "--once")
        assert (code, out["error_code"]) == (2, "usage") and "modules" in out["error"], out
        assert redis.Redis.from_url(server.url).dbsize() == 0
    finally:
        server.stop()


def test_steps_at_once_in_one_worker_on_a_fresh_database_all_succeed(
        own_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight job slots of one queue worker opening stores while one sets the database up:
    the module probe once read the set-up lock's key, a string meanwhile, and failed
    those steps `db_write_failed` (exit 6), ending their threads' job chains."""
    from concurrent.futures import ThreadPoolExecutor

    from graph.fleet.worker import run_step
    from tests.fake_mandapi import FakeMandApi

    with FakeMandApi(tmp_path / "requests.jsonl", hold_s=0.2) as fake:
        monkeypatch.setenv("MANDAPI_API_KEY", "sk-worker-000000")
        monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-worker")
        monkeypatch.setenv("MANDAPI_BASE_URL", fake.base_url)
        with ThreadPoolExecutor(8) as pool:
            reports = list(pool.map(lambda i: run_step(
                own_url, f"w{i}", {"task": f"[w{i}] {TASK}"}, True, None), range(24)))
    assert [r.result["exit_code"] for r in reports] == [0] * 24, [
        r.result for r in reports if r.result["exit_code"]]


def test_a_redis_server_lost_mid_step_exits_6_not_as_a_bug(
        redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import redis

    from graph.store.redis.saver import CheckedRedisSaver

    thread_id = _thread()
    assert _run(capsys, "--db", redis_url, "--thread", thread_id, "--task", TASK, "--once")[0] == 0

    def lost(*_args: Any, **_kwargs: Any) -> None:
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(CheckedRedisSaver, "put", lost)
    code, out = _run(capsys, "--db", redis_url, "--thread", thread_id, "--once")
    assert code == 6 and out["error_code"] == "db_lost"
