"""Configuration mistakes are usage errors (exit 2) caught before anything is counted or stored."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import run_cli

TASK = "How long does shipping take at the demo shop?"
LIVE = {"MANDAPI_API_KEY": "sk-ok-123-000000", "MANDAPI_MODEL_ID": "mandapi-large"}


@pytest.mark.parametrize(("env", "flags", "needle"), [
    ({"MANDAPI_API_KEY": "sk-SECRETé"}, [], "MANDAPI_API_KEY"),
    ({"MANDAPI_API_KEY": "sk with space"}, [], "MANDAPI_API_KEY"),
    ({"MANDAPI_API_KEY": "sk-line\nbreak"}, [], "MANDAPI_API_KEY"),
    ({"MANDAPI_API_KEY": "sk-SECRET-short"}, [], "15 characters long; a real key has at least 16"),
    ({}, ["--timeout", "inf"], "timeout"),
    ({}, ["--timeout", "1e300"], "timeout"),
    ({}, ["--timeout", "0"], "timeout"),
    ({"MANDAPI_TIMEOUT": "nan"}, [], "timeout"),
    ({"MANDAPI_BASE_URL": "notaurl"}, [], "MANDAPI_BASE_URL"),
    ({"MANDAPI_BASE_URL": "ftp://host/v1"}, [], "MANDAPI_BASE_URL"),
    ({"MANDAPI_BASE_URL": "http://user:SECRETPW@127.0.0.1:1/v1"}, [], "credentials"),
    ({"MANDAPI_MODEL_ID": "a b"}, [], "MANDAPI_MODEL_ID"),
    ({"MANDAPI_MODEL_ID": ""}, [], "needs a model"),
])
def test_live_configuration_mistakes_count_nothing(backend, monkeypatch, env, flags, needle) -> None:
    for name, value in {**LIVE, **env}.items():
        monkeypatch.setenv(name, value)
    out = run_cli(["--thread", "t1", "--task", TASK, "--live", "--once", "--db", backend.db, *flags])
    assert (out["exit_code"], out["error_code"]) == (2, "usage"), out
    assert needle in out["error"]
    assert backend.ledger_row("t1") is None
    assert b"SECRET" not in (backend.dump() if backend.ledger_row("t1") is not None else b"")
    assert "SECRET" not in out["error"]


@pytest.mark.parametrize("value", ["", "  "])
def test_graph_db_set_but_empty_is_a_usage_error_unless_db_is_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRAPH_DB", value)
    out = run_cli(["--thread", "t1", "--task", TASK, "--once"])
    assert (out["exit_code"], out["error_code"]) == (2, "usage"), out
    assert "GRAPH_DB is set but empty" in out["error"]
    assert list(tmp_path.iterdir()) == []  # the default database was not created
    given = run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", str(tmp_path / "a.sqlite")])
    assert given["exit_code"] == 0, given


def test_a_short_key_set_for_an_offline_run_leaves_paths_and_text_as_they_are(
        sqlite_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key shorter than 16 characters is refused for `--live`, so it is never sent and no
    server can echo it: an offline run with one set does not replace its characters inside
    a thread id, a path or an answer (a new user's `sk-1` garbled every path holding it)."""
    monkeypatch.setenv("MANDAPI_API_KEY", "demo")
    out = run_cli(["--thread", "demo-thread", "--task", "Explain the demo data.", "--db",
                   str(sqlite_db), "--once"])
    assert out["exit_code"] == 0, out
    assert out["thread_id"] == "demo-thread" and "[redacted" not in str(out)


@pytest.mark.parametrize("task", ["", "   ", "caf\udce9"])
def test_blank_or_undecodable_tasks_are_usage_errors(sqlite_db: Path, task: str) -> None:
    out = run_cli(["--thread", "t1", "--task", task, "--db", str(sqlite_db)])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert not sqlite_db.exists()


def test_paid_model_without_live_creates_no_file(sqlite_db: Path) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--model", "x", "--db", str(sqlite_db)])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert not list(sqlite_db.parent.iterdir())


def test_missing_database_folder_is_a_usage_error(tmp_path: Path) -> None:
    out = run_cli(["--thread", "t1", "--task", TASK, "--db", str(tmp_path / "no" / "x.sqlite")])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")


def test_explicit_model_wins_over_the_environment_on_resume(sqlite_db: Path, monkeypatch) -> None:
    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", str(sqlite_db)])
    for name, value in LIVE.items():
        monkeypatch.setenv(name, value)
    out = run_cli(["--thread", "t1", "--live", "--model", "offline-demo", "--db", str(sqlite_db)])
    assert (out["exit_code"], out["status"]) == (0, "done")


def test_every_path_to_the_database_meets_the_same_writer_lock(sqlite_db: Path) -> None:
    from graph.store import open_store

    run_cli(["--thread", "t1", "--task", TASK, "--once", "--db", str(sqlite_db)])
    symlink, dotted = sqlite_db.parent / "alias.sqlite", sqlite_db.parent / "." / sqlite_db.name
    symlink.symlink_to(sqlite_db)
    with open_store(str(sqlite_db), create=False) as store, store.locks.hold("t1"):
        for path in (sqlite_db, symlink, dotted):
            out = run_cli(["--thread", "t1", "--once", "--db", str(path)])
            assert (out["exit_code"], out["error_code"]) == (5, "busy"), path
    # A hard link is a second WAL name: refused (tests/store/sqlite/test_second_names.py), not shared.
    assert run_cli(["--thread", "t1", "--once", "--db", str(symlink)])["status"] == "done"
    assert sorted(p.name for p in sqlite_db.parent.iterdir()) == [
        "alias.sqlite", "checkpoints.sqlite"], "no lock file to delete"


def test_langsmith_tracing_variables_never_upload_anything(sqlite_db: Path, monkeypatch) -> None:
    received: list[str] = []

    class Capture(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append(f"{self.command} {self.path}")
            self.send_response(200)
            self.end_headers()

        do_PATCH = do_GET = do_POST  # noqa: N815 - any contact at all is recorded

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for name, value in {"LANGSMITH_TRACING": "true", "LANGCHAIN_TRACING_V2": "true",
                            "LANGSMITH_API_KEY": "lsv2-test",
                            "LANGSMITH_ENDPOINT": f"http://127.0.0.1:{server.server_port}"}.items():
            monkeypatch.setenv(name, value)
        out = run_cli(["--thread", "t1", "--task", TASK, "--db", str(sqlite_db)])
        assert out["status"] == "done"
        time.sleep(1.0)  # LangSmith uploads from a background thread
    finally:
        server.shutdown()
        server.server_close()
    assert received == []


@pytest.mark.postgres
def test_postgres_resume_and_reads_never_create_tables_in_a_foreign_database() -> None:
    from graph.history import main as history_main
    from graph.verify import main as verify_main
    from tests.conftest import PostgresBackend, postgres_admin_url

    pg = PostgresBackend(postgres_admin_url())
    try:
        before = pg.fingerprint()
        out = run_cli(["--thread", "t1", "--once", "--db", pg.db])
        assert (out["exit_code"], out["error_code"]) == (4, "no_such_file")
        assert history_main(["--list", "--db", pg.db]) == 4
        assert verify_main(["--db", pg.db]) == 4
        assert pg.fingerprint() == before
    finally:
        pg.drop()


def test_postgres_passwords_are_redacted_everywhere() -> None:
    from graph.store.postgres.open import redact

    assert "s3cret" not in redact("postgresql://u:s3cret@h:5432/db")
    assert "s3cret" not in redact("postgresql://u@h:5432/db?sslmode=require&password=s3cret")
    out = run_cli(["--thread", "t", "--once", "--db",
                   "postgresql://postgres@127.0.0.1:1/x?password=s3cret"])
    assert out["exit_code"] == 2 and "s3cret" not in out["error"]


def test_libpq_key_value_strings_are_refused_not_taken_as_file_names(tmp_path: Path) -> None:
    out = run_cli(["--thread", "t", "--task", TASK, "--db", "host=127.0.0.1 password=s3cret"])
    assert (out["exit_code"], out["error_code"]) == (2, "usage")
    assert "s3cret" not in out["error"] and list(tmp_path.iterdir()) == []
