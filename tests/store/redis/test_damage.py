"""Damage to this project's own Redis keys is refused before any request, changing nothing.

For every key kind `graph.store.redis.keys` names (ledger hash and each of its fields, attempt
log, tombstone, decisions, digest hash and set, saved set, writer lock, request cap):
values edited, a key or field deleted, a key retyped, and values copied from another
thread. Each case damages a live thread (two steps in, one more to go; the other thread
is one step in) on a private server, then: the next `graph.run --once --live` exits 4
(`damaged`, or `pruned` for a tombstone; a foreign writer lock is `busy`, exit 5) with
zero requests at the fake MandAPI server; `graph.history` and `graph.verify` never exit
1, and one of them refuses or lists the damage; and every key's DUMP is unchanged.

Redis only: these are the key kinds of `graph.store.redis.keys`, a layout a SQL database does not
have; damage to SQL rows and files, and to stored values on every backend, is in
`tests/checkpoints/test_damage.py` and `tests/store/test_damage_corpus.py`.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from graph.store.redis import keys
from tests.conftest import run_cli
from tests.fake_mandapi import FakeMandApi
from tests.redis_server import RedisServer
from tests.step.test_approvals import Writer

TASK = "How long does shipping take at the demo shop?"
WRITE_TASK = "Write the shipping summary to report.md and log it."
NOW = "2026-01-01T00:00:00.000000+00:00"
Damage = Callable[[Any, str, str], None]
"""(client, damaged thread A, other thread B) -> None."""


@dataclass(frozen=True)
class Case:
    """One damage, and the `error_code` the run answers with (exit 4 unless `busy`)."""

    damage: Damage
    code: str = "damaged"
    writer: bool = False
    """Damage the thread paused for review (its decisions), not the demo thread."""
    read: bool = True
    """`graph.history` refuses it or `graph.verify` lists it (a lock key they never read)."""
    gap: str = ""
    """Not refused yet (the run sends its request): the case is a strict xfail saying why."""


@pytest.fixture(scope="module")
def server(module_redis_server: RedisServer) -> RedisServer:
    """This module's own server (`tests.redis_server.module_redis_server`)."""
    return module_redis_server


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeMandApi]:
    with FakeMandApi(tmp_path_factory.mktemp("fake") / "requests.jsonl", tool_rounds=3) as found:
        yield found


@pytest.fixture
def client(server: RedisServer) -> Iterator[Any]:
    import redis

    found = redis.Redis.from_url(server.url)
    try:
        yield found
    finally:
        found.close()


@dataclass
class Template:
    """Threads built once per module; for each case their keys are restored byte for byte
    (DUMP, RESTORE, after deleting whatever the last case left), so the state a case damages
    is exactly what the steps stored, without running the steps again per case."""

    threads: tuple[str, ...]
    """The two threads a case damages and compares (A, B)."""
    keys: dict[bytes, tuple[bytes, int]]
    """Every key naming one of `names`: (DUMP, PTTL, -1 for none), by key."""
    names: tuple[str, ...]
    """The threads and request caps whose keys are restored (every such key names one)."""
    out_dir: Path | None = None
    """The writes folder the threads were created with (its path is stored in them)."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Its files as the threads left them, restored too."""
    model: Any = None
    """The scripted model that made the threads (the case's run may not ask it anything)."""

    def restore(self, client: Any) -> None:
        _forget(client, *self.names)
        if self.out_dir is not None:
            for path in self.out_dir.iterdir():
                path.unlink()
            for name, data in self.files.items():
                (self.out_dir / name).write_bytes(data)
        pipe = client.pipeline(transaction=False)
        for key, (dumped, pttl) in self.keys.items():
            pipe.restore(key, max(pttl, 0), dumped)
        pipe.execute()


def _template(client: Any, threads: tuple[str, ...], history: Callable[[str], str], *,
              caps: tuple[str, ...] = (), out_dir: Path | None = None, model: Any = None
              ) -> Template:
    """Snapshots the keys of `threads` and `caps` (and the writes folder), then deletes them.

    Checks once that a restore reads back as built: `graph.history` of each thread, which
    also lists by LangGraph's search index (RESTORE indexes the documents again).
    """
    names = (*threads, *caps)
    found = [key for name in names for key in client.scan_iter(match=f"*{name}*", count=1000)]
    template = Template(threads, {key: (client.dump(key), client.pttl(key)) for key in found},
                        names, out_dir,
                        {p.name: p.read_bytes() for p in out_dir.iterdir()} if out_dir else {},
                        model)
    built = [history(t) for t in threads]
    template.restore(client)
    assert [history(t) for t in threads] == built, "a restored thread reads back otherwise"
    _forget(client, *names)
    return template


@pytest.fixture(scope="module")
def templates(server: RedisServer, fake: FakeMandApi,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Template]]:
    """`live`: thread A two steps in, B one step in (`_step`); `writer`: A and B paused for
    review (`_writer`); `caps`: A two steps and B one step in batches under request caps
    (`graph.batch --max-requests` 9 for A's, 5 for B's)."""
    import redis

    from graph.batch import main as batch
    from graph.history import main as history_main

    folder = tmp_path_factory.mktemp("templates")
    out_dir = folder / "out"
    out_dir.mkdir()
    (out_dir / "log.txt").write_text("start\n")
    client = redis.Redis.from_url(server.url)
    db = server.url

    def history(thread_id: str) -> str:
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            assert history_main(["--db", db, "--thread", thread_id, "--json"]) == 0
        return shown.getvalue()

    def batch_step(thread_id: str, cap: str, maximum: str) -> None:
        tasks = folder / f"{thread_id}.jsonl"
        tasks.write_text(json.dumps({"thread_id": thread_id, "task": f"[{thread_id}] {TASK}"})
                         + "\n")
        with contextlib.redirect_stdout(io.StringIO()):
            assert batch([str(tasks), "--once", "--live", "--max-requests", maximum,
                          "--batch-id", cap, "--db", db, "--json"]) == 0

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(folder)
            mp.setenv("MANDAPI_API_KEY", "sk-redis-damage-012")
            mp.setenv("MANDAPI_BASE_URL", fake.base_url)
            _step(db, "rd-live-a", 2)
            _step(db, "rd-live-b", 1)
            live = _template(client, ("rd-live-a", "rd-live-b"), history)
            model = _writer(db, "rd-writer-a", out_dir)
            _writer(db, "rd-writer-b", out_dir)
            writer = _template(client, ("rd-writer-a", "rd-writer-b"), history, out_dir=out_dir,
                               model=model)
            mp.setenv("MANDAPI_MODEL_ID", "mandapi-large")
            for args in (("rd-capped-a", "rd-cap-a", "9"), ("rd-capped-a", "rd-cap-a", "9"),
                         ("rd-capped-b", "rd-cap-b", "5")):
                batch_step(*args)
            caps = _template(client, ("rd-capped-a", "rd-capped-b"), history,
                             caps=("rd-cap-a", "rd-cap-b"))
        yield {"live": live, "writer": writer, "caps": caps}
    finally:
        client.close()


def _step(db: str, thread_id: str, times: int) -> None:
    for _ in range(times):
        out = run_cli(["--thread", thread_id, "--task", f"[{thread_id}] {TASK}", "--model",
                       "mandapi-large", "--live", "--once", "--db", db])
        assert (out["status"], out["exit_code"]) == ("ready", 0), out


def _writer(db: str, thread_id: str, out_dir: Path) -> Writer:
    """A thread paused for review of two writes, the first approved already."""
    model = Writer()
    for argv in (["--task", WRITE_TASK, "--allow-writes", str(out_dir)], [], ["--approve", "w1"]):
        out = run_cli(["--thread", thread_id, "--once", "--db", db, *argv],
                      model_factory=lambda m, s: model)
        assert out["status"] == "awaiting_approval", out
    return model


def _snapshot(client: Any) -> dict[bytes, bytes]:
    """Every key's DUMP (type, value and encoding), by key."""
    return {key: client.dump(key) for key in client.scan_iter(count=1000)}


# ---- damages ------------------------------------------------------------------------

def _hset(key: Callable[[str], bytes], field: str, value: bytes | str) -> Damage:
    return lambda c, a, b: c.hset(key(a), field, value)


def _hdel(key: Callable[[str], bytes], field: str) -> Damage:
    return lambda c, a, b: c.hdel(key(a), field)


def _delete(key: Callable[[str], bytes]) -> Damage:
    return lambda c, a, b: c.delete(key(a))


def _retype(key: Callable[[str], bytes], kind: str = "string") -> Damage:
    def damage(c: Any, a: str, b: str) -> None:
        c.delete(key(a))
        if kind == "string":
            c.set(key(a), "not what was stored")
        elif kind == "list":
            c.rpush(key(a), "not what was stored")
        elif kind == "set":
            c.sadd(key(a), "not what was stored")
        else:
            c.hset(key(a), "not", "what was stored")
    return damage


def _copy(key: Callable[[str], bytes]) -> Damage:
    """Thread B's key, byte for byte, over thread A's."""
    return lambda c, a, b: c.restore(key(a), 0, c.dump(key(b)), replace=True)


def _latest_digest(thread_id: str) -> Callable[[Any], bytes]:
    return lambda c: max(c.smembers(keys.digests_key(thread_id)))


def _digest(edit: Callable[[Any, bytes, str, str], None]) -> Damage:
    return lambda c, a, b: edit(c, max(c.smembers(keys.digests_key(a))), a, b)


def _log_edit(index: int, edit: Callable[[dict[str, Any]], Any]) -> Damage:
    def damage(c: Any, a: str, b: str) -> None:
        row = json.loads(c.lindex(keys.log_key(a), index))
        edit(row)
        c.lset(keys.log_key(a), index, json.dumps(row))
    return damage


def _set_attempt(row: dict[str, Any]) -> None:
    row["attempt"] = 7


def _set_kind(row: dict[str, Any]) -> None:
    row["kind"] = "other"


def _set_usage(row: dict[str, Any]) -> None:
    row["payload"]["usage"] = {"total_tokens": "many"}


L, LOG, T, AP = keys.ledger_key, keys.log_key, keys.tombstone_key, keys.approvals_key
DG, SV, LK = keys.digests_key, keys.saved_key, keys.lock_key

CASES: dict[str, Case] = {
    # the ledger hash and each field
    "ledger attempts lowered": Case(_hset(L, "attempts", "1")),
    "ledger attempts not a number": Case(_hset(L, "attempts", "two")),
    "ledger attempts not canonical": Case(_hset(L, "attempts", "02")),
    "ledger attempts above maximum": Case(_hset(L, "attempts", "9")),
    "ledger claimed lowered": Case(_hset(L, "claimed", "1")),
    "ledger claimed above attempts": Case(_hset(L, "claimed", "3")),
    "ledger claimed negative": Case(_hset(L, "claimed", "-1")),
    "ledger maximum lowered": Case(_hset(L, "max_attempts", "2")),
    "ledger maximum raised": Case(_hset(L, "max_attempts", "40")),
    "ledger created_at not a time": Case(_hset(L, "created_at", "yesterday")),
    "ledger updated_at not UTF-8": Case(_hset(L, "updated_at", b"\xff\xfe")),
    "ledger field deleted": Case(_hdel(L, "claimed")),
    "ledger field added": Case(_hset(L, "extra", "1")),
    "ledger deleted": Case(_delete(L)),
    "ledger retyped to a string": Case(_retype(L)),
    "ledger retyped to a list": Case(_retype(L, "list")),
    "ledger copied from another thread": Case(_copy(L)),
    # the attempt log
    "log deleted": Case(_delete(LOG)),
    "log retyped to a hash": Case(_retype(LOG, "hash")),
    "log row not JSON": Case(lambda c, a, b: c.lset(LOG(a), 0, "not json")),
    "log row attempt edited": Case(_log_edit(-1, _set_attempt)),
    "log row kind edited": Case(_log_edit(0, _set_kind)),
    "log row usage edited": Case(_log_edit(0, _set_usage)),
    "log row deleted": Case(lambda c, a, b: c.rpop(LOG(a))),
    "log row added": Case(lambda c, a, b: c.rpush(LOG(a), c.lindex(LOG(a), -1))),
    "log copied from another thread": Case(_copy(LOG)),
    "log row swapped for the other thread's": Case(lambda c, a, b: c.lset(LOG(a), 0, c.lindex(
        LOG(b), 0))),  # same attempt, kind and tokens: only the row's thread tells them apart
    # tombstones
    "tombstone on a live thread": Case(lambda c, a, b: c.hset(
        T(a), mapping={"final_status": "done", "pruned_at": NOW}), code="pruned"),
    "tombstone of the wrong form": Case(lambda c, a, b: c.hset(
        T(a), mapping={"final_status": "running", "pruned_at": NOW})),
    "tombstone retyped to a string": Case(_retype(T)),
    "tombstone copied from a pruned thread": Case(lambda c, a, b: (
        c.hset(T(b), mapping={"final_status": "done", "pruned_at": NOW}), _copy(T)(c, a, b)),
        code="pruned"),
    # digests: the latest checkpoint's hash, and the thread's set of them
    "digest edited": Case(_digest(lambda c, k, a, b: c.hset(k, "\0metadata", "0" * 64))),
    "digest field deleted": Case(_digest(lambda c, k, a, b: c.hdel(k, "\0metadata"))),
    "digest field added": Case(_digest(lambda c, k, a, b: c.hset(k, "extra", "0" * 64))),
    "digest hash deleted": Case(_digest(lambda c, k, a, b: c.delete(k))),
    "digest hash retyped": Case(_digest(lambda c, k, a, b: (c.delete(k), c.set(k, "x")))),
    "digest hash copied from another thread": Case(_digest(lambda c, k, a, b: c.restore(
        k, 0, c.dump(_latest_digest(b)(c)), replace=True))),
    "digest set deleted": Case(_delete(DG)),
    "digest set retyped": Case(_retype(DG)),
    "digest set copied from another thread": Case(_copy(DG)),
    # the saved set
    "saved set deleted": Case(_delete(SV)),
    "saved set retyped": Case(_retype(SV, "list")),
    "saved set copied from another thread": Case(_copy(SV)),
    "saved set with a newer checkpoint": Case(lambda c, a, b: c.sadd(
        SV(a), "\0" + "1ffffffff-ffff-6fff-8fff-ffffffffffff")),
    # LangGraph's latest checkpoint document, as its search index finds it (a load by key
    # never reads these fields; history and verify list by the index)
    "latest checkpoint indexed as the other thread's": Case(lambda c, a, b: c.json().set(
        c.get(f"checkpoint_latest:{a}:__empty__"), "$.thread_id", b)),
    # the writer lock
    "lock held by another token": Case(lambda c, a, b: c.set(LK(a), "0" * 32, px=60_000),
                                       code="busy"),
    "lock retyped to a hash": Case(_retype(LK, "hash"), read=False),
    # decisions on write calls (the thread paused for review)
    "decision edited to neither approve nor reject": Case(lambda c, a, b: c.hset(
        AP(a), "1:w1", c.hget(AP(a), "1:w1").replace(b'"approve"', b'"perhaps"')), writer=True),
    "decision not JSON": Case(_hset(AP, "1:w1", "not json"), writer=True),
    "decision for another call": Case(lambda c, a, b: c.hset(AP(a), "1:w9", c.hget(
        AP(a), "1:w1")), writer=True),
    "decisions retyped": Case(_retype(AP), writer=True),
    "decisions copied from another thread": Case(_copy(AP), writer=True),
}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=case.gap)) if case.gap
    else name for name, case in CASES.items()])
def test_damaged_redis_key_is_refused_before_any_request_and_left_unchanged(
    name: str, server: RedisServer, fake: FakeMandApi, client: Any, templates: dict[str, Template],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest
) -> None:
    case = CASES[name]
    template = templates["writer" if case.writer else "live"]
    db, (a, b) = server.url, template.threads
    request.addfinalizer(lambda: _forget(client, *template.names))
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-redis-damage-012")
    monkeypatch.setenv("MANDAPI_BASE_URL", fake.base_url)
    template.restore(client)
    model = template.model
    case.damage(client, a, b)
    before, sent = _snapshot(client), len(fake.requests_for(f"[{a}]"))
    asked = len(model.requests) if model else 0
    argv = ["--thread", a, "--once", "--db", db, *([] if case.writer else ["--live"])]
    out = run_cli(argv, **({"model_factory": lambda m, s: model} if model else {}))
    assert (out["error_code"], out["exit_code"]) == (
        case.code, 5 if case.code == "busy" else 4), out
    assert len(fake.requests_for(f"[{a}]")) == sent
    assert (len(model.requests) if model else 0) == asked
    history, verify, problems = _readers(db, a, capsys)
    assert history != 1 and verify != 1, (history, verify, problems)
    if case.code == "damaged" and case.read:  # refused by history, or listed by verify (earlier cases' too)
        assert history == 4 or any(a in p for p in problems), (history, problems)
    assert _snapshot(client) == before


def _forget(client: Any, *thread_ids: str) -> None:
    """Deletes every key of the case's threads, so later cases verify a small database."""
    for thread_id in thread_ids:
        found = list(client.scan_iter(match=f"*{thread_id}*", count=1000))
        if found:
            client.delete(*found)


def _readers(db: str, thread_id: str, capsys: pytest.CaptureFixture[str]
             ) -> tuple[int, int, list[str]]:
    """`graph.history --thread`'s and `graph.verify`'s exit codes, and verify's problems."""
    from graph.history import main as history
    from graph.verify import main as verify

    capsys.readouterr()
    shown = history(["--db", db, "--thread", thread_id, "--json"])
    capsys.readouterr()
    checked = verify(["--db", db, "--json"])
    return shown, checked, json.loads(capsys.readouterr().out).get("problems") or []


CAP_CASES: dict[str, tuple[Damage, str]] = {
    # name: (damage to cap A, given cap B; the refusal's error_code)
    "cap count not a number": (lambda c, a, b: c.hset(keys.cap_key(a), "requests", "two"),
                               "damaged"),
    "cap count above its maximum": (lambda c, a, b: c.hset(keys.cap_key(a), "requests", "10"),
                                    "damaged"),
    "cap maximum not canonical": (lambda c, a, b: c.hset(keys.cap_key(a), "max_requests", "09"),
                                  "damaged"),
    "cap field deleted": (lambda c, a, b: c.hdel(keys.cap_key(a), "requests"), "damaged"),
    "cap field added": (lambda c, a, b: c.hset(keys.cap_key(a), "extra", "1"), "damaged"),
    "cap retyped to a string": (_retype(keys.cap_key), "damaged"),
    "cap copied from another batch": (_copy(keys.cap_key), "identity_mismatch"),
}


@pytest.mark.parametrize("name", list(CAP_CASES))
def test_damaged_request_cap_is_refused_before_any_request_and_left_unchanged(
    name: str, server: RedisServer, fake: FakeMandApi, client: Any, tmp_path: Path,
    templates: dict[str, Template], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    """A batch's request cap (`graph.batch --max-requests`), damaged after two steps
    (`templates["caps"]`)."""
    from graph.batch import main as batch

    damage, code = CAP_CASES[name]
    template = templates["caps"]
    db, (a, _), (cap_a, cap_b) = server.url, template.threads, template.names[2:]
    request.addfinalizer(lambda: _forget(client, *template.names))
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-redis-damage-012")
    monkeypatch.setenv("MANDAPI_MODEL_ID", "mandapi-large")
    monkeypatch.setenv("MANDAPI_BASE_URL", fake.base_url)

    def run(thread_id: str, cap: str, maximum: str) -> tuple[int, str]:
        tasks = tmp_path / f"{thread_id}.jsonl"
        tasks.write_text(json.dumps({"thread_id": thread_id, "task": f"[{thread_id}] {TASK}"})
                         + "\n")
        code = batch([str(tasks), "--once", "--live", "--max-requests", maximum, "--batch-id",
                      cap, "--db", db, "--json"])
        return code, capsys.readouterr().out

    template.restore(client)
    damage(client, cap_a, cap_b)
    before, sent = _snapshot(client), len(fake.requests_for(f"[{a}]"))
    exit_code, out = run(a, cap_a, "9")
    assert exit_code == 4 and f'"{code}"' in out, out
    assert len(fake.requests_for(f"[{a}]")) == sent
    history, verify, problems = _readers(db, a, capsys)  # neither reads caps (yet)
    assert history != 1 and verify != 1, (history, verify, problems)
    assert _snapshot(client) == before
