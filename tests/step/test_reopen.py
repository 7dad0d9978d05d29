"""`--reopen` (issue 29): a stop by a model error is one the person can undo.

Through a gateway a configuration mistake (a wrong key answered with HTTP 400) stops a
thread as `invalid_request`; the content filter stops one as `content_filter`. The
person may put such a thread back to `ready`: its attempts stay counted, its limits
unchanged, and nothing is sent until it runs again. No other stop is undone, and no
scheduler reopens a thread by itself.
"""

from __future__ import annotations

import httpx
import pytest

from graph.api import open_database
from graph.batch import main as batch_main
from graph.errors import ExitCode
from tests.conftest import run_cli
from tests.step.test_finish_reasons import TASK, Server, body

NO_DB = {"error": {"message": "No connected db.", "type": "no_db_connection", "code": "400"}}


@pytest.fixture(autouse=True)
def live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANDAPI_API_KEY", "sk-test-reopen-012")
    monkeypatch.setenv("MANDAPI_BASE_URL", "http://mandapi.test/v1")


class Gateway(Server):
    """`Server`, but an item that is an int is answered as that HTTP status with `NO_DB`."""

    def handler(self, request: httpx.Request) -> httpx.Response:
        item = self.script[0]
        if isinstance(item, int):
            self.script.pop(0)
            self.requests.append({})
            return httpx.Response(item, json=NO_DB)
        return super().handler(request)


def run(db: str, server: Server, *flags: str) -> dict:
    return run_cli(["--thread", "t1", "--live", "--once", "--db", db, *flags], model_factory=server)


def test_a_thread_stopped_by_a_gateways_400_is_reopened_and_continues_with_its_attempts_counted(
        backend) -> None:
    server = Gateway(400, body("3 days [ship-01].", "stop"))  # type: ignore[arg-type]
    stopped = run(backend.db, server, "--task", TASK, "--model", "mandapi-large")
    assert (stopped["status"], stopped["stop_reason"], stopped["exit_code"]) == (
        "exhausted", "invalid_request", 3)
    assert "No connected db." in stopped["error"] and "--reopen" in stopped["error"], "says how to undo"
    reopened = run(backend.db, server, "--reopen")
    assert (reopened["status"], reopened["stop_reason"], reopened["exit_code"]) == ("ready", None, 0)
    assert (reopened["attempts"], reopened["max_attempts"]) == (1, 4)
    assert len(server.requests) == 1 and backend.ledger_row("t1") == (1, 1, 4), "reopening sends nothing"
    done = run(backend.db, server)
    assert (done["status"], done["attempts"], done["answer"]) == ("done", 2, "3 days [ship-01].")
    assert backend.ledger_row("t1") == (2, 2, 4)


def test_a_thread_the_content_filter_stopped_can_be_reopened_through_the_api(backend) -> None:
    server = Server(body("I cannot", "content_filter"), body("3 days [ship-01].", "stop"))
    run(backend.db, server, "--task", TASK, "--model", "mandapi-large")
    with open_database(backend.db, live=True, model_factory=server) as db:
        reopened = db.reopen("t1")
        assert (reopened.status, reopened.exit_code, reopened.attempts) == ("ready", ExitCode.OK, 1)
        assert not db.store.carries_ttl("t1"), "a thread that can continue never expires (I10)"
        done = db.run("t1")
    assert (done.status, done.attempts) == ("done", 2) and len(server.requests) == 2


@pytest.mark.parametrize("script", [
    [body("3 days [ship-01].", "stop")],  # done
    [body("Shipping ", "length")],  # exhausted by its budget, with a partial answer
])
def test_only_a_stop_by_a_model_error_can_be_reopened(backend, script) -> None:
    server = Server(*script)
    out = run(backend.db, server, "--task", TASK, "--model", "mandapi-large", "--max-attempts", "1")
    before = backend.fingerprint()
    refused = run(backend.db, server, "--reopen")
    assert (refused["exit_code"], refused["error_code"]) == (2, "usage")
    assert f"this thread is {out['status']}" in refused["error"]
    assert backend.fingerprint() == before, "a refusal changes nothing"


def test_a_thread_stopped_on_its_last_attempt_reopens_but_sends_nothing_more(sqlite_db) -> None:
    db, server = str(sqlite_db), Server(body(None, "content_filter"))
    run(db, server, "--task", TASK, "--model", "mandapi-large", "--max-attempts", "1")
    assert run(db, server, "--reopen")["status"] == "ready"
    out = run(db, server)
    assert (out["status"], out["stop_reason"], out["exit_code"]) == ("exhausted", "budget", 3)
    assert len(server.requests) == 1, "its limits are unchanged"


def test_a_batch_never_reopens_a_thread(tmp_path, capsys) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    assert batch_main([str(tasks), "--db", str(tmp_path / "b.sqlite"), "--reopen"]) == 2
    assert "unrecognized arguments: --reopen" in capsys.readouterr().err
