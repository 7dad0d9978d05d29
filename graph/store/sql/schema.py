"""Our tables, defined once: their names, SQLite and PostgreSQL DDL, triggers, indexes, migrations.

Both stores create and check their schema from here (`graph.store.sqlite.open`,
`graph.store.postgres.open`); the table classes (`graph.store.sql.ledger`, `graph.store.sql.attempt_log`,
`graph.store.sql.tombstones`, `graph.store.sql.approvals`, `graph.store.digest`) hold the statements that
read and write rows. Every statement here is idempotent (`IF NOT EXISTS`, `OR REPLACE`),
so running the whole schema on an older database only adds what it lacks.

The triggers keep the budget's promises in the database itself (INVARIANTS I1, I2): the
ledger and request caps never decrease, and the attempt log is append-only, so no fork,
replay or `update_state` of the graph can bring back a lower count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from graph.store.rows import APPROVAL_COLUMNS

__all__ = [
    "APPROVALS", "APPROVALS_COLUMNS", "APPROVALS_LEGACY_COLUMNS", "APPROVALS_MIGRATION", "CHECKPOINTS",
    "DIGESTS", "DIGEST_MARKER_KEY", "LEDGER", "LOG", "POSTGRES_MIGRATIONS_TABLE",
    "SQLITE_LANGGRAPH_COLUMN", "SQLITE_REQUIRED_TABLES", "SUMMARIES", "TABLES", "TOMBSTONES",
    "TRIGGERS", "ddl", "postgres_objects_query", "sqlite_objects",
]

Backend = Literal["sqlite", "postgres"]
"""The two database engines a store runs on."""

REQUEST_CAPS = "request_caps"
"""Shared request caps of batches and parent tasks: `(cap_id, requests, max_requests)`."""
LEDGER = "attempt_ledger"
"""The attempt ledger: one row per thread (the budget)."""
LOG = "attempt_log"
"""The append-only attempt log (the step log of `graph.history`)."""
TOMBSTONES = "thread_tombstones"
"""Tombstones of pruned threads."""
APPROVALS = "write_approvals"
"""Decisions on write calls, one row per call of one turn."""
DIGESTS = "checkpoint_digests"
"""Per-checkpoint and per-write digests (`graph.store.digest`)."""
SUMMARIES = "thread_summaries"
"""What `graph.run` answers for a finished thread, with the fingerprint of the rows it
was read from (`graph.store.sql.summaries`, read by `graph.store.poll`)."""

TABLES = (REQUEST_CAPS, LEDGER, LOG, TOMBSTONES, APPROVALS, DIGESTS, SUMMARIES)
"""Every table of ours on both backends, in the order the schema creates them."""

CHECKPOINTS = "checkpoints"
"""LangGraph's checkpoint table (same name on both backends)."""
SQLITE_LANGGRAPH_TABLES = (CHECKPOINTS, "writes")
"""LangGraph's tables in a SQLite file."""
SQLITE_REQUIRED_TABLES = frozenset({*SQLITE_LANGGRAPH_TABLES, LEDGER})
"""Tables every checkpoint database file has had, from the first version on."""
SQLITE_LANGGRAPH_COLUMN = ("writes", "task_path")
"""A column LangGraph's own set-up adds to SQLite files of older versions."""
POSTGRES_MIGRATIONS_TABLE = "checkpoint_migrations"
"""LangGraph's record of its applied PostgreSQL migrations (`v`)."""


@dataclass(frozen=True)
class Trigger:
    """A trigger of ours.

    Attributes:
        name: The trigger's name (on PostgreSQL also its function's name).
        table: The table it guards.
        guarded: True when a dropped trigger beside its table is refused as `damaged`
            (re-creating it would hide that the table was open to edits); False for a
            trigger added after its table, which a database from before it gains.
    """

    name: str
    table: str
    guarded: bool


TRIGGERS = (
    Trigger("request_caps_never_decreases", REQUEST_CAPS, guarded=False),
    Trigger("attempt_ledger_never_decreases", LEDGER, guarded=True),
    Trigger("attempt_log_append_only", LOG, guarded=True),
)
INDEXES = {"attempt_log_thread": LOG}
"""Our indexes, by name, with their table."""

_CAPS = f"""
CREATE TABLE IF NOT EXISTS {REQUEST_CAPS} (
    cap_id       TEXT PRIMARY KEY,
    requests     INTEGER NOT NULL CHECK (requests >= 0),
    max_requests INTEGER NOT NULL CHECK (max_requests >= 0 AND requests <= max_requests)
);"""

_LEDGER = f"""
CREATE TABLE IF NOT EXISTS {LEDGER} (
    thread_id    TEXT PRIMARY KEY,
    attempts     INTEGER NOT NULL CHECK (attempts >= 0),
    claimed      INTEGER NOT NULL CHECK (claimed >= 0 AND claimed <= attempts),
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1 AND attempts <= max_attempts),
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);"""

_LOG_COLUMNS = """
    thread_id  TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('reason', 'tool')),
    payload    TEXT NOT NULL,
    created_at TEXT NOT NULL
"""
_LOG = {backend: f"""
CREATE TABLE IF NOT EXISTS {LOG} (
    id {id_column},{_LOG_COLUMNS});
CREATE INDEX IF NOT EXISTS attempt_log_thread ON {LOG} (thread_id, id);"""
        for backend, id_column in (("sqlite", "INTEGER PRIMARY KEY AUTOINCREMENT"),
                                   ("postgres", "BIGSERIAL PRIMARY KEY"))}

_SUMMARIES = f"""
CREATE TABLE IF NOT EXISTS {SUMMARIES} (
    thread_id   TEXT PRIMARY KEY,
    outcome     TEXT NOT NULL,
    fingerprint TEXT NOT NULL
);"""

_TOMBSTONES = f"""
CREATE TABLE IF NOT EXISTS {TOMBSTONES} (
    thread_id    TEXT PRIMARY KEY,
    final_status TEXT NOT NULL,
    pruned_at    TEXT NOT NULL
);"""

APPROVALS_DDL = f"""
CREATE TABLE IF NOT EXISTS {APPROVALS} (
    thread_id     TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    tool_call_id  TEXT NOT NULL,
    tool          TEXT NOT NULL,
    arguments     TEXT,
    args_sha256   TEXT NOT NULL,
    decision      TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    reason        TEXT,
    decided_at    TEXT NOT NULL,
    target        TEXT,
    before_sha256 TEXT,
    after_sha256  TEXT,
    result        TEXT NOT NULL,
    error         TEXT,
    applied_at    TEXT,
    PRIMARY KEY (thread_id, attempt, tool_call_id)
);"""
"""The approvals table of today (keyed per turn)."""
APPROVALS_COLUMNS = APPROVAL_COLUMNS
"""Columns of a decision row, in table order."""
APPROVALS_LEGACY_COLUMNS = ("thread_id", "tool_call_id", "tool", "args_sha256", "decision",
                            "reason", "decided_at", "target", "before_sha256", "after_sha256",
                            "result", "applied_at")
"""Columns of the approvals table before the per-turn key (`PRIMARY KEY (thread_id,
tool_call_id)`, no `attempt`, `arguments` or `error`): its version 1. Table versions and
the steps between them are registered in `graph.store.migrations`."""
APPROVALS_MIGRATION = (f"DROP TABLE {APPROVALS}", APPROVALS_DDL)
"""Rebuilds a legacy approvals table in today's shape (the rows, upgraded by
`graph.store.migrations`, are re-inserted by `graph.store.sql.approvals` in the same
transaction)."""

def _digests(marker: str) -> str:
    """The digest table, with its marker row (kept when the table already has one)."""
    return f"""
CREATE TABLE IF NOT EXISTS {DIGESTS} (
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    digest        TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, digest)
);
INSERT INTO {DIGESTS} SELECT '', '', '', '', 0, '{marker}' WHERE NOT EXISTS
    (SELECT 1 FROM {DIGESTS} WHERE thread_id = '' AND checkpoint_id = '');"""

DIGEST_MARKER_KEY = ("", "", "", "", 0)
"""Key of the digest row holding the id from which on every checkpoint has a digest."""

_SQLITE_TRIGGERS = {
    REQUEST_CAPS: """
CREATE TRIGGER IF NOT EXISTS request_caps_never_decreases
BEFORE UPDATE ON request_caps
WHEN NEW.requests < OLD.requests OR NEW.max_requests <> OLD.max_requests
     OR NEW.cap_id IS NOT OLD.cap_id
BEGIN
    SELECT RAISE(ABORT, 'request cap never decreases');
END;""",
    LEDGER: """
CREATE TRIGGER IF NOT EXISTS attempt_ledger_never_decreases
BEFORE UPDATE ON attempt_ledger
WHEN NEW.attempts < OLD.attempts OR NEW.claimed < OLD.claimed
     OR NEW.max_attempts <> OLD.max_attempts
BEGIN
    SELECT RAISE(ABORT, 'attempt ledger never decreases');
END;""",
    LOG: """
CREATE TRIGGER IF NOT EXISTS attempt_log_append_only BEFORE UPDATE ON attempt_log
BEGIN SELECT RAISE(ABORT, 'attempt log is append-only'); END;""",
}

_POSTGRES_TRIGGERS = {
    REQUEST_CAPS: """
CREATE OR REPLACE FUNCTION request_caps_never_decreases() RETURNS trigger AS $$
BEGIN
    IF NEW.requests < OLD.requests OR NEW.max_requests <> OLD.max_requests
       OR NEW.cap_id IS DISTINCT FROM OLD.cap_id THEN
        RAISE EXCEPTION 'request cap never decreases';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER request_caps_never_decreases
BEFORE UPDATE ON request_caps
FOR EACH ROW EXECUTE FUNCTION request_caps_never_decreases();""",
    LEDGER: """
CREATE OR REPLACE FUNCTION attempt_ledger_never_decreases() RETURNS trigger AS $$
BEGIN
    IF NEW.attempts < OLD.attempts OR NEW.claimed < OLD.claimed
       OR NEW.max_attempts <> OLD.max_attempts THEN
        RAISE EXCEPTION 'attempt ledger never decreases';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER attempt_ledger_never_decreases
BEFORE UPDATE ON attempt_ledger
FOR EACH ROW EXECUTE FUNCTION attempt_ledger_never_decreases();""",
    LOG: """
CREATE OR REPLACE FUNCTION attempt_log_append_only() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'attempt log is append-only'; END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER attempt_log_append_only BEFORE UPDATE ON attempt_log
FOR EACH ROW EXECUTE FUNCTION attempt_log_append_only();""",
}
"""The triggers of `TRIGGERS`, by table, on each backend."""


def ddl(backend: Backend, marker: str) -> str:
    """The whole schema of ours on `backend`: tables, index, triggers, the digest marker.

    Args:
        backend: `sqlite` or `postgres`.
        marker: The digest table's marker (a checkpoint id, `graph.store.digest.new_marker`),
            used only when the table is created.

    Returns:
        One script of idempotent statements (sqlite3 `executescript`, psycopg `execute`).
    """
    triggers = _SQLITE_TRIGGERS if backend == "sqlite" else _POSTGRES_TRIGGERS
    return "".join([
        _CAPS, _LEDGER, triggers[REQUEST_CAPS], triggers[LEDGER],
        _LOG[backend], triggers[LOG], _TOMBSTONES, APPROVALS_DDL, _digests(marker), _SUMMARIES,
        "\n"])


def sqlite_objects() -> frozenset[tuple[str, str]]:
    """Every schema object this program and LangGraph create in a SQLite file.

    Returns:
        `(type, name)` pairs as `sqlite_master` lists them.
    """
    return frozenset({("table", name) for name in (*TABLES, *SQLITE_LANGGRAPH_TABLES)}
                     | {("index", name) for name in INDEXES}
                     | {("trigger", t.name) for t in TRIGGERS})


def postgres_objects_query() -> tuple[str, list[str]]:
    """A query whose one value says whether our whole schema is in place on PostgreSQL.

    True when our tables and triggers and LangGraph's record of its migrations exist,
    whatever LangGraph's version (`graph.store.postgres.open` also compares that version).

    Returns:
        The statement, written with `?` markers (`graph.store.sql.conn.Sql.value`), and its parameters.
    """
    checks = ["to_regclass(?) IS NOT NULL" for _ in (*TABLES, POSTGRES_MIGRATIONS_TABLE)]
    checks += ["EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = ? AND tgrelid = to_regclass(?))"
               for _ in TRIGGERS]
    params = [*TABLES, POSTGRES_MIGRATIONS_TABLE, *(p for t in TRIGGERS for p in (t.name, t.table))]
    return "SELECT " + " AND ".join(checks), params
