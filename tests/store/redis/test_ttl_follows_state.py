"""On Redis a thread's TTL follows its state (`graph.store.redis.ttl`, INVARIANTS I10).

After run, fork, `update_state`, cancel, approve, copy and prune, every key a thread owns
carries the TTL its current state calls for: a finished thread with nothing pending has
one on every key and an expiry mark; a thread that can continue has none and no mark. A
fork of a finished thread once kept the finished thread's TTL and mark, so a thread that
could continue expired. A fork whose keys may have partly expired is refused as
`pruned`; a database stored by such a version is reported by `verify` and repaired by
the thread's next step before it counts. A damaged expiry mark is refused for its own
thread, naming its key; `prune --dry-run` and `prune` agree on it and do the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from graph.api import open_database
from graph.checkpoints.load import graph_of, is_finished, load_thread
from graph.copy import main as copy_main
from graph.errors import BusyError, RefusedError
from graph.prune import main as prune_main
from graph.run import main as run_main
from graph.store import open_store
from graph.store.redis import keys as redis_keys
from graph.store.redis.ttl import COMPLETED_ENV, FAILED_ENV, keep_alive, mark_key, thread_keys
from graph.verify import main as verify_main
from tests.conftest import run_cli
from tests.step.test_approvals import Writer
from tests.store.redis import test_ttl

pytestmark = pytest.mark.redis

own = test_ttl.own
"""A server of the test's own (prune and verify read every thread) and a client of it."""

TASK = "Find the capital of France"
WRITE_TASK = "Write the shipping summary to report.md and log it."


@pytest.fixture(autouse=True)
def _default_ages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COMPLETED_ENV, raising=False)
    monkeypatch.delenv(FAILED_ENV, raising=False)


def _run(capsys: pytest.CaptureFixture[str], db: str, thread_id: str,
         *extra: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = run_main(["--db", db, f"--thread={thread_id}", "--once", *extra, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _to_done(capsys: pytest.CaptureFixture[str], db: str, thread_id: str, *extra: str) -> None:
    code, out = _run(capsys, db, thread_id, "--task", TASK, *extra)
    while code == 0 and out["status"] == "ready":
        code, out = _run(capsys, db, thread_id)
    assert (code, out["status"]) == (0, "done"), out


def _ttls(client: Any, thread_id: str) -> dict[bytes, int]:
    """Every key the thread owns (`thread_keys`, its ledger hash) that exists, and its PTTL."""
    found = [*thread_keys(client, thread_id), redis_keys.ledger_key(thread_id)]
    return {key: client.pttl(key) for key in found if client.exists(key)}


def _can_continue(db: str, thread_id: str) -> bool:
    with open_store(db, create=False, read_only=True) as store:
        loaded = load_thread(graph_of(store), thread_id, store.location)
    assert loaded is not None
    return not is_finished(loaded.values["progress"]["status"], loaded.snapshot.next)


def _assert_ttl_follows_state(db: str, client: Any, thread_id: str) -> bool:
    """Asserts the thread's TTLs and mark are what its state calls for; returns whether it
    can continue."""
    ttls = _ttls(client, thread_id)
    assert ttls, "the thread has keys"
    if _can_continue(db, thread_id):
        assert all(ttl == -1 for ttl in ttls.values()), ttls
        assert not client.exists(mark_key(thread_id))
        return True
    assert all(ttl > 0 for ttl in ttls.values()), ttls
    assert client.exists(mark_key(thread_id))
    return False


def _before(database: Any, thread_id: str, node: str) -> dict[str, Any]:
    """The config of the thread's latest checkpoint whose next step is `node` (a fork's start)."""
    config = {"configurable": {"thread_id": thread_id}}
    return next(s for s in database.graph.get_state_history(config) if s.next == (node,)).config


def _fork_by_update_state(db: str, thread_id: str) -> None:
    """`update_state` on the checkpoint before the thread's last `budget` step: a fork."""
    with open_database(db) as database:
        database.graph.update_state(_before(database, thread_id, "budget"), {"messages": []})


def test_run_gives_a_done_thread_a_ttl_and_a_ready_one_none(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    _run(capsys, db, "ready", "--task", TASK)
    assert _assert_ttl_follows_state(db, client, "ready")
    _to_done(capsys, db, "done")
    assert not _assert_ttl_follows_state(db, client, "done")


def test_a_writer_without_the_lease_leaves_a_finished_threads_ttl_and_mark(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """`keep_alive` is fenced as every write: a stale writer (its token no longer the
    lock's) or one holding no lease while another does changes nothing, exit 5. Unfenced,
    a paused writer's put took a finished thread's TTL off before its script was refused."""
    db, client = own
    _to_done(capsys, db, "kept")
    before = (_ttls(client, "kept"), client.hgetall(mark_key("kept")))
    assert before[1]
    for holder, token in ((None, "a-lost-token"), (b"another-writer", ""),
                          (b"another-writer", "a-lost-token")):
        if holder is not None:
            client.set(redis_keys.lock_key("kept"), holder, px=60_000)
        with pytest.raises(BusyError):
            keep_alive(client, "kept", token)
        client.delete(redis_keys.lock_key("kept"))
        assert client.hgetall(mark_key("kept")) == before[1]
        assert set(_ttls(client, "kept")) == set(before[0])
        assert all(ttl > 0 for ttl in _ttls(client, "kept").values())
    assert keep_alive(client, "kept", "")  # nobody holds it: a writer without a lease may
    assert not client.exists(mark_key("kept"))
    assert all(ttl == -1 for ttl in _ttls(client, "kept").values())


def test_update_state_fork_of_a_done_thread_loses_its_ttl_and_mark_then_regains_them(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    _to_done(capsys, db, "fork")
    _fork_by_update_state(db, "fork")
    assert _assert_ttl_follows_state(db, client, "fork")  # it can continue: nothing expires
    code, out = _run(capsys, db, "fork")
    while code == 0 and out["status"] == "ready":
        code, out = _run(capsys, db, "fork")
    assert (code, out["status"]) == (0, "done"), out
    assert not _assert_ttl_follows_state(db, client, "fork")


@pytest.mark.parametrize("as_node", ["reason", None, "tools"])
def test_update_state_that_leaves_a_thread_finished_keeps_its_ttl_and_mark(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str], as_node: str | None) -> None:
    """An update of a done thread's latest checkpoint (an outside attack's case) leaves it
    done: nothing to run, or only `budget` (`as_node="tools"`), which no step runs for a
    done thread. It once lost its TTL and mark for good, and was kept forever."""
    db, client = own
    _to_done(capsys, db, "edited")
    with open_database(db) as database:
        database.graph.update_state({"configurable": {"thread_id": "edited"}},
                                    {"messages": [{"role": "user", "content": "a note"}]},
                                    as_node=as_node)
    assert not _assert_ttl_follows_state(db, client, "edited")
    code, out = _run(capsys, db, "edited")
    assert (code, out["status"], out["attempts"]) == (0, "done", 2), out
    assert not _assert_ttl_follows_state(db, client, "edited")


def test_time_travel_fork_of_a_done_thread_keeps_every_key(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    _to_done(capsys, db, "travel")
    with open_database(db) as database:
        start = _before(database, "travel", "reason")
        with database.invocation("travel") as context:
            database.graph.invoke(None, start, context=context, durability="sync",
                                  interrupt_after=["reason"])
    assert _assert_ttl_follows_state(db, client, "travel")


def test_a_fork_whose_keys_partly_expired_is_refused_as_pruned(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    _to_done(capsys, db, "gone")
    with open_database(db) as database:
        start = _before(database, "gone", "budget")
        client.pexpireat(redis_keys.log_key("gone"), 1)  # one key expired, the rest not yet
        client.pexpireat(redis_keys.ledger_key("gone"), 1)
        before = {key: client.dump(key) for key in client.scan_iter(count=1000)}
        with pytest.raises(RefusedError) as refused:
            database.graph.update_state(start, {"messages": []})
    assert refused.value.error_code == "pruned"
    assert {key: client.dump(key) for key in client.scan_iter(count=1000)} == before
    code, out = _run(capsys, db, "gone")
    assert (code, out["error_code"]) == (4, "pruned")
    # its expiry time is still to come: the message says so, never "pruned on" that date
    assert "keys expire on" in out["error"] and "pruned on" not in out["error"], out


def test_an_update_state_of_a_thread_missing_an_older_checkpoint_is_refused_as_pruned(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """An outside attack (issue 28) deleted one older checkpoint of a finished thread (as
    its expiry would, key by key): `run` refused it `pruned`, but `update_state` took the
    TTLs off and revived it. The mark counts the thread's checkpoints; fewer is expired."""
    db, client = own
    _to_done(capsys, db, "partly")
    with open_database(db) as database:
        start = _before(database, "partly", "budget")
        older = sorted(client.scan_iter(match=b"checkpoint:partly:*", count=1000))[0]
        client.delete(older)
        before = {key: client.dump(key) for key in client.scan_iter(count=1000)}
        with pytest.raises(RefusedError) as refused:
            database.graph.update_state(start, {"messages": []})
    assert refused.value.error_code == "pruned"
    assert {key: client.dump(key) for key in client.scan_iter(count=1000)} == before
    assert client.exists(mark_key("partly")), "still marked: it expires as it was going to"


def test_cancel_gives_every_key_the_failed_ttl(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    _run(capsys, db, "cancel", "--task", TASK)
    code, out = _run(capsys, db, "cancel", "--cancel")
    assert (code, out["status"]) == (0, "cancelled")
    assert not _assert_ttl_follows_state(db, client, "cancel")


def test_a_thread_awaiting_approval_and_approved_has_no_ttl(
        own: tuple[str, Any], tmp_path: Path) -> None:
    db, client = own
    model = Writer()
    for argv in (["--task", WRITE_TASK, "--allow-writes", str(tmp_path)], [], ["--approve", "w1"],
                 ["--approve", "w2"]):
        out = run_cli(["--thread=approve", "--once", "--db", db, *argv],
                      model_factory=lambda m, s: model)
        assert out["exit_code"] in (0, 7), out  # 7: awaiting approval
        assert _assert_ttl_follows_state(db, client, "approve") == (out["status"] != "done")


def test_copy_gives_a_finished_thread_its_ttl_and_a_ready_one_none(
        own: tuple[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    src = str(tmp_path / "src.sqlite")
    _to_done(capsys, src, "copied-done")
    _run(capsys, src, "copied-ready", "--task", TASK)
    assert copy_main(["--from", src, "--to", db]) == 0
    assert not _assert_ttl_follows_state(db, client, "copied-done")
    assert _assert_ttl_follows_state(db, client, "copied-ready")


def test_prune_trims_a_marked_thread_without_making_it_expire_early(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    _to_done(capsys, db, "window", "--keep-checkpoints", "all")
    ready = "other"
    _run(capsys, db, ready, "--task", TASK)
    with open_store(db, create=False) as store, store.locks.hold("window"):
        assert store.trim("window", 1) > 0  # as prune's trim_windows does, holding the lock
    assert prune_main(["--db", db, "--json"]) == 0
    code, out = _run(capsys, db, "window")
    assert (code, out["status"]) == (0, "done"), out  # whole, not refused as pruned
    assert not _assert_ttl_follows_state(db, client, "window")
    assert _assert_ttl_follows_state(db, client, ready)


@pytest.mark.parametrize("where", ["log", "saved set", "digests set", "latest pointer",
                                   "a checkpoint"])
def test_a_ttl_set_by_hand_on_one_key_of_a_continuable_thread_is_reported_by_verify(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str], where: str) -> None:
    """Issue 28's second attack set a TTL on one key of a thread that could continue (not
    its ledger hash): verify said ok and the next step left it, so the key would expire
    under a live thread (I10). Verify now reads every key's TTL; a step reads those named by
    the thread id (ledger, log, sets, decisions) before it counts and then takes the TTL off
    every key, so for those the next step repairs the thread."""
    db, client = own
    _run(capsys, db, "one", "--task", TASK)
    key = {"log": redis_keys.log_key("one"), "saved set": redis_keys.saved_key("one"),
           "digests set": redis_keys.digests_key("one"),
           "latest pointer": b"checkpoint_latest:one:__empty__",  # the step's put rewrites it
           "a checkpoint": sorted(client.scan_iter(match=b"checkpoint:one:*", count=1000))[0]}[where]
    assert client.pexpire(key, 86_400_000)
    capsys.readouterr()
    assert verify_main(["--db", db, "--json"]) == 4
    assert "can continue but its keys carry a time-to-live" in capsys.readouterr().out
    if where == "a checkpoint":  # found only by a SCAN, which a step does not pay for
        return
    code, out = _run(capsys, db, "one")
    assert code == 0, out
    assert _assert_ttl_follows_state(db, client, "one") == (out["status"] == "ready")
    capsys.readouterr()
    assert verify_main(["--db", db, "--json"]) == 0


def test_verify_reports_a_continuable_thread_with_a_ttl_and_its_next_step_repairs_it(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    db, client = own
    _run(capsys, db, "old", "--task", TASK)
    found = _ttls(client, "old")
    for key in found:  # as a version that let a fork keep its finished thread's TTL left it
        client.pexpire(key, 86_400_000)
    client.hset(mark_key("old"), mapping={"final_status": "done",
                                          "expires_at_ms": str(2**42), "checkpoints": "1"})
    capsys.readouterr()
    assert verify_main(["--db", db, "--json"]) == 4
    assert "can continue but its keys carry a time-to-live" in capsys.readouterr().out
    code, out = _run(capsys, db, "old")
    assert (code, out["attempts"]) == (0, 2), out
    assert _assert_ttl_follows_state(db, client, "old") == (out["status"] == "ready")
    capsys.readouterr()
    assert verify_main(["--db", db, "--json"]) == 0


@pytest.mark.parametrize("damage", [
    lambda c, k: c.hset(k, "expires_at_ms", "soon"),
    lambda c, k: (c.delete(k), c.set(k, "x")),
    lambda c, k: c.hset(k, "extra", "1"),
    lambda c, k: c.hset(k, "checkpoints", "0"),
], ids=["field", "type", "extra-field", "no-checkpoints-counted"])
def test_a_damaged_expiry_mark_is_refused_for_its_thread_and_prune_agrees_with_its_dry_run(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str], damage: Any) -> None:
    db, client = own
    _to_done(capsys, db, "hurt")
    _to_done(capsys, db, "fine")
    damage(client, mark_key("hurt"))
    for read in (run_main, verify_main):  # history shows what is stored, mark or not
        capsys.readouterr()
        argv = ["--db", db, "--json"] + (["--thread=hurt"] if read is not verify_main else [])
        code = read(argv)
        out = capsys.readouterr().out
        assert code == 4 and "mandapi-resume:expiring:hurt" in out, (read, code, out)
    ages = ["--completed", "0s", "--json"]
    assert prune_main(["--db", db, "--dry-run", *ages]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert prune_main(["--db", db, *ages]) == 0
    done = json.loads(capsys.readouterr().out)
    assert [c["thread_id"] for c in dry["would_prune"]] == done["pruned"] == ["fine"]
    assert dry["skipped"] == done["skipped"] and "hurt" in " ".join(done["skipped"])
    assert client.exists(redis_keys.ledger_key("hurt"))  # the damaged thread is kept as it is


def test_a_foreign_member_of_a_threads_digest_set_is_refused_and_never_reaches_the_other_thread(
        own: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Another thread's key put in a done thread's set of digest hashes: the thread is
    refused (exit 4) by run and verify, and neither its TTL nor prune ever touches the
    other thread's key, which the set once led them to."""
    db, client = own
    _to_done(capsys, db, "hurt")
    _run(capsys, db, "other", "--task", TASK)  # ready: it must never expire
    other_key = redis_keys.ledger_key("other")
    client.sadd(redis_keys.digests_key("hurt"), other_key)
    assert other_key not in thread_keys(client, "hurt")
    for read in (run_main, verify_main):
        capsys.readouterr()
        argv = ["--db", db, "--json"] + (["--thread=hurt"] if read is not verify_main else [])
        assert read(argv) == 4, capsys.readouterr().out
    capsys.readouterr()
    assert prune_main(["--db", db, "--completed", "0s", "--failed", "0s", "--json"]) == 0
    with open_store(db, create=False) as store, store.locks.hold("hurt"):
        store.expire_finished("hurt", "done")
    assert client.pttl(other_key) == -1
    code, out = _run(capsys, db, "other")
    assert (code, out["attempts"]) == (0, 2), out
