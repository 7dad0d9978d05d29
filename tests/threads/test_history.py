"""History reads exactly what happened, identically on both backends, and never writes."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from graph.history import main as history_main
from graph.store import open_store
from graph.threads.history import list_threads, thread_history
from graph.verify import main as verify_main
from tests.conftest import run_cli
from tests.fakes import ScriptedModel, answer_reply, timeout_error, tool_call_reply

TASK = "How long does shipping take at the demo shop?"


def scripted_thread(backend) -> None:
    """Attempt 1 times out, attempt 2 asks for a tool, attempt 3 answers."""
    model = ScriptedModel([timeout_error(), tool_call_reply("call_x", "shipping"),
                           answer_reply("3 to 5 business days [ship-01]")])
    for i in range(3):
        run_cli(["--thread", "h1", "--once", "--db", backend.db] + (["--task", TASK] if i == 0 else []),
                model_factory=lambda m, s: model)


def comparable(history: dict[str, Any]) -> dict[str, Any]:
    """History without times and checkpoint ids, which differ between runs."""
    header = {k: v for k, v in history["header"].items() if k not in ("created_at", "updated_at")}
    steps = [{k: v for k, v in s.items() if k != "completed_at"} for s in history["steps"]]
    cps = [{k: v for k, v in c.items() if k not in ("checkpoint_id", "created_at")}
           for c in history["checkpoints"]]
    return {"header": header, "steps": steps, "checkpoints": cps}


EXPECTED_STEPS = [  # the scripted replies carry no finish_reason
    {"step": 1, "outcome": "error", "thought": None, "tool_calls": [], "tokens": 0,
     "finish_reason": None, "error_code": "timeout",
     "error": "request to http://fake/chat/completions timed out"},
    {"step": 2, "outcome": "tool_calls", "thought": None, "tokens": 15, "finish_reason": None,
     "error_code": None,
     "error": None, "tool_calls": [{"id": "call_x", "name": "search_references",
                                    "arguments": '{"query": "shipping"}',
                                    "canonical_arguments": '{"query":"shipping"}'}]},
    {"step": 3, "outcome": "answer", "thought": "3 to 5 business days [ship-01]", "tool_calls": [],
     "tokens": 27, "finish_reason": None, "error_code": None, "error": None},
]


def test_history_of_a_thread_matches_its_known_steps(backend) -> None:
    scripted_thread(backend)
    with open_store(backend.db, create=False, read_only=True) as store:
        history = comparable(thread_history(store, "h1"))
    header = history["header"]
    assert (header["status"], header["attempts"], header["max_attempts"]) == ("done", 3, 4)
    assert header["usage"] == {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    assert header["review_required"] is True
    steps = history["steps"]
    observation = steps[1]["tool_calls"][0].pop("observation")
    assert json.loads(observation)["hits"][0]["id"] == "ship-01"
    assert steps == EXPECTED_STEPS
    assert [(c["written_by"], c["next"], c["attempts"]) for c in history["checkpoints"]] == [
        ("input", ["__start__"], 0), ("__start__", ["budget"], 0), ("budget", ["reason"], 1),
        ("reason", ["budget"], 1), ("budget", ["reason"], 2), ("reason", ["tools"], 2),
        ("tools", ["budget"], 2), ("budget", ["reason"], 3), ("reason", [], 3)]


@pytest.mark.postgres
def test_history_is_identical_on_sqlite_and_postgres(tmp_path) -> None:
    from tests.conftest import PostgresBackend, SqliteBackend, postgres_admin_url

    sqlite = SqliteBackend(tmp_path / "h.sqlite")
    pg = PostgresBackend(postgres_admin_url())
    try:
        views = []
        for backend in (sqlite, pg):
            scripted_thread(backend)
            with open_store(backend.db, create=False, read_only=True) as store:
                views.append(comparable(thread_history(store, "h1")))
        assert views[0] == views[1]
    finally:
        pg.drop()


def test_a_killed_attempt_shows_as_counted_without_a_record(backend) -> None:
    run_cli(["--thread", "h1", "--task", TASK, "--once", "--db", backend.db])
    backend.update_ledger("h1", attempts=2, claimed=2)  # died mid-request
    with open_store(backend.db, create=False, read_only=True) as store:
        steps = thread_history(store, "h1")["steps"]
    assert [(s["step"], s["outcome"]) for s in steps] == [(1, "tool_calls"), (2, "no record")]


def test_reading_history_and_listing_never_change_the_database(backend, capsys) -> None:
    scripted_thread(backend)
    run_cli(["--thread", "live", "--task", TASK, "--once", "--db", backend.db])
    before = backend.fingerprint()
    assert history_main(["--thread", "h1", "--db", backend.db]) == 0
    assert history_main(["--thread", "live", "--db", backend.db, "--json"]) == 0
    capsys.readouterr()
    assert history_main(["--list", "--db", backend.db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["threads"]
    with open_store(backend.db, create=False, read_only=True) as store:
        assert list_threads(store) == listed
    assert [(t["thread_id"], t["status"], t["attempts"]) for t in listed] == [
        ("h1", "done", 3), ("live", "ready", 1)]
    assert backend.fingerprint() == before


def test_history_and_verify_read_a_thread_run_to_done(backend, capsys) -> None:
    run_cli(["--thread", "d1", "--task", TASK, "--db", backend.db])
    capsys.readouterr()
    assert history_main(["--db", backend.db, "--thread", "d1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["header"]["status"] == "done" and [s["step"] for s in shown["steps"]] == [1, 2]
    assert shown["checkpoints_total"] == len(shown["checkpoints"]) > 0
    assert history_main(["--db", backend.db, "--list"]) == 0
    assert "d1" in capsys.readouterr().out
    assert verify_main(["--db", backend.db]) == 0
    assert "every thread reads back intact" in capsys.readouterr().out


def test_history_of_a_missing_thread_is_refused(backend, capsys) -> None:
    run_cli(["--thread", "h1", "--task", TASK, "--once", "--db", backend.db])
    assert history_main(["--thread", "nope", "--db", backend.db, "--json"]) == 4
    assert json.loads(capsys.readouterr().out)["error_code"] == "no_such_thread"


def test_history_cli_prints_the_status_the_tool_calls_and_the_review_note(tmp_path, capfd) -> None:
    """Through `main(argv)`; `python -m graph.history` runs as a real process in
    tests/cli/test_error_contract.py (a closed stdout, `| head -1`)."""
    run_cli(["--thread", "h1", "--task", TASK, "--db", str(tmp_path / "c.sqlite")])
    capfd.readouterr()
    code = history_main(["--thread", "h1", "--db", str(tmp_path / "c.sqlite")])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "status   done" in out and "Review required" in out
    assert "search_references" in out


@pytest.mark.parametrize("page", ["0", "-1", "x"])
def test_checkpoint_page_size_must_be_positive(backend, page, capsys) -> None:
    run_cli(["--thread", "h1", "--task", TASK, "--once", "--db", backend.db])
    assert history_main(["--thread", "h1", "--db", backend.db, "--checkpoints", page, "--json"]) == 2


@pytest.mark.parametrize("damage", ["deleted", "not a number"])
def test_listing_shows_a_thread_with_a_damaged_ledger_row_as_unreadable(backend, capsys,
                                                                       damage: str) -> None:
    run_cli(["--thread", "ok", "--task", TASK, "--db", backend.db])
    # "hurt" can still continue: a finished thread missing its ledger on Redis reads as
    # partly expired (pruned, graph.store.redis.expiring), as its TTL retention means it to.
    run_cli(["--thread", "hurt", "--task", TASK, "--once", "--db", backend.db])
    if damage == "deleted":
        backend.delete_ledger("hurt")
    elif backend.name == "redis":
        backend.update_ledger("hurt", attempts="many")
    else:  # a SQL column's type and CHECK refuse the edit itself: nothing damaged to list
        with pytest.raises(Exception, match="CHECK|integer"):
            backend.update_ledger("hurt", attempts="many")
        return
    before = backend.fingerprint()
    capsys.readouterr()
    assert history_main(["--list", "--db", backend.db, "--json"]) == 0
    listed = {row["thread_id"]: row for row in json.loads(capsys.readouterr().out)["threads"]}
    assert listed["ok"]["status"] == "done"
    assert listed["hurt"]["status"] == "unreadable: damaged"
    assert backend.fingerprint() == before


def test_a_fork_beyond_the_checkpoint_window_is_explained_until_the_next_step_trims_it(
        backend, capsys) -> None:
    """Issue 30: "the latest 12 of 12 stored" with `--keep-checkpoints 10` said nothing of why."""
    from graph.api import open_database

    run_cli(["--thread", "w", "--task", TASK, "--keep-checkpoints", "5", "--db", backend.db])
    with open_database(backend.db) as db:  # the README's fork, outside graph.run
        config = {"configurable": {"thread_id": "w"}}
        first = [s for s in db.graph.get_state_history(config) if s.next == ("budget",)][-1]
        with db.invocation("w") as context:
            db.graph.invoke(None, first.config, context=context, durability="sync")
    assert history_main(["--thread", "w", "--db", backend.db, "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["checkpoints_total"]
    assert total > 5
    assert history_main(["--thread", "w", "--db", backend.db]) == 0
    text = capsys.readouterr().out
    assert f"checkpoints: the latest {total} of {total} stored\n" in text
    assert (f"  {total - 5} more than the 5 this thread keeps (--keep-checkpoints): a fork or "
            "update_state made outside graph.run (written_by fork, update_state) added a branch "
            "of its own; the thread's next step or graph.prune trims it back to its latest 5, "
            "the newest branch's\n") in text
    assert " fork " in text.split("written_by", 2)[2], "the fork's own checkpoints are listed"

    run_cli(["--thread", "w", "--db", backend.db])  # the next step trims the window
    assert history_main(["--thread", "w", "--db", backend.db]) == 0
    text = capsys.readouterr().out
    assert "checkpoints: the latest 5 of 5 stored\n" in text and "more than the" not in text
    assert " fork " in text, "the window kept is the fork's branch"


def _finishes(db: str, capsys: pytest.CaptureFixture[str]) -> tuple[list[Any], list[str]]:
    """`graph.history --thread f1`: each step's `finish_reason` (--json) and finish column (text)."""
    capsys.readouterr()
    assert history_main(["--thread", "f1", "--db", db, "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert history_main(["--thread", "f1", "--db", db]) == 0
    text = capsys.readouterr().out.split("step  outcome     finish ", 1)[1].splitlines()
    rows = [line.split() for line in text if re.match(r" *\d+  ", line)]
    return [s["finish_reason"] for s in steps], [row[2] for row in rows]


def test_history_shows_each_attempts_finish_reason_as_the_server_sent_it(
        backend, capsys, monkeypatch) -> None:
    """A 400 (no reply read: `-`), a reply cut off (`length`), a reply without one
    (`null`: unknown), then an unfamiliar value, kept raw (issue 29)."""
    from tests.step.test_finish_reasons import body
    from tests.step.test_reopen import Gateway

    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-history-0")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")
    server = Gateway(400, body("Shipping takes ", "length"),  # type: ignore[arg-type]
                     body(None, None, ("c1", "get_reference", '{"ref_id": "ship-01"}')),
                     body("3 to 5 business days [ship-01].", "eos"))
    flags = ["--thread", "f1", "--live", "--once", "--db", backend.db]
    assert run_cli([*flags, "--task", TASK, "--model", "mandapi-large"],
                   model_factory=server)["stop_reason"] == "invalid_request"
    run_cli([*flags, "--reopen"], model_factory=server)
    for _ in range(4):  # length, the call, its result, the answer
        done = run_cli(flags, model_factory=server)
    assert done["status"] == "done" and not server.script
    assert _finishes(backend.db, capsys) == ([None, "length", None, "eos"],
                                             ["-", "length", "unknown", "eos"])


def test_attempts_logged_before_finish_reason_was_kept_read_as_unknown(
        backend, capsys, monkeypatch) -> None:
    """Rows as the code before schema v7 wrote them: no `finish_reason` key at all."""
    from graph.store.redis.tables import RedisAttemptLog
    from graph.store.sql.attempt_log import SqlAttemptLog

    for table in (SqlAttemptLog, RedisAttemptLog):
        record = table.record
        monkeypatch.setattr(table, "record", lambda self, thread_id, attempt, kind, payload, record=record:
                            record(self, thread_id, attempt, kind,
                                   {k: v for k, v in payload.items() if k != "finish_reason"}))
    run_cli(["--thread", "f1", "--task", TASK, "--db", backend.db])  # the demo: tool_calls, stop
    assert _finishes(backend.db, capsys) == ([None, None], ["unknown", "unknown"])


def test_the_header_and_the_list_show_one_updated_time_for_a_thread(backend, capsys) -> None:
    """A fresh user saw two `updated` times for one thread, a few milliseconds apart."""
    from graph.history import main as history_main

    run_cli(["--thread", "u1", "--task", TASK, "--db", backend.db])
    capsys.readouterr()
    assert history_main(["--db", backend.db, "--thread", "u1", "--json"]) == 0
    header = json.loads(capsys.readouterr().out)["header"]
    assert history_main(["--db", backend.db, "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed["threads"] if isinstance(listed, dict) else listed
    assert [t["updated_at"] for t in rows if t["thread_id"] == "u1"] == [header["updated_at"]]
