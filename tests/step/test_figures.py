"""After time travel every face shows one thread's attempts and tokens alike (issue 30).

A fork (the README's snippet: `db.invocation` and `invoke` from the checkpoint before the
first request) leaves the thread's latest checkpoint with that older checkpoint's own
`progress.attempts` and `progress.usage`. `graph.run` printed them (`attempts 0/10, tokens
0` while `graph.history` said 2/10; the snippet run twice left tokens at 0 after 4 paid
attempts). Every face now takes them from `graph.store.base.Store.figures`: the ledger's
count and the sums over the thread's whole attempt log. Here a user's path, on every
backend: the demo thread, the README's fork twice, then `graph.run`, `graph.history`,
the Python API, `graph.batch` and a queue worker's step, each compared with the ledger
and the log read straight from the store.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from graph.api import open_database
from graph.batch import main as batch_main
from graph.fleet.worker import close_pools, run_step
from graph.history import main as history_main
from graph.outcome import USAGE_KEYS
from graph.run import main as run_main
from graph.step.invocation import StepFigures
from graph.store import open_store
from graph.store.rows import add_logged_usage
from tests.conftest import PYTHON, ROOT, subprocess_env
from tests.fakes import ScriptedModel, tool_call_reply

TASK = "How long does shipping take at the demo shop?"
LIMITS = {"max_attempts": 10, "max_tokens": 100_000}


def _demo_forked_twice(db: str) -> dict[str, Any]:
    """Thread `t`: the demo run to its answer (2 attempts), then the README's fork twice.

    Returns the forked checkpoint's own progress, which the faces must not show.
    """
    with open_database(db, create=True) as api:
        api.run("t", task=TASK, once=False, **LIMITS)
        config = {"configurable": {"thread_id": "t"}}
        for _ in range(2):
            first = [s for s in api.graph.get_state_history(config) if s.next == ("budget",)][-1]
            with api.invocation("t") as context:
                api.graph.invoke(None, first.config, context=context, durability="sync")
        return api.graph.get_state(config).values["progress"]


def _truth(db: str) -> tuple[int, int]:
    """(the ledger's attempts, the sum of usage.total_tokens over every logged reply)."""
    with open_store(db, create=False, read_only=True) as store:
        entry = store.ledger.read("t")
        rows = store.log.rows("t")
    assert entry is not None
    return entry.attempts, sum((r["payload"].get("usage") or {}).get("total_tokens", 0)
                               for r in rows if r["kind"] == "reason")


def test_after_forks_run_history_api_batch_and_worker_show_the_ledger_and_the_log_sum(
        backend, tmp_path: Path, capsys) -> None:
    forked = _demo_forked_twice(backend.db)
    assert _truth(backend.db)[0] == 4

    assert run_main(["--thread", "t", "--once", "--db", backend.db, "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    attempts, tokens = _truth(backend.db)
    assert attempts == 5 and forked["usage"]["total_tokens"] < tokens
    assert (ran["attempts"], ran["usage"]["total_tokens"]) == (attempts, tokens), ran

    assert run_main(["--thread", "t", "--db", backend.db]) == 0
    assert f"(attempts {attempts}/10, tokens {tokens}/100000," in capsys.readouterr().out

    assert history_main(["--thread", "t", "--db", backend.db, "--json"]) == 0
    header = json.loads(capsys.readouterr().out)["header"]
    assert (header["attempts"], header["usage"]["total_tokens"]) == (attempts, tokens)
    assert history_main(["--thread", "t", "--db", backend.db]) == 0
    text = capsys.readouterr().out
    assert f"attempts {attempts}/10\n" in text and f"tokens   {tokens} (" in text

    with open_database(backend.db) as api:
        outcome = api.run("t")
        history = api.history("t")["header"]
    assert (outcome.attempts, outcome.usage["total_tokens"]) == (attempts, tokens)
    assert (history["attempts"], history["usage"]) == (attempts, outcome.usage)

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"thread_id": "t", "task": TASK, **LIMITS}) + "\n")
    results = tmp_path / "results.jsonl"
    assert batch_main([str(tasks), "--db", backend.db, "--out", str(results)]) == 0
    line = json.loads(results.read_text())
    assert (line["attempts"], line["usage"]["total_tokens"]) == (attempts, tokens)

    try:
        report = run_step(backend.db, "t", {"task": TASK, **LIMITS}, False, None)
    finally:
        close_pools()
    assert report.result["attempts"] == attempts
    assert _truth(backend.db) == (attempts, tokens), "reading changed nothing"


def test_a_fork_stopped_by_its_token_cap_reports_the_spent_attempts_not_the_fork_checkpoints(
        backend, capsys) -> None:
    """The issue's `attempts 0/10, tokens 0`: the fork stopped before counting anything."""
    with open_database(backend.db, create=True) as api:
        api.run("t", task=TASK, once=False, max_attempts=10, max_tokens=500)
        config = {"configurable": {"thread_id": "t"}}
        first = [s for s in api.graph.get_state_history(config) if s.next == ("budget",)][-1]
        with api.invocation("t") as context:  # the README's fork: the cap stops it at once
            api.graph.invoke(None, first.config, context=context, durability="sync")
        forked = api.graph.get_state(config).values["progress"]
    assert (forked["status"], forked["attempts"], forked["usage"]["total_tokens"]) == (
        "exhausted", 0, 0)
    attempts, tokens = _truth(backend.db)
    assert attempts == 2 and tokens >= 500
    assert run_main(["--thread", "t", "--once", "--db", backend.db, "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["stop_reason"]) == ("exhausted", "token_cap"), out
    assert (out["attempts"], out["usage"]["total_tokens"]) == (attempts, tokens)
    assert run_main(["--thread", "t", "--db", backend.db]) == 3
    assert f"(attempts 2/10, tokens {tokens}/500," in capsys.readouterr().out
    assert _truth(backend.db) == (attempts, tokens), "nothing was counted or sent"


def test_graph_run_prints_the_ledger_and_log_figures_after_a_fork_in_its_own_process(
        sqlite_db: Path) -> None:
    _demo_forked_twice(str(sqlite_db))
    attempts, tokens = _truth(str(sqlite_db))
    done = subprocess.run([PYTHON, "-m", "graph.run", "--thread", "t", "--db", str(sqlite_db)],
                          capture_output=True, text=True, env=subprocess_env(), cwd=ROOT,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f"(attempts {attempts + 1}/10, tokens " in done.stdout
    after = _truth(str(sqlite_db))
    assert f"tokens {after[1]}/100000," in done.stdout
    assert after[1] > tokens


class _Reads:
    """A store table that counts the calls of its methods named in `counted`."""

    def __init__(self, table: Any, counted: tuple[str, ...]) -> None:
        self._table, self._counted = table, counted
        self.calls: dict[str, int] = dict.fromkeys(counted, 0)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._table, name)
        if name not in self._counted:
            return found

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return found(*args, **kwargs)
        return counting


def test_a_step_reads_the_ledger_and_the_log_once_and_reports_what_it_read(backend) -> None:
    """A new thread reads the log's sums once; a resumed one reuses its one `tally`."""
    model = ScriptedModel([tool_call_reply("c1"), tool_call_reply("c2")])
    reads = []
    with open_database(backend.db, create=True, model_factory=lambda m, s: model) as api:
        store = api.store
        ledger, log = store.ledger, store.log
        store.ledger = _Reads(ledger, ("read",))  # type: ignore[assignment]
        try:
            for task in (TASK, None):
                store.log = _Reads(log, ("tally", "usage", "rows", "last_attempt"))  # type: ignore[assignment]
                store.ledger.calls["read"] = 0  # type: ignore[attr-defined]
                outcome = api.run("t", task=task, once=True, **(LIMITS if task else {}))
                reads.append({**store.ledger.calls, **store.log.calls})  # type: ignore[attr-defined]
                assert (outcome.attempts, outcome.usage["total_tokens"]) == _truth(backend.db)
        finally:
            store.ledger, store.log = ledger, log
    assert outcome.status == "ready" and outcome.attempts == 2
    assert reads == [{"read": 1, "tally": 0, "usage": 1, "rows": 0, "last_attempt": 0},
                     {"read": 1, "tally": 1, "usage": 0, "rows": 0, "last_attempt": 0}], reads


class _ListLog:
    """An attempt log keeping its rows in a list (for `StepFigures` alone)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, Any]]] = []

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        self.rows.append((kind, payload))

    def used_tokens(self, thread_id: str) -> int:
        raise AssertionError("not read here")


def test_a_steps_figures_add_each_recorded_row_by_the_logs_own_usage_rule() -> None:
    log = _ListLog()
    figures = StepFigures(log, dict.fromkeys(USAGE_KEYS, 0))  # type: ignore[arg-type]
    figures.record("t", 1, "reason", {"usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                "total_tokens": 5}})
    figures.record("t", 1, "tool", {"usage": {"total_tokens": 99}})  # a tool row counts nothing
    figures.record("t", 2, "reason", {"usage": {"prompt_tokens": 7}})  # absent keys count 0
    summed = dict.fromkeys(USAGE_KEYS, 0)
    for kind, payload in log.rows:
        add_logged_usage(summed, kind, payload)
    assert figures.usage == summed == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 5}
