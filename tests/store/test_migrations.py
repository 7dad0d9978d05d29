"""The one migration mechanism (`graph.store.migrations`): registry, old fixtures, refusals, atomicity.

INVARIANTS I4: old versions migrate explicitly, step by step; a newer or unknown version
is refused and the stored bytes are left unchanged; reading never writes; a table
upgrade happens whole or not at all.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from graph.agent import build_graph
from graph.checkpoints.integrity import validate_state
from graph.errors import RefusedError
from graph.history import main as history_main
from graph.store import migrations, open_store
from graph.store.migrations import (
    CURRENT,
    STATE,
    STEPS,
    VALUE_FORMAT,
    current_version,
    migrate_rows,
    migrate_state,
    state_write_back,
    steps_from,
    upgrade_table,
)
from graph.store.serde import MAGIC
from graph.store.sql.approvals import SqlApprovals
from graph.store.sql.schema import APPROVALS_COLUMNS, TABLES
from graph.verify import main as verify_main
from graph.verify import verify
from nodes.prompts import TOOL_ERROR_PREFIX
from nodes.state import SCHEMA_VERSION, ThreadInfo
from tests.conftest import ROOT, SqliteBackend, run_cli
from tests.fakes import ScriptedModel
from tests.store.test_approvals_migration import LEGACY_DDL, legacy_paused_thread, make_legacy

FIXTURES = ROOT / "tests" / "fixtures"
TABLE_FIXTURES = {("write_approvals", 1): LEGACY_DDL}
"""The DDL of every older version of every table (each a fixture, never rebuilt)."""
SUBJECTS = sorted({*CURRENT, *(("table", t) for t in TABLES)})


def test_value_format_is_the_serializers() -> None:
    assert current_version("value", VALUE_FORMAT) == int(MAGIC[3:].decode())


# ---- the registry ----------------------------------------------------------------------

@pytest.mark.parametrize("subject", SUBJECTS, ids=[f"{k}:{s}" for k, s in SUBJECTS])
def test_the_registry_has_one_step_for_every_version_up_to_the_current_one(subject) -> None:
    kind, name = subject
    latest = current_version(kind, name)
    chain = steps_from(kind, name, 1)
    assert [(s.from_version, s.to_version) for s in chain] == [
        (v, v + 1) for v in range(1, latest)]
    assert steps_from(kind, name, latest) == ()
    own = [s for s in STEPS if (s.kind, s.subject) == subject]
    assert sorted(s.from_version for s in own) == list(range(1, latest)), "no extra step"


def test_state_is_at_the_schema_version_and_every_step_names_what_it_writes() -> None:
    assert current_version("state", STATE) == SCHEMA_VERSION
    for step in STEPS:
        assert (step.kind == "state") == bool(step.writes), step
        assert step.upgrade.__doc__, f"{step} says why"


def test_every_older_table_version_has_a_fixture() -> None:
    for step in STEPS:
        if step.kind == "table":
            assert (step.subject, step.from_version) in TABLE_FIXTURES, step


@pytest.mark.parametrize("stored", [0, -1, True, "2", 2.0, None, SCHEMA_VERSION + 1])
def test_a_newer_or_unknown_state_version_is_refused(stored) -> None:
    values = {"thread": {"schema_version": stored}}
    with pytest.raises(RefusedError) as caught:
        migrate_state(values, "t")
    assert caught.value.error_code == "incompatible"
    assert values == {"thread": {"schema_version": stored}}, "the input is not changed"


def test_a_gap_in_the_steps_is_refused_never_defaulted(monkeypatch) -> None:
    monkeypatch.setattr(migrations, "STEPS", tuple(s for s in STEPS if s.from_version != 3
                                                   or s.kind != "state"))
    with pytest.raises(RefusedError, match="no migration from schema version 3") as c:
        migrate_state({"thread": {"schema_version": 2, "task": "x"}}, "t")
    assert c.value.error_code == "incompatible"
    assert migrate_state({"thread": {"schema_version": SCHEMA_VERSION}}, "t")[1] == SCHEMA_VERSION


def test_state_write_back_is_the_channels_the_steps_changed() -> None:
    values = {"thread": {"schema_version": SCHEMA_VERSION}, "messages": [], "progress": {}}
    assert state_write_back(values, SCHEMA_VERSION) == {}
    assert state_write_back(values, 1) == {"thread": values["thread"], "progress": values["progress"]}
    assert state_write_back(values, SCHEMA_VERSION - 1) == state_write_back(values, 1), "v6 -> v7"


# ---- every older state fixture migrates to the current shape ----------------------------

OLD_STATES = list(range(1, SCHEMA_VERSION))


@pytest.fixture(params=OLD_STATES, ids=[f"v{v}" for v in OLD_STATES])
def old_db(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, int]:
    target = tmp_path / f"v{request.param}.sqlite"
    shutil.copyfile(FIXTURES / f"v{request.param}.sqlite", target)
    target.chmod(0o600)
    return target, request.param


def test_each_old_state_fixture_migrates_to_the_current_shape(old_db) -> None:
    db, version = old_db
    with open_store(str(db), create=False, read_only=True) as store:
        graph = build_graph(store.checkpointer)
        for name in ("ready", "done", "crashed"):
            thread_id = f"v{version}_{name}"
            snapshot = graph.get_state({"configurable": {"thread_id": thread_id}})
            stored = snapshot.values
            assert stored["thread"]["schema_version"] == version
            migrated, was = migrate_state(stored, thread_id)
            assert was == version and stored["thread"]["schema_version"] == version
            assert set(migrated["thread"]) == set(get_type_hints(ThreadInfo))
            assert migrated["thread"]["schema_version"] == SCHEMA_VERSION
            assert migrated["thread"]["thread_id"] == thread_id
            assert migrated["progress"]["partial_answer"] is None  # v7: no old thread was cut off
            validate_state(migrated, tuple(snapshot.next), thread_id)


def test_reading_an_old_fixture_never_writes(old_db, capsys) -> None:
    db, version = old_db
    backend = SqliteBackend(db)
    before, before_bytes = backend.fingerprint(), db.read_bytes()
    assert verify(str(db)) == []
    assert verify_main(["--db", str(db)]) == 0
    for thread in ("ready", "done", "crashed"):
        assert history_main(["--thread", f"v{version}_{thread}", "--db", str(db), "--json"]) == 0
    assert history_main(["--list", "--db", str(db)]) == 0
    capsys.readouterr()
    assert backend.fingerprint() == before and db.read_bytes() == before_bytes


def test_a_gap_refuses_an_old_thread_and_leaves_its_bytes(old_db, monkeypatch) -> None:
    db, version = old_db
    monkeypatch.setattr(migrations, "STEPS", tuple(
        s for s in STEPS if (s.kind, s.from_version) != ("state", version)))
    with open_store(str(db), create=False):
        pass  # a writer's open adds the tables the old file lacks (graph.store.sql.schema)
    before = SqliteBackend(db).fingerprint()
    model = ScriptedModel([])
    out = run_cli(["--thread", f"v{version}_ready", "--once", "--db", str(db)],
                  model_factory=lambda m, s: model)
    assert (out["exit_code"], out["error_code"]) == (4, "incompatible"), out
    assert f"no migration from schema version {version}" in out["error"]
    assert model.requests == [] and SqliteBackend(db).fingerprint() == before


# ---- tables: write_approvals 1 -> 2 ------------------------------------------------------

class _Turns:
    def __init__(self, turns: dict[tuple[str, str], int]) -> None:
        self.turns = turns

    def reply_turn(self, thread_id: str, tool_call_id: str) -> int | None:
        return self.turns.get((thread_id, tool_call_id))


V1_ROW = {"thread_id": "w", "tool_call_id": "w1", "tool": "write_file", "args_sha256": "ab",
          "decision": "approve", "reason": None, "decided_at": "2026-01-01T00:00:00+00:00",
          "target": "report.md", "before_sha256": None, "after_sha256": None,
          "result": "Approved and written.", "applied_at": "2026-01-01T00:00:01+00:00"}


def test_a_v1_approval_row_migrates_to_the_current_shape() -> None:
    failed = {**V1_ROW, "tool_call_id": "w2", "result": f"{TOOL_ERROR_PREFIX} the file changed"}
    rows = migrate_rows("write_approvals", 1, [V1_ROW, failed], _Turns({("w", "w1"): 3}))
    assert all(set(r) == set(APPROVALS_COLUMNS) for r in rows)
    assert (rows[0]["attempt"], rows[0]["error"], rows[0]["applied_at"]) == (
        3, None, V1_ROW["applied_at"])
    assert (rows[1]["attempt"], rows[1]["error"], rows[1]["applied_at"]) == (
        0, failed["result"], None)
    assert migrate_rows("write_approvals", 2, rows, _Turns({})) == rows


class _FakeTable:
    name = "write_approvals"

    def __init__(self, version: int | None) -> None:
        self.version, self.rebuilt = version, None

    def stored_version(self) -> int | None:
        return self.version

    def stored_rows(self, version: int, thread_id: str | None = None) -> list[dict[str, Any]]:
        return [V1_ROW]

    def rebuild(self, rows: list[dict[str, Any]]) -> None:
        self.rebuilt = rows

    def lookups(self) -> _Turns:
        return _Turns({})


class _Db:
    def __init__(self) -> None:
        self.locks: list[int] = []

    def transaction(self):
        from contextlib import nullcontext

        return nullcontext()

    def serialize_migration(self, key: int) -> None:
        self.locks.append(key)


@pytest.mark.parametrize("stored", [3, 0])
def test_a_newer_or_unknown_table_version_is_refused_and_nothing_rebuilt(stored) -> None:
    table = _FakeTable(stored)
    with pytest.raises(RefusedError, match="table write_approvals version") as c:
        upgrade_table(_Db(), table)
    assert c.value.error_code == "incompatible" and table.rebuilt is None


def test_a_table_upgrade_holds_the_lock_and_skips_a_current_or_missing_table() -> None:
    for version, rebuilt in ((None, False), (2, False), (1, True)):
        db, table = _Db(), _FakeTable(version)
        upgrade_table(db, table)
        assert db.locks == [migrations.TABLE_UPGRADE_LOCK]
        assert (table.rebuilt is not None) == rebuilt


def _paused_on_old_table(backend, tmp_path: Path) -> None:
    """A thread paused for review whose write_approvals table is version 1 (two rows)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "log.txt").write_text("start\n")
    legacy_paused_thread(backend, tmp_path / "out")


def _columns(backend) -> set[str]:
    with open_store(backend.db, create=False, read_only=True) as store:
        cursor = store.sql.run("SELECT * FROM write_approvals WHERE 1 = 0")
        return {d[0] for d in cursor.description}


@pytest.mark.sql_only("write_approvals has an older shape only in SQL databases; Redis was born "
                      "at version 2 (test_approvals covers its rows)")
def test_a_failed_table_upgrade_leaves_the_old_table(backend, tmp_path, monkeypatch) -> None:
    _paused_on_old_table(backend, tmp_path)
    before = backend.fingerprint()
    inserted = []

    def insert_then_fail(self, row):
        if inserted:
            raise RuntimeError("killed mid-upgrade")
        inserted.append(row)
        original(self, row)

    original = SqlApprovals._insert
    monkeypatch.setattr(SqlApprovals, "_insert", insert_then_fail)
    with open_store(backend.db, create=False) as store, pytest.raises(RuntimeError):
        store.approvals.mark_applied("w", 9, "none")
    assert inserted, "the upgrade got past DROP and CREATE before failing"
    assert backend.fingerprint() == before
    assert "attempt" not in _columns(backend)
    monkeypatch.undo()
    with open_store(backend.db, create=False) as store:
        store.approvals.mark_applied("w", 9, "none")
        assert sorted(store.approvals.rows("w")) == [(0, "old_call"), (1, "w1")]
    assert "attempt" in _columns(backend)


@pytest.mark.sql_only("write_approvals has an older shape only in SQL databases; Redis was born "
                      "at version 2 (test_approvals covers its rows)")
def test_a_newer_table_version_is_refused_by_a_writer_and_changes_nothing(
        backend, monkeypatch) -> None:
    run_cli(["--thread", "w", "--task", "How long does shipping take?", "--db", backend.db])
    make_legacy(backend, [])
    before = backend.fingerprint()
    monkeypatch.setattr(SqlApprovals, "stored_version", lambda self: 3)
    with open_store(backend.db, create=False) as store:
        with pytest.raises(RefusedError, match="up to 2: upgrade") as caught:
            store.approvals.mark_applied("w", 1, "none")
        with pytest.raises(RefusedError):
            store.approvals.rows("w")
    assert caught.value.error_code == "incompatible"
    assert backend.fingerprint() == before


@pytest.mark.sql_only("write_approvals has an older shape only in SQL databases; Redis was born "
                      "at version 2 (test_approvals covers its rows)")
def test_readers_of_an_old_table_write_nothing(backend, tmp_path, capsys) -> None:
    _paused_on_old_table(backend, tmp_path)
    before = backend.fingerprint()
    assert verify(backend.db) == []
    assert history_main(["--thread", "w", "--db", backend.db, "--json"]) == 0
    with open_store(backend.db, create=False, read_only=True) as store:
        assert sorted(store.approvals.rows("w")) == [(0, "old_call"), (1, "w1")]
    capsys.readouterr()
    assert backend.fingerprint() == before and "attempt" not in _columns(backend)
