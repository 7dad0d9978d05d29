"""Every legal thread id works through every command on every backend; every other is refused.

Thread ids match `[A-Za-z0-9._:-]{1,128}` (`graph.settings.THREAD_ID_RE`). On Redis,
LangGraph's search queries broke on some of them (the id `_` was a query syntax error,
`A` also found `a`'s checkpoints): `graph.store.redis.exact` finds a thread's keys
exactly instead. Each id here goes through a step with `--task`, a step with
`--keep-checkpoints 1` (the window trim), `history`, `replay export`, then the whole
database through `verify`, `copy` (to a new SQLite file, and on Redis back into a new
Redis database), `run --cancel`, `prune --dry-run` and `prune`. Every id runs on
Redis, where the bug was; SQLite and PostgreSQL, which held, run a representative
subset to stay fast (in process, one database per backend).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.copy import main as copy_main
from graph.history import main as history_main
from graph.prune import main as prune_main
from graph.replay.__main__ import main as replay_main
from graph.run import main as run_main
from graph.verify import main as verify_main
from tests.conftest import PostgresBackend, postgres_admin_url
from tests.redis_server import start_server

TASK = "How long does shipping take at the demo shop?"

_PUNCT = (".", "_", ":", "-")
LEGAL = [
    *_PUNCT,  # alone
    "..", "__", "::", "...", "____", "._:-", "-_-", "_.", "--", "---",  # repeated and mixed
    *(f"{p}x" for p in _PUNCT), *(f"x{p}y" for p in _PUNCT), *(f"x{p}" for p in _PUNCT),
    "x", "-1", "0", "a" * 128, "_" * 128, "-" + "z" * 127, "Z" * 127 + ":",  # the maximum length
    "Case", "case",  # RediSearch tags are case-insensitive; our ids are not
    "mandapi-resume:ledger:x", "mandapi-resume:expiring:x", "mandapi-resume:lock:x",
    "checkpoint:x", "checkpoint_latest:x", "checkpoint_write:x:__empty__",
    "write_keys_zset:x", "__empty__", "00000000-0000-0000-0000-000000000000",  # upstream's sentinels
]
"""Legal ids: the punctuation alone, repeated, at the start, middle and end; the maximum
length; ids that differ only in case; ids that look like our and LangGraph's key names."""

SQL_SUBSET = [*_PUNCT, "__", "...", "--", "-x", "x:", "x_y", "a" * 128, "Case", "case",
              "mandapi-resume:ledger:x", "checkpoint:x", "__empty__"]
"""The ids SQLite and PostgreSQL run (they bind ids as parameters; nothing to escape)."""

ILLEGAL = ["a" * 129, "", "a b", " a", "a/b", "/", "*", "a*", "{a}", "a{", "é", "日本",
           "a\nb", "a\x00b", "?", "[a]", "a\\b"]
"""Ids outside the pattern: too long, empty, a space, `/`, glob and brace characters, unicode."""


def _out(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    text = capsys.readouterr().out
    return json.loads(text) if text.strip() else {}


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of the test's own on the backend named by the param."""
    if request.param == "sqlite":
        yield str(tmp_path / "ids.sqlite")
    elif request.param == "postgres":
        pg = PostgresBackend(postgres_admin_url())
        try:
            yield pg.db
        finally:
            pg.drop()
    else:
        server = start_server(tmp_path / "redis")
        try:
            yield server.url
        finally:
            server.stop()


@pytest.mark.parametrize(("database", "ids"), [
    ("sqlite", SQL_SUBSET),
    pytest.param("postgres", SQL_SUBSET, marks=pytest.mark.postgres),
    pytest.param("redis", LEGAL, marks=pytest.mark.redis),
], indirect=["database"])
def test_every_legal_id_goes_through_every_command(
        database: str, ids: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    failed: list[str] = []

    def check(what: str, tid: str, code: int, want: int = 0, **fields: Any) -> dict[str, Any]:
        out = _out(capsys)
        got = {k: out.get(k) for k in fields}
        if code != want or got != fields:
            failed.append(f"{what} {tid!r}: exit {code}, {out.get('error_code')} "
                          f"{str(out.get('message', ''))[:120]!r} {got}")
        return out

    capsys.readouterr()
    for tid in ids:
        check("run --task", tid, run_main(["--db", database, f"--thread={tid}", "--task", TASK,
                                           "--once", "--keep-checkpoints", "1", "--json"]),
              status="ready", attempts=1)
        out = check("run --keep-checkpoints 1", tid, run_main(
            ["--db", database, f"--thread={tid}", "--once", "--keep-checkpoints", "1", "--json"]),
            attempts=2)
        if out.get("status") not in ("ready", "done"):
            failed.append(f"keep-checkpoints {tid!r}: status {out.get('status')!r}")
        check("history", tid, history_main(["--db", database, f"--thread={tid}", "--json"]))
        recording = tmp_path / "rec.json"
        check("replay export", tid, replay_main(["export", f"--thread={tid}", "--db", database,
                                                 "-o", str(recording), "--json"]))
    check("verify", "*", verify_main(["--db", database, "--json"]))
    copied = str(tmp_path / "copy.sqlite")
    check("copy", "*", copy_main(["--from", database, "--to", copied, "--json"]))
    check("verify copy", "*", verify_main(["--db", copied, "--json"]))
    if database.startswith("redis://"):
        back = start_server(tmp_path / "back")
        try:
            check("copy into redis", "*", copy_main(["--from", copied, "--to", back.url, "--json"]))
            check("verify redis copy", "*", verify_main(["--db", back.url, "--json"]))
        finally:
            back.stop()
    for tid in ids:
        out = check("cancel", tid, run_main(["--db", database, f"--thread={tid}", "--cancel",
                                             "--json"]))
        if out.get("status") not in ("cancelled", "done"):  # a done thread stays done
            failed.append(f"cancel {tid!r}: status {out.get('status')!r}")
    check("prune --dry-run", "*", prune_main(["--db", database, "--failed", "0s", "--completed", "0s",
                                                    "--dry-run", "--json"]))
    check("prune", "*", prune_main(["--db", database, "--failed", "0s", "--completed", "0s",
                                           "--json"]))
    for tid in ids[::4]:
        check("run after prune", tid, run_main(["--db", database, f"--thread={tid}", "--once",
                                                "--json"]), want=4, error_code="pruned")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("tid", ILLEGAL, ids=repr)
@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                                      pytest.param("redis", marks=pytest.mark.redis)],
                         indirect=True)
def test_an_id_outside_the_pattern_is_a_usage_error_everywhere(
        database: str, tid: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    codes = {
        "run": run_main(["--db", database, f"--thread={tid}", "--task", TASK, "--json"]),
        "history": history_main(["--db", database, f"--thread={tid}", "--json"]),
        "export": replay_main(["export", f"--thread={tid}", "--db", database, "-o",
                               str(tmp_path / "r.json"), "--json"]),
        "copy": copy_main(["--from", database, "--to", str(tmp_path / "c.sqlite"),
                           f"--thread={tid}", "--json"]),
    }
    assert codes == dict.fromkeys(codes, 2), codes
