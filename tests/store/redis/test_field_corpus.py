"""Every field of every record this program keeps on Redis: one edit each, refused by all readers.

A thread paused for review of two write calls (its log, ledger, decisions, checkpoints with
pending writes, digests) and a second one like it are built once per module on a private
server; each case restores their keys byte for byte (`tests.store.redis.test_damage.Template`),
applies one edit to thread A, then checks that `graph.run --once`, `graph.history --thread`
and `graph.verify` each exit 4 (`damaged`), that the run sends nothing, and that every key's
DUMP is what the edit left (a refusal changes nothing).

The edits are generated from what is stored (`_cases`): every leaf of the latest checkpoint's
RedisJSON document (nested checkpoint, channel values and metadata included) changed, and
every object in it given a foreign field or losing one; every field of each of its write
documents changed or deleted; upstream's write-key registry and latest pointer; each field
of our digest hash, digest set and saved set; each field of each attempt-log row (its
payload's too), rows deleted, moved or added; the ledger's fields; each decision's fields;
the store id and the digest marker key; and every key retyped or deleted.

Redis only (the layout of `RedisSaver` and `graph.store.redis.keys`); the same kinds of edit on
SQL rows are in `tests/store/test_damage_corpus.py`.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from graph.store.redis import keys
from graph.store.redis.digests import DOCUMENTS_SINCE
from graph.store.redis.open import STORE_ID
from tests.conftest import run_cli
from tests.redis_server import RedisServer
from tests.store.redis.test_damage import Template, _snapshot, _template, _writer

A, B = "rf-field-a", "rf-field-b"
Edit = Callable[[Any], None]
"""(client) -> None: one edit of thread A's stored records."""


@pytest.fixture(scope="module")
def server(module_redis_server: RedisServer) -> RedisServer:
    """This module's own server (`tests.redis_server.module_redis_server`)."""
    return module_redis_server


@pytest.fixture(scope="module")
def template(server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    """Threads A and B paused for review (`_writer`), their keys snapshot (`_template`)."""
    import redis

    from graph.history import main as history_main

    folder = tmp_path_factory.mktemp("fields")
    out_dir = folder / "out"
    out_dir.mkdir()
    (out_dir / "log.txt").write_text("start\n")
    client = redis.Redis.from_url(server.url)

    def history(thread_id: str) -> str:
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            assert history_main(["--db", server.url, "--thread", thread_id, "--json"]) == 0
        return shown.getvalue()

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(folder)
            mp.setenv("MANDAPI_API_KEY", "sk-redis-fields-012")
            model = _writer(server.url, A, out_dir)
            _writer(server.url, B, out_dir)
            yield _template(client, (A, B), history, out_dir=out_dir, model=model)
    finally:
        client.close()


# ---- what is stored ------------------------------------------------------------------

def _checkpoints(c: Any) -> list[bytes]:
    return sorted(c.scan_iter(match=f"checkpoint:{A}:*".encode()))


def _latest(c: Any) -> bytes:
    return bytes(c.get(f"checkpoint_latest:{A}:__empty__"))


def _writes(c: Any) -> list[bytes]:
    latest = _latest(c).split(b":")[-1]
    return sorted(c.scan_iter(match=f"checkpoint_write:{A}:__empty__:".encode() + latest + b":*"))


def _registry(c: Any) -> bytes:
    return f"write_keys_zset:{A}:__empty__:".encode() + _latest(c).split(b":")[-1]


def _digest_hash(c: Any) -> bytes:
    return keys.digest_key(A, "", _latest(c).split(b":")[-1].decode())


def _older_registry(c: Any) -> bytes:
    """The write registry of a checkpoint before the latest that lists two writes or more."""
    latest = _latest(c).split(b":")[-1]
    found = [key for key in sorted(c.scan_iter(match=f"write_keys_zset:{A}:*".encode()))
             if not key.endswith(latest) and c.zcard(key) >= 2]
    assert found, "the template has no older checkpoint with two writes"
    return found[0]


def _swap_scores(registry: Callable[[Any], bytes]) -> Edit:
    """Gives a registry's first member the score of its second: both stay in range."""
    def edit(cl: Any) -> None:
        key = registry(cl)
        (first, a), (_, b) = cl.zrange(key, 0, 1, withscores=True)
        assert a != b
        cl.zadd(key, {first: b})
    return edit


def _path(parts: tuple[Any, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f"[{json.dumps(p)}]" for p in parts)


def _leaves(value: Any, parts: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) in a JSON value, containers included (after their members)."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _leaves(item, (*parts, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*parts, index))
    if parts:
        yield parts, value


def _other(value: Any) -> Any:
    """A value of the same JSON type that differs from `value` (a string: one more char)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "foreign": 1}
    return "x"  # null


def _json_set(key: Callable[[Any], bytes], parts: tuple[Any, ...], value: Any) -> Edit:
    return lambda c: c.json().set(key(c), _path(parts), value)


def _json_del(key: Callable[[Any], bytes], parts: tuple[Any, ...]) -> Edit:
    return lambda c: c.json().delete(key(c), _path(parts))


def _retype(key: Callable[[Any], bytes]) -> Edit:
    def edit(c: Any) -> None:
        name = key(c)
        kind = c.type(name)
        c.delete(name)
        if kind == b"string":
            c.hset(name, "not", "what was stored")
        else:
            c.set(name, "not what was stored")
    return edit


def _delete(key: Callable[[Any], bytes]) -> Edit:
    return lambda c: c.delete(key(c))


def _log_edit(index: int, parts: tuple[Any, ...], value: Any, *, drop: bool = False) -> Edit:
    def edit(c: Any) -> None:
        row = json.loads(c.lindex(keys.log_key(A), index))
        *head, last = parts
        target = row
        for part in head:
            target = target[part]
        if drop:
            del target[last]
        else:
            target[last] = value
        c.lset(keys.log_key(A), index, json.dumps(row))
    return edit


def _hash_field_edit(key: Callable[[Any], bytes], field: bytes, *, drop: bool = False) -> Edit:
    def edit(c: Any) -> None:
        if drop:
            c.hdel(key(c), field)
        else:
            value = c.hget(key(c), field)
            c.hset(key(c), field, value[:-1] + (b"0" if value[-1:] != b"0" else b"1"))
    return edit


def _cases(c: Any) -> dict[str, Edit]:
    """Every edit, generated from thread A as the template stored it."""
    cases: dict[str, Edit] = {}
    doc = c.json().get(_latest(c))
    for parts, value in _leaves(doc):
        name = "/".join(map(str, parts))
        if not isinstance(value, (dict, list)) or not value:
            cases[f"checkpoint {name} changed"] = _json_set(_latest, parts, _other(value))
        if len(parts) <= 2 or isinstance(value, dict):
            cases[f"checkpoint {name} deleted"] = _json_del(_latest, parts)
        if isinstance(value, dict) and len(parts) <= 3:
            cases[f"checkpoint {name} given a foreign field"] = _json_set(
                _latest, (*parts, "foreign"), 1)
    cases["checkpoint given a foreign field"] = _json_set(_latest, ("foreign",), 1)
    cases["checkpoint retyped"] = _retype(_latest)
    cases["checkpoint deleted"] = _delete(_latest)
    for index, write in enumerate(_writes(c)):
        key = (lambda i: lambda cl: _writes(cl)[i])(index)
        for name, value in c.json().get(write).items():
            cases[f"write {index} {name} changed"] = _json_set(key, (name,), _other(value))
            cases[f"write {index} {name} deleted"] = _json_del(key, (name,))
        cases[f"write {index} given a foreign field"] = _json_set(key, ("foreign",), 1)
        cases[f"write {index} retyped"] = _retype(key)
        cases[f"write {index} deleted"] = _delete(key)
    cases.update({
        "write registry given a foreign member": lambda cl: cl.zadd(_registry(cl), {b"x": 0}),
        "write registry given another checkpoint's write": lambda cl: cl.zadd(_registry(cl), {
            _writes(cl)[0].replace(_latest(cl).split(b":")[-1],
                                   _checkpoints(cl)[0].split(b":")[-1]): 0}),
        "write registry member removed": lambda cl: cl.zrem(_registry(cl), _writes(cl)[0]),
        "write registry score changed": lambda cl: cl.zadd(_registry(cl), {_writes(cl)[0]: 7}),
        "an older checkpoint's write registry score changed within its batch": _swap_scores(
            _older_registry),
        "write registry retyped": _retype(_registry),
        "write registry deleted": _delete(_registry),
        "latest pointer to an older checkpoint": lambda cl: cl.set(
            f"checkpoint_latest:{A}:__empty__", _checkpoints(cl)[0]),
        "latest pointer to nothing": lambda cl: cl.set(f"checkpoint_latest:{A}:__empty__", "x"),
        "latest pointer retyped": _retype(lambda cl: f"checkpoint_latest:{A}:__empty__".encode()),
        "latest pointer deleted": _delete(lambda cl: f"checkpoint_latest:{A}:__empty__".encode()),
    })
    for field in c.hkeys(_digest_hash(c)):
        label = field.decode(errors="replace").replace("\0", "/")
        cases[f"digest field {label!r} changed"] = _hash_field_edit(_digest_hash, field)
        cases[f"digest field {label!r} deleted"] = _hash_field_edit(_digest_hash, field, drop=True)
    written = min(f for f in c.hkeys(_digest_hash(c)) if f.startswith(b"\0written\0"))
    cases.update({
        # "1" marked a write before write digests: on a checkpoint since, an edit
        "a write's mark set to 1": lambda cl: cl.hset(_digest_hash(cl), written, "1"),
        "digest hash given a foreign field": lambda cl: cl.hset(_digest_hash(cl), "x", "0" * 64),
        # a third attack's: a field of a write's form, of no task (it added an accepted
        # checkpoint digest), and one of a task that saved no write
        "digest hash given a write field of no task": lambda cl: cl.hset(
            _digest_hash(cl), "\0extra", "0" * 64),
        "digest hash given a write digest of a task without writes": lambda cl: cl.hset(
            _digest_hash(cl), "ghost-task\x000", "0" * 64),
        "digest hash retyped": _retype(_digest_hash),
        "digest hash deleted": _delete(_digest_hash),
        "digest set given a foreign member": lambda cl: cl.sadd(keys.digests_key(A), "x"),
        "digest set member removed": lambda cl: cl.srem(keys.digests_key(A), _digest_hash(cl)),
        "digest set retyped": _retype(lambda cl: keys.digests_key(A)),
        "digest set deleted": _delete(lambda cl: keys.digests_key(A)),
        "saved set given a foreign member": lambda cl: cl.sadd(keys.saved_key(A), "x"),
        "saved set member removed": lambda cl: cl.srem(
            keys.saved_key(A), b"\0" + _latest(cl).split(b":")[-1]),
        "saved set retyped": _retype(lambda cl: keys.saved_key(A)),
        "saved set deleted": _delete(lambda cl: keys.saved_key(A)),
    })
    rows = [json.loads(raw) for raw in c.lrange(keys.log_key(A), 0, -1)]
    for index, row in enumerate(rows):
        for parts, value in _leaves(row):
            name = "/".join(map(str, parts))
            if not isinstance(value, (dict, list)) or not value:
                cases[f"log row {index} {name} changed"] = _log_edit(index, parts, _other(value))
            if len(parts) <= 2:
                cases[f"log row {index} {name} deleted"] = _log_edit(index, parts, None,
                                                                     drop=True)
    cases.update({
        "log first row deleted": lambda cl: cl.lpop(keys.log_key(A)),
        "log last row deleted": lambda cl: cl.rpop(keys.log_key(A)),
        "log row added": lambda cl: cl.rpush(keys.log_key(A), cl.lindex(keys.log_key(A), -1)),
        "log retyped": _retype(lambda cl: keys.log_key(A)),
        "log deleted": _delete(lambda cl: keys.log_key(A)),
    })
    for field in c.hkeys(keys.ledger_key(A)):
        cases[f"ledger {field.decode()} changed"] = lambda cl, f=field: cl.hset(
            keys.ledger_key(A), f, cl.hget(keys.ledger_key(A), f) + b"0")
        cases[f"ledger {field.decode()} deleted"] = lambda cl, f=field: cl.hdel(
            keys.ledger_key(A), f)
    cases["ledger given a foreign field"] = lambda cl: cl.hset(keys.ledger_key(A), "x", "1")
    cases["ledger retyped"] = _retype(lambda cl: keys.ledger_key(A))
    for field, raw in c.hgetall(keys.approvals_key(A)).items():
        for name, value in json.loads(raw).items():
            def edit(cl: Any, f: bytes = field, n: str = name, v: Any = value) -> None:
                decision = json.loads(cl.hget(keys.approvals_key(A), f))
                decision[n] = _other(v)
                cl.hset(keys.approvals_key(A), f, json.dumps(decision))
            cases[f"decision {field.decode()} {name} changed"] = edit
    cases["decisions given a foreign field"] = lambda cl: cl.hset(
        keys.approvals_key(A), "9:w9", cl.hget(keys.approvals_key(A), b"1:w1"))
    cases["decisions retyped"] = _retype(lambda cl: keys.approvals_key(A))
    cases.update({
        "store id changed": lambda cl: cl.set(STORE_ID, "not an id"),
        "store id retyped": _retype(lambda cl: STORE_ID.encode()),
        "store id deleted": _delete(lambda cl: STORE_ID.encode()),
        "digest marker changed": lambda cl: cl.set(DOCUMENTS_SINCE, cl.get(DOCUMENTS_SINCE)[:-1]
                                                   + b"g"),
        "digest marker retyped": _retype(lambda cl: DOCUMENTS_SINCE.encode()),
    })
    return cases


KNOWN: dict[str, str] = {
    # name: why it is not refused (by design, or not yet). "digest field '{interrupt}'
    # deleted" was one while a write and its mark were stored apart (a kill between
    # them looked the same); `PUT_WRITES` now stores them in one step.
}
OLDER_CHECKPOINT: dict[str, str] = {
    # name: an edit of a checkpoint before the latest, which a step never reads (it loads
    # the latest and its writes): the run answers as for the untouched thread (paused for
    # review, exit 7); history and verify read every checkpoint and refuse it.
    "an older checkpoint's write registry score changed within its batch":
        "the score is a write's place in its batch, its channel's idx (issue 28)",
}
HISTORY_SHOWS: dict[str, str] = {
    # name: why `graph.history` shows it (exit 0) where run and verify refuse it. None:
    # history makes run's and verify's cross-checks too (the log against the checkpoint,
    # the ledger against it), since the second outside attack found it showing them.
}


@pytest.fixture(scope="module")
def cases(server: RedisServer, template: Template) -> dict[str, Edit]:
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        template.restore(client)
        return _cases(client)
    finally:
        client.close()


def _readers(db: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, int, str]:
    from graph.history import main as history
    from graph.verify import main as verify

    capsys.readouterr()
    shown = history(["--db", db, "--thread", A, "--json"])
    told = capsys.readouterr().out
    checked = verify(["--db", db, "--json"])
    return shown, checked, told + capsys.readouterr().out


def test_the_corpus_edits_every_kind_of_record(cases: dict[str, Edit]) -> None:
    assert len(cases) >= 150, len(cases)
    for kind in ("checkpoint checkpoint/", "checkpoint metadata", "write 0 ", "write registry",
                 "latest pointer", "digest field", "digest set", "saved set", "log row 0 ",
                 "ledger ", "decision ", "store id", "digest marker"):
        assert any(name.startswith(kind) for name in cases), kind


SHARDS = 4
"""The corpus runs in this many parts, so `pytest -n 2` spreads it over both cores."""


@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_single_field_edit_is_refused_by_run_history_and_verify_and_left_unchanged(
    shard: int, server: RedisServer, template: Template, cases: dict[str, Edit],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import redis

    monkeypatch.setenv("MANDAPI_API_KEY", "sk-redis-fields-012")
    model = template.model
    client = redis.Redis.from_url(server.url)
    template.restore(client)
    interrupt = next(f.decode().replace("\0", "/") for f in client.hkeys(_digest_hash(client))
                     if f.startswith(b"\0written\0") and f.endswith(b"\0-3"))
    missed: dict[str, Any] = {}
    try:
        for name, edit in list(cases.items())[shard::SHARDS]:
            template.restore(client)
            ids = {k: client.dump(k) for k in (STORE_ID, DOCUMENTS_SINCE)}
            edit(client)
            before, asked = _snapshot(client), len(model.requests)
            out = run_cli(["--thread", A, "--once", "--db", server.url],
                          model_factory=lambda m, s: model)
            history, verify, _ = _readers(server.url, capsys)
            got = (out["exit_code"], out["error_code"], history, verify)
            wanted = ((7, None) if name in OLDER_CHECKPOINT else (4, "damaged")) + (
                0 if name in HISTORY_SHOWS else 4, 4)
            if got != wanted or len(model.requests) != asked:
                missed[name] = got
            elif _snapshot(client) != before:
                missed[name] = "changed"
            for key, dumped in ids.items():
                client.restore(key, 0, dumped, replace=True)
    finally:
        client.close()
    known = {name.format(interrupt=interrupt) for name in KNOWN} & set(list(cases)[shard::SHARDS])
    unexpected = {n: g for n, g in missed.items() if n not in known}
    assert not unexpected, json.dumps(unexpected, indent=1)
    assert not known - set(missed), sorted(known - set(missed))
