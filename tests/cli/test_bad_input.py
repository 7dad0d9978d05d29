"""Bad input and environment: every entry point refuses with its documented code, in one shape.

The corpus runs each entry point's `main` (and the queue worker's step) on inputs a new
user or an attacker might give. For each it asserts the documented exit code and
`error_code`, exactly one line on stderr (or exactly one JSON object on stdout with
`--json`, carrying `error`, `error_code` and `exit_code`), no traceback, and that
nothing was counted: the database's logical content is unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SqliteBackend

TASK = "How long does shipping take at the demo shop?"
LIVE_ENV = {"MANDAPI_API_KEY": "sk-test-00000000", "MANDAPI_MODEL_ID": "mandapi-large"}


@dataclass(frozen=True)
class Case:
    """One bad input: entry point, arguments (`{db}`, `{tmp}` filled in), environment."""

    entry: str
    argv: tuple[str, ...]
    exit_code: int
    error_code: str
    env: dict[str, str] = field(default_factory=dict)
    tasks: str | bytes | None = None
    """Content of `{tmp}/tasks.jsonl` for batch cases."""

    @property
    def id(self) -> str:
        """A readable test id: the entry point and what is bad about the input."""
        tasks = self.tasks if isinstance(self.tasks, str) or self.tasks is None else repr(self.tasks)
        parts = [*self.argv, *(f"{k}={v}" for k, v in self.env.items() if k in _SHOWN),
                 *([tasks[:50]] if tasks else [])]
        return f"{self.entry}:{' '.join(parts)[:100]}"


_SHOWN = ("MANDAPI_BASE_URL", "MANDAPI_TIMEOUT", "MANDAPI_API_KEY", "MANDAPI_MODEL_ID", "GRAPH_DB")


def _run(*argv: str, code: int = 2, error: str = "usage", **env: str) -> Case:
    return Case("run", argv, code, error, env)


def _url(url: str) -> Case:
    return _run("--thread", "n1", "--task", TASK, "--live", "--db", "{db}",
                MANDAPI_BASE_URL=url, **LIVE_ENV)


RUN = [
    _url(""), _url("   "),
    _run("--thread", "t1", "--cancel", "--approve", "c1", "--db", "{db}"),
    _run("--thread", "t1", "--cancel", "--reject", "c1", "--db", "{db}"),
    _run("--thread", "n1", "--task", TASK, "--db", "mysql://x/y"),
    _run("--thread", "n1", "--task", TASK, "--db", "redis://127.0.0.1:1/0", error="db_unreachable"),
    _run("--thread", "t1", "--once", "--db", "{tmp}/fifo.sqlite"),
    _run("--thread", "t1", "--once", "--db", "/dev/null"),
    _run(), _run("--thread", "a b"), _run("--thread", ""), _run("--thread", "x" * 129),
    _run("--thread", "t1", "--max-att", "2"), _run("--thread", "t1", "--onc"),
    _run("--thread", "n1", "--task", "   "), _run("--thread", "n1", "--task", ""),
    _run("--thread", "n1", "--task", TASK, "--model", "offline_demo"),
    _run("--thread", "n1", "--task", TASK, "--model", "Offline-Demo"),
    _run("--thread", "n1", "--task", TASK, "--model", "a b"),
    _run("--thread", "n1", "--task", TASK, "--model", "mandapi-large", "--db", "{tmp}/new.sqlite"),
    _run("--thread", "n1", "--task", TASK, "--db", "{tmp}"),
    _run("--thread", "t1", "--once", "--db", "{tmp}/folder"),
    _run("--thread", "n1", "--task", TASK, "--db", "host=x dbname=y"),
    _run("--thread", "n1", "--task", TASK, "--db", "postgresql://u:pw@[::1/x"),
    _run("--thread", "n1", "--task", TASK, "--db", "postgresql://a b@x/y"),
    _run("--thread", "n1", "--task", TASK, "--db", "{tmp}/no/such/dir/x.sqlite"),
    _run("--thread", "n1", "--task", TASK, "--db", "{tmp}/" + "a" * 5000),
    _run("--thread", "t1", "--once", "--db", "{tmp}/missing.sqlite", code=4, error="no_such_file"),
    _run("--thread", "nope", "--once", "--db", "{db}", code=4, error="no_such_thread"),
    _run("--thread", "t1", "--once", "--db", "{tmp}/text.txt", code=4, error="damaged"),
    _run("--thread", "t1", "--once", "--db", "{tmp}/empty.sqlite", code=4, error="damaged"),
    _run("--thread", "t1", "--task", "another task", "--db", "{db}", code=4,
         error="identity_mismatch"),
    _run("--thread", "t1", "--max-attempts", "9", "--db", "{db}", code=4,
         error="identity_mismatch"),
    *[_run("--thread", "t1", "--once", "--db", "{db}", "--timeout", t)
      for t in ("0", "-1", "nan", "inf", "abc", "3601")],
    *[_run("--thread", "n1", "--task", TASK, "--db", "{db}", "--max-attempts", n)
      for n in ("0", "-2", "1e3", "1000001", "x")],
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--max-tokens", "-5"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--context-tokens", "abc"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--live"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--live", MANDAPI_API_KEY="sk x"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--live", MANDAPI_API_KEY="sk-x-00000000000"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--live", MANDAPI_API_KEY="sk-x-00000000000",
         MANDAPI_MODEL_ID="a b"),
    _run("--thread", "t1", "--once", "--db", "{db}", MANDAPI_TIMEOUT="abc"),
    _run("--thread", "t1", "--once", "--db", "{db}", MANDAPI_TIMEOUT="0"),
    _run("--thread", "t1", "--once", GRAPH_DB="{tmp}"),
    *[_url(u) for u in (
        "http://127.0.0.1:99999/v1", "http://127.0.0.1:abc/v1", "http://[::1/v1",
        "http://[zz::1]/v1", "http://[::1]]/v1", "ftp://127.0.0.1/v1", "http:///v1",
        "http://user:pw@127.0.0.1/v1", "http://127.0.0.1/v1?x=1", "http://127.0.0.1/v1#f",
        "http://127.0.0.1:0/v1", "http://127.0.0.1:/v1", "http://bad_host/v1",
        "http://127.0.0.1 /v1", "127.0.0.1:8080/v1", "http://::1/v1")],
    _run("--thread", "t1", "--db", "{db}", "--approve", "call_x"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--workspace", "{tmp}/nowhere",
         error="no_such_workspace"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--workspace", "/" + "w" * 5000,
         error="no_such_workspace"),
    _run("--thread", "n1", "--task", TASK, "--db", "{db}", "--allow-writes", "{tmp}/nowhere",
         error="no_such_workspace"),
    _run("--thread", "t1", "--db", "{db}", "--reason", "why", "--once"),
    _run("--thread", "t1", "--db", "{db}", "--approve", "x", "--reject", "x"),
    _run("--thread", "t1", "--once", "--bogus"), _run("--thread", "t1", "--once", "extra"),
    _run("--thread", "t1", "--once", "--db", ""), _run("--thread", "t1", "--once", "--db", "  "),
    *[_run("--thread", "t1", "--once", "--db", "{db}", "--timeout", t)
      for t in ("1_0", "+5", "1e3", " 5", "\uff15", "5.", "0x10")],
    _run("--thread", "t1", "--once", "--db", "{db}", MANDAPI_TIMEOUT="1_0"),
    _run("--thread", "t1", "--once", "--db", "{db}", "--trace"),
]


def _tool(entry: str, *argv: str, code: int = 2, error: str = "usage") -> Case:
    return Case(entry, argv, code, error)


HISTORY = [
    _tool("history"), _tool("history", "--thread", "t1", "--list"),
    _tool("history", "--thr", "t1"), _tool("history", "--thread", "t1", "--checkpoints", "0"),
    _tool("history", "--thread", "t1", "--checkpoints", "10001"),
    _tool("history", "--thread", "t1", "--checkpoints", "x"),
    _tool("history", "--list", "--db", "{tmp}"),
    _tool("history", "--list", "--db", "{tmp}/missing.sqlite", code=4, error="no_such_file"),
    _tool("history", "--thread", "nope", "--db", "{db}", code=4, error="no_such_thread"),
    _tool("history", "--list", "--db", "{tmp}/text.txt", code=4, error="damaged"),
    _tool("history", "--list", "--db", "postgresql://nobody@127.0.0.1:1/none",
          error="db_unreachable"),
    *[_tool("history", "--list", "--db", url) for url in (
        "postgresql://[::1/x", "postgresql://a b@x/y", "postgresql://u:pw@[::1/x",
        "postgresql://127.0.0.1:70000/x", "postgresql://127.0.0.1:abc/x")],
    _tool("history", "--list", "--db", "/proc/self/mem"),
    _tool("history", "--list", "--db", "/dev/null"),  # a device is no database file: usage
    _tool("history", "--thread", "a b", "--db", "{db}"),
    _tool("history", "--list", "--checkpoints", "5", "--db", "{db}"),
    _tool("history", "--list", "--db", ""), _tool("history", "--thread", "t1", "--checkpoints", "1_0"),
]
PRUNE = [
    *[_tool("prune", "--db", "{db}", "--completed", age)
      for age in ("abc", "-1d", "1w", "", "99999999999999999999d", "9" * 5000 + "d", " 1h",
                  "1h ", "\u0661h")],
    _tool("prune", "--db", "{db}", "--failed", "7 days"), _tool("prune", "--dry"),
    _tool("prune", "--db", "{tmp}"),
    _tool("prune", "--db", "{tmp}/missing.sqlite", code=4, error="no_such_file"),
    _tool("prune", "--db", ""),
]
VERIFY = [
    _tool("verify", "--db", "{tmp}"), _tool("verify", "--bogus"), _tool("verify", "--js"),
    _tool("verify", "--db", "{tmp}/missing.sqlite", code=4, error="no_such_file"),
    _tool("verify", "--db", "{tmp}/text.txt", code=4, error="damaged"),
    _tool("verify", "--db", ""),
]
COPY = [
    _tool("copy", "--from", "{db}"), _tool("copy", "--fro", "{db}", "--to", "{tmp}/c.sqlite"),
    _tool("copy", "--from", "{tmp}", "--to", "{tmp}/c.sqlite"),
    _tool("copy", "--from", "{db}", "--to", "{tmp}"),
    _tool("copy", "--from", "{db}", "--to", "{tmp}/c.sqlite", "--thread", "a b"),
    _tool("copy", "--from", "{tmp}/missing.sqlite", "--to", "{tmp}/c.sqlite", code=4,
          error="no_such_file"),
    _tool("copy", "--from", "{db}", "--to", "{tmp}/c.sqlite", "--thread", "nope", code=4,
          error="no_such_thread"),
    _tool("copy", "--from", "{db}", "--to", "{tmp}/twin.sqlite", code=4, error="exists"),
    _tool("copy", "--from", "", "--to", "{tmp}/c.sqlite"), _tool("copy", "--from", "{db}", "--to", ""),
]


def _batch(tasks: str | bytes | None, *argv: str, error: str = "usage") -> Case:
    return Case("batch", ("{tmp}/tasks.jsonl", "--db", "{db}", *argv), 2, error, tasks=tasks)


_OK_LINE = json.dumps({"thread_id": "b1", "task": TASK})
BATCH = [
    _batch(None), _batch(""), _batch("\n\n"), _batch(b"\xff\xfe{}\n"),
    _batch('{"task": "no id"}'), _batch("[" * 100_000 + "]" * 100_000),
    _batch('{"thread_id": "b1", "thread_id": "b2", "task": "x"}'),
    _batch('{"thread_id": "b1", "task": "x", "task": "y"}'),
    _batch("[1, 2]"), _batch('"text"'), _batch("17"), _batch("null"), _batch("{bad json"),
    _batch('{"thread_id": "b1", "task": "x", "max_attempts": "3"}'),
    _batch('{"thread_id": "b1", "task": "x", "max_attempts": true}'),
    _batch('{"thread_id": "b1", "task": "x", "max_attempts": 0}'),
    _batch('{"thread_id": "b1", "task": "x", "max_attempts": 1.5}'),
    _batch('{"thread_id": "b1", "task": "x", "max_attempts": NaN}'),
    _batch('{"thread_id": "b1", "task": "x", "max_attempts": 1' + "0" * 5000 + "}"),
    _batch('{"thread_id": "b1", "task": "x", "context_tokens": 10000001}'),
    _batch('{"thread_id": "b1", "task": "x", "colour": "red"}'),
    _batch('{"thread_id": "b1", "task": "x", "model": "offline_demo"}'),
    _batch('{"thread_id": "b1", "task": "x", "model": "mandapi-large"}'),
    _batch('{"thread_id": "b1", "task": "x", "workspace": "/no/such/folder"}',
           error="no_such_workspace"),  # as run's --workspace
    _batch('{"thread_id": "b1", "task": "x", "workspace": "a\\u0000b"}', error="no_such_workspace"),
    _batch('{"thread_id": "b 1", "task": "x"}'), _batch('{"thread_id": 7, "task": "x"}'),
    _batch('{"thread_id": {"a": 1}, "task": "x"}'),
    _batch('{"thread_id": null, "task": "x"}'), _batch('{"thread_id": "b1", "task": null}'),
    _batch('{"thread_id": "b1", "task": "   "}'), _batch('{"thread_id": "b1", "task": "\\ud800"}'),
    _batch(f"{_OK_LINE}\n{_OK_LINE}"),
    _batch(_OK_LINE, "--max-requests", "0"), _batch(_OK_LINE, "--max-requests", "abc"),
    _batch(_OK_LINE, "--max-req", "3"), _batch(_OK_LINE, "--parent", "a b"),
    _batch(_OK_LINE, "--enqueue"), _batch(_OK_LINE, "--parent", "p1"),
    _batch(_OK_LINE, "--enqueue", "--queue-db", ""),
    _batch(_OK_LINE, "--enqueue", "--queue-db", "postgresql://127.0.0.1:1/q"),  # SQLite --db
    _batch(_OK_LINE, "--queue-db", "postgresql://127.0.0.1:1/q"),  # without --enqueue
    _batch(_OK_LINE, "--bogus"), _batch(_OK_LINE, "--batch-id", "\udcff"),
    _batch(_OK_LINE, "--batch-id", ""), _batch(_OK_LINE, "--batch-id", "a\nb"),
    _batch(bytes(range(256)) * 64),
    _batch(_OK_LINE, "--db", ""), _batch(_OK_LINE, "--trace"),
]
CORPUS = RUN + HISTORY + PRUNE + VERIFY + COPY + BATCH


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with thread `t1` after one demo step (one counted attempt)."""
    from graph.run import main

    path = tmp_path_factory.mktemp("template") / "db.sqlite"
    assert main(["--thread", "t1", "--task", TASK, "--once", "--db", str(path)]) == 0
    return path


@pytest.fixture
def workdir(tmp_path: Path, template: Path) -> Path:
    """The test's folder: `db.sqlite` and `twin.sqlite` (copies of the template), a
    folder, a text file and an empty file."""
    shutil.copy(template, tmp_path / "db.sqlite")
    shutil.copy(template, tmp_path / "twin.sqlite")
    (tmp_path / "folder").mkdir()
    (tmp_path / "text.txt").write_text("not a database\n" * 20)
    (tmp_path / "empty.sqlite").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo.sqlite")  # would block open() forever
    return tmp_path


def _main(entry: str) -> Callable[[list[str]], int]:
    import importlib

    return importlib.import_module(f"graph.{entry}").main


def _state(tmp: Path) -> dict[str, str | None]:
    """Logical content of every database the folder held before the case ran."""
    state: dict[str, str | None] = {}
    for path in sorted(tmp.glob("*.sqlite")):
        if path.name in _NEW_TARGETS or not path.is_file():  # the FIFO: opening it blocks
            continue
        try:
            state[path.name] = SqliteBackend(path).fingerprint()
        except Exception:  # noqa: BLE001 - a damaged fixture file: compare its bytes
            state[path.name] = path.read_bytes().hex()
    return state


_NEW_TARGETS = ("c.sqlite",)
"""`graph.copy` targets the corpus names: created empty before the source is checked."""


def _fill(text: str, tmp: Path) -> str:
    return text.replace("{db}", str(tmp / "db.sqlite")).replace("{tmp}", str(tmp))


def run_case(case: Case, tmp: Path, as_json: bool, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Runs one corpus case in-process; returns (exit code, stdout, stderr)."""
    for name, value in case.env.items():
        monkeypatch.setenv(name, _fill(value, tmp))
    if case.tasks is not None:
        data = case.tasks.encode() if isinstance(case.tasks, str) else case.tasks
        (tmp / "tasks.jsonl").write_bytes(data)
    argv = [_fill(a, tmp) for a in case.argv] + (["--json"] if as_json else [])
    capsys.readouterr()
    code = _main(case.entry)(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("case", CORPUS, ids=[f"{n}-{c.id}" for n, c in enumerate(CORPUS)])
def test_bad_input_is_refused_with_its_code_in_one_line_and_counts_nothing(
        case: Case, as_json: bool, workdir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = _state(workdir)
    code, out, err = run_case(case, workdir, as_json, monkeypatch, capsys)
    assert code != 1, (out, err)
    assert "Traceback" not in out + err
    assert code == case.exit_code, (out, err)
    if as_json:
        lines = out.strip().splitlines()
        assert len(lines) == 1, out
        data = json.loads(lines[0])
        assert data["exit_code"] == code and data["error_code"] == case.error_code, data
        assert isinstance(data["error"], str) and data["error"]
    else:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"error ({case.error_code}): "), lines[0]
    assert _state(workdir) == before
    assert SqliteBackend(workdir / "db.sqlite").ledger_row("t1") == (1, 1, 4)
    assert SqliteBackend(workdir / "db.sqlite").ledger_row("n1") is None
    for name in _NEW_TARGETS:
        if (workdir / name).exists():
            assert SqliteBackend(workdir / name).ledger_row("t1") is None


WORKER_CASES = [
    ({}, "t1", {}, "usage"),
    ({"GRAPH_DB": "{db}"}, "a b", {}, "usage"),
    ({"GRAPH_DB": "{db}"}, "n1", {"task": TASK, "model": "offline_demo"}, "usage"),
    ({"GRAPH_DB": "{db}"}, "n1", {"task": TASK, "max_attempts": "3"}, "usage"),
    ({"GRAPH_DB": "{db}"}, "n1", {"task": TASK, "colour": "red"}, "usage"),
    ({"GRAPH_DB": "{db}"}, "n1", {"task": 7}, "usage"),
    ({"GRAPH_DB": "{db}"}, "n1", {"task": None}, "usage"),
    ({"GRAPH_DB": "{db}"}, None, {"task": TASK}, "usage"),
    ({"GRAPH_DB": "{db}"}, "n1", None, "usage"),
    ({"GRAPH_DB": "{db}", "MANDAPI_BASE_URL": "http://127.0.0.1:99999/v1"}, "t1", {}, "usage"),
    ({"GRAPH_DB": "{db}", "MANDAPI_TIMEOUT": "-3"}, "t1", {}, "usage"),
    ({"GRAPH_DB": "{tmp}"}, "t1", {"task": TASK}, "usage"),
    ({"GRAPH_DB": "{tmp}/text.txt"}, "t1", {"task": TASK}, "damaged"),
    ({"GRAPH_DB": "{db}"}, "t1", {"task": "another"}, "identity_mismatch"),
]


@pytest.mark.parametrize("env,thread_id,fields,error_code", WORKER_CASES)
def test_queue_worker_step_reports_bad_jobs_with_their_code(
        env: dict[str, str], thread_id: str, fields: Any, error_code: str, workdir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from graph.errors import ErrorCode
    from graph.fleet.worker import run_step

    for name, value in env.items():
        monkeypatch.setenv(name, _fill(value, workdir))
    before = _state(workdir)
    result = run_step(os.environ.get("GRAPH_DB", ""), thread_id, fields, False, None).result
    assert result["error_code"] == error_code
    assert result["exit_code"] == ErrorCode(error_code).exit_code != 1
    assert _state(workdir) == before


def test_corpus_covers_every_entry_point_with_at_least_80_inputs() -> None:
    by_entry = {e: sum(c.entry == e for c in CORPUS) for e in
                ("run", "history", "prune", "verify", "copy", "batch")}
    assert all(by_entry.values()), by_entry
    assert len(CORPUS) + len(WORKER_CASES) >= 80
    assert len({repr(c) for c in CORPUS}) == len(CORPUS)  # no input counted twice


def test_no_corpus_input_documents_exit_1() -> None:
    """Exit 1 means a bug: no corpus input may expect it (the test above then fails on it)."""
    assert all(c.exit_code != 1 for c in CORPUS)


def test_batch_thread_refused_at_run_time_gives_its_own_exit_code_not_1(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.batch import main

    lines = [{"thread_id": "t1", "task": "another task"}, {"thread_id": "b2", "task": TASK}]
    (workdir / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    code = main([str(workdir / "tasks.jsonl"), "--db", str(workdir / "db.sqlite"), "--once",
                 "--json", "--out", str(workdir / "out.jsonl")])
    summary = json.loads(capsys.readouterr().out)
    assert code == 4 == summary["exit_code"]
    assert summary["errors"] == {"identity_mismatch": 1}
    results = [json.loads(x) for x in (workdir / "out.jsonl").read_text().splitlines()]
    assert [r["exit_code"] for r in results] == [4, 0]
    assert SqliteBackend(workdir / "db.sqlite").ledger_row("t1") == (1, 1, 4)


SAMPLE = [c for c in CORPUS[::9] if "\udcff" not in "".join(c.argv)]
"""Every ninth corpus input, also run as a real process (the way users and schedulers do)."""
FRESH = {id(next(c for c in SAMPLE if c.entry == e)) for e in {c.entry for c in SAMPLE}}
"""The first sample input of each entry point runs in a fresh interpreter (`python -m`, its
start and imports included); the others are `python -m` forked from the preloaded
forkserver (`tests/forked.py`): the same real process, exit code and streams, without
another interpreter start."""


@pytest.fixture(scope="module")
def server() -> Any:
    from tests.forked import forkserver

    return forkserver()


@pytest.mark.parametrize("case", SAMPLE, ids=[c.id for c in SAMPLE])
def test_bad_input_as_a_real_process_prints_one_line_and_no_traceback(
        case: Case, workdir: Path, server: Any) -> None:
    import subprocess

    from tests.conftest import PYTHON, subprocess_env
    from tests.forked import ForkedProcess

    if case.tasks is not None:
        data = case.tasks.encode() if isinstance(case.tasks, str) else case.tasks
        (workdir / "tasks.jsonl").write_bytes(data)
    env = subprocess_env(**{k: _fill(v, workdir) for k, v in case.env.items()})
    argv = [_fill(a, workdir) for a in case.argv]
    if id(case) in FRESH:
        done = subprocess.run([PYTHON, "-m", f"graph.{case.entry}", *argv], env=env, cwd=workdir,
                              capture_output=True, text=True, timeout=120)
        code, out, err = done.returncode, done.stdout, done.stderr
    else:
        proc = ForkedProcess(server, f"graph.{case.entry}", argv, env, workdir)
        out, err = proc.communicate(timeout=120)
        code = proc.returncode
    assert code == case.exit_code, err
    assert "Traceback" not in out + err
    assert err.startswith(f"error ({case.error_code}): ")
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize("with_task", [False, True])
def test_folder_in_place_of_the_database_is_a_usage_error_not_damage(
        tmp_path: Path, with_task: bool, capsys: pytest.CaptureFixture[str]) -> None:
    from graph.run import main

    db = tmp_path / "checkpoints.sqlite"
    db.mkdir()
    code = main(["--thread", "t1", "--once", "--db", str(db), "--json",
                 *(["--task", TASK] if with_task else [])])
    out = json.loads(capsys.readouterr().out)
    assert (code, out["error_code"]) == (2, "usage")
    assert "is a folder" in out["error"] and str(db) in out["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints.sqlite"]
    assert not any(db.iterdir())


def test_a_workspace_that_is_a_file_is_called_not_a_folder(tmp_path: Path) -> None:
    from graph.errors import UsageError
    from graph.settings import resolve_folder

    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UsageError) as refused:
        resolve_folder(str(tmp_path / "notes.txt"), "--workspace")
    assert refused.value.error_code == "no_such_workspace"
    assert "exists but is not a folder" in refused.value.message
    assert "does not exist" not in refused.value.message
