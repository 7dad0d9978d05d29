"""Shared fixtures: a clean environment, a private working folder, and thread helpers."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_CLEARED = ("MANDAPI_API_KEY", "MANDAPI_MODEL_ID", "MANDAPI_BASE_URL", "MANDAPI_TIMEOUT", "GRAPH_DB")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No test reads a real key or writes a real database: env cleared, cwd is tmp_path."""
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints.sqlite"


def run_cli(argv: list[str], **kwargs: Any) -> dict[str, Any]:
    """Runs `graph.run` in-process with `--json` and returns the parsed object."""
    from graph.run import run

    out = run([*argv, "--json"], **kwargs)
    data = json.loads(out.to_json())
    data["_next"] = out.next_nodes
    return data


def ledger_row(db: Path, thread_id: str) -> tuple[int, int, int] | None:
    """(attempts, claimed, max_attempts) read straight from the file."""
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT attempts, claimed, max_attempts FROM attempt_ledger WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()


def db_fingerprint(db: Path) -> str:
    """A hash of every row of every table (logical content), for 'unchanged' checks."""
    digest = hashlib.sha256()
    with sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for table in tables:
            digest.update(table.encode())
            for row in sorted(repr(r) for r in conn.execute(f'SELECT * FROM "{table}"')):
                digest.update(row.encode())
    return digest.hexdigest()


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


PYTHON = sys.executable
