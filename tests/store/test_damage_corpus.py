"""The damage corpus: every stored column of every table, file damage, deleted and repointed rows.

Each case damages a copy of one source database per backend (SQLite: a file copy;
PostgreSQL: `CREATE DATABASE ... TEMPLATE`) and asserts, for the entry point that
reads the damaged data: exit 4 with its `error_code`, zero requests at the fake
MandAPI server, the stored data unchanged, and `graph.verify` listing the problem.
Cases in older checkpoints of a finished thread (never executed again) are checked
through `graph.history` and `graph.copy`, which must refuse them before writing.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ormsgpack
import pytest

from graph.errors import RefusedError
from graph.store.serde import MAGIC, make_serde
from tests.checkpoints.test_damage import FILE_CASES
from tests.conftest import PostgresBackend, SqliteBackend, postgres_admin_url, run_cli
from tests.fake_mandapi import FakeMandApi
from tests.pg_pool import create_database, own_name
from tests.sealing import checksummed_dumps
from tests.step.test_approvals import Writer

TASK = "How long does shipping take at the demo shop?"
WRITE_TASK = "Write the shipping summary to report.md and log it."
KEY = "sk-corpus-test-0123"
LATEST = ("checkpoint_id = (SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = '{t}')")
OLDEST_STATE = ("checkpoint_id = (SELECT min(checkpoint_id) FROM checkpoints WHERE thread_id = "
                "'{t}' AND checkpoint_id > (SELECT min(checkpoint_id) FROM checkpoints WHERE "
                "thread_id = '{t}'))")


@dataclass(frozen=True)
class Case:
    """One kind of damage: what to do to the database, to which thread, and the code."""

    damage: Callable[[Any], None]
    code: str = "damaged"
    thread: str = "t1"
    older: bool = False
    """Damage `graph.run` does not read (an older checkpoint, attempt-log rows): the run
    answers, `graph.history` and `graph.copy` refuse, `graph.verify` lists it."""


def _log_row(statement: str) -> Case:
    """A row added to the finished thread's attempt log: a step reads only the highest
    attempt (`SqlAttemptLog.last_attempt`), history, copy and verify read every row."""
    return Case(sql(statement, thread="old"), thread="old", older=True)


def sql(*statements: str, thread: str = "t1") -> Callable[[Any], None]:
    def damage(db: Any) -> None:
        for statement in statements:
            writes = "writes" if db.name == "sqlite" else "checkpoint_writes"
            db.execute(statement.format(t=thread, latest=LATEST.format(t=thread),
                                        oldest=OLDEST_STATE.format(t=thread), writes=writes))
    return damage


# ---- SQLite helpers: the whole checkpoint is one msgpack blob ------------------------

def _sqlite_checkpoint(db: Any, thread: str, where: str) -> tuple[str, dict]:
    with sqlite3.connect(db.path) as conn:
        cid, type_, blob = conn.execute(
            f"SELECT checkpoint_id, type, checkpoint FROM checkpoints WHERE thread_id = ? AND "
            f"{where.format(t=thread)}", (thread,)).fetchone()
    conn.close()
    return cid, make_serde().loads_typed((type_, blob))


def reshape(edit: Callable[[dict], Any], thread: str = "t1", where: str = LATEST
            ) -> Callable[[Any], None]:
    """Edits the SQLite checkpoint dict and stores it with a valid checksum."""
    def damage(db: Any) -> None:
        cid, checkpoint = _sqlite_checkpoint(db, thread, where)
        result = edit(checkpoint)
        type_, data = checksummed_dumps(checkpoint if result is None else result)
        db.execute("UPDATE checkpoints SET type = ?, checkpoint = ? WHERE thread_id = ? AND "
                   "checkpoint_id = ?", (type_, data, thread, cid))
    return damage


def _forbidden() -> ormsgpack.Ext:
    return ormsgpack.Ext(0, ormsgpack.packb(["pathlib", "Path", "/etc/passwd"]))


def _set_write(value: Any, channel: str = "__interrupt__") -> Callable[[Any], None]:
    """Replaces thread w's pending interrupt write by `value`, with a valid checksum."""
    def damage(db: Any) -> None:
        type_, data = checksummed_dumps(value)
        table, column = ("writes", "value") if db.name == "sqlite" else ("checkpoint_writes", "blob")
        db.execute(f"UPDATE {table} SET type = ?, {column} = ? WHERE thread_id = 'w' AND "
                   f"channel = ? AND {LATEST.format(t='w')}", (type_, data, channel))
    return damage


def _interrupt(value: Any) -> list:
    from langgraph.types import Interrupt

    return [Interrupt(value=value, id="0" * 32)]


META = {
    "metadata {}": "'{{}}'", "metadata null": "'null'", "metadata array": "'[]'",
    "metadata a string": "'\"text\"'", "metadata a number": "'42'",
    "metadata step is text": """'{{"source": "loop", "step": "two", "parents": {{}}}}'""",
    "metadata step is true": """'{{"source": "loop", "step": true, "parents": {{}}}}'""",
    "metadata without step": """'{{"source": "loop", "parents": {{}}}}'""",
    "metadata unknown source": """'{{"source": "evil", "step": 2, "parents": {{}}}}'""",
    "metadata parents an array": """'{{"source": "loop", "step": 2, "parents": []}}'""",
    "metadata extra key": """'{{"source": "loop", "step": 2, "parents": {{}}, "user": "x"}}'""",
}

COMMON: dict[str, Case] = {
    **{name: Case(sql(f"UPDATE checkpoints SET metadata = {value} WHERE thread_id = '{{t}}' "
                      "AND {latest}")) for name, value in META.items()},
    "ledger row deleted": Case(sql("DELETE FROM attempt_ledger WHERE thread_id = '{t}'")),
    "ledger re-inserted lower": Case(sql(
        "DELETE FROM attempt_ledger WHERE thread_id = '{t}'",
        "INSERT INTO attempt_ledger VALUES ('{t}', 0, 0, 4, '2026-01-01T00:00:00+00:00', "
        "'2026-01-01T00:00:00+00:00')")),
    "ledger re-inserted with another maximum": Case(sql(
        "DELETE FROM attempt_ledger WHERE thread_id = '{t}'",
        "INSERT INTO attempt_ledger VALUES ('{t}', 1, 1, 9, '2026-01-01T00:00:00+00:00', "
        "'2026-01-01T00:00:00+00:00')")),
    "attempt log payload not JSON": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
        "VALUES ('{t}', 1, 'reason', '{{bad', 'x')"),
    "attempt log payload an array": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
        "VALUES ('{t}', 1, 'reason', '[]', 'x')"),
    "attempt log payload without outcome": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
        "VALUES ('{t}', 1, 'reason', '{{}}', 'x')"),
    "attempt log payload with duplicate keys": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) VALUES "
        """('{t}', 1, 'reason', '{{"outcome": "answer", "outcome": "x"}}', 'x')"""),
    "attempt log tool payload without observation": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) VALUES "
        """('{t}', 1, 'tool', '{{"tool_call_id": "c"}}', 'x')"""),
    "attempt log attempt 0": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) VALUES "
        """('{t}', 0, 'reason', '{{"outcome": "answer"}}', 'x')"""),
    "ledger trigger dropped and count lowered": Case(lambda db: db.drop_trigger_and_lower()),
    "attempt log trigger dropped": Case(lambda db: db.drop_log_trigger()),
    "digest of the latest checkpoint deleted": Case(sql(
        "DELETE FROM checkpoint_digests WHERE thread_id = '{t}' AND task_id = '' AND {latest}")),
    "digest of the latest checkpoint changed": Case(sql(
        "UPDATE checkpoint_digests SET digest = 'x' WHERE thread_id = '{t}' AND task_id = '' "
        "AND {latest}")),
    "digest marker deleted": Case(sql("DELETE FROM checkpoint_digests WHERE thread_id = ''")),
    "digest marker altered": Case(sql(
        "UPDATE checkpoint_digests SET digest = 'x' WHERE thread_id = ''")),
    "digest of the interrupt write deleted": Case(sql(
        "DELETE FROM checkpoint_digests WHERE thread_id = 'w' AND task_id <> '' AND {latest}",
        thread="w"), thread="w"),
    "interrupt write an empty list": Case(_set_write([]), thread="w"),
    "interrupt write raw data, not an Interrupt": Case(_set_write([{"value": 1, "id": "x"}]),
                                                       thread="w"),
    "interrupt write not a review": Case(_set_write(_interrupt({"kind": "other"})), thread="w"),
    "interrupt write pending call malformed": Case(_set_write(_interrupt(
        {"kind": "approval", "pending": [{"tool_call_id": 5}]})), thread="w"),
    "interrupt write a dict": Case(_set_write({"kind": "approval"}), thread="w"),
    "interrupt write holds a forbidden type": Case(_set_write([_forbidden()]), thread="w"),
    "interrupt write checksum stripped": Case(lambda db: db.strip_write(), "incompatible", "w"),
    "interrupt write type NULL": Case(lambda db: db.write_type_null(), thread="w"),
    "interrupt write moved to the messages channel": Case(sql(
        "UPDATE {writes} SET channel = 'messages' WHERE thread_id = 'w' AND "
        "channel = '__interrupt__'", thread="w"), thread="w"),
    "interrupt write moved to another task": Case(sql(
        "UPDATE {writes} SET task_id = 'other' WHERE thread_id = 'w' AND "
        "channel = '__interrupt__'", thread="w"), thread="w"),
    "a write added to the paused task": Case(lambda db: db.add_write(), thread="w"),
    "older checkpoint holds a forbidden type": Case(lambda db: db.plant_old_forbidden(),
                                                    thread="old", older=True),
    "older checkpoint metadata not JSON object": Case(sql(
        "UPDATE checkpoints SET metadata = '[]' WHERE thread_id = '{t}' AND {oldest}",
        thread="old"), thread="old", older=True),
    "older checkpoint digest deleted": Case(sql(
        "DELETE FROM checkpoint_digests WHERE thread_id = '{t}' AND task_id = '' AND {oldest}",
        thread="old"), thread="old", older=True),
    "older checkpoint digest changed": Case(sql(
        "UPDATE checkpoint_digests SET digest = 'x' WHERE thread_id = '{t}' AND task_id = '' "
        "AND {oldest}", thread="old"), thread="old", older=True),
}

SQLITE: dict[str, Case] = {
    "metadata invalid JSON": Case(sql("UPDATE checkpoints SET metadata = '{{bad' WHERE "
                                      "thread_id = '{t}' AND {latest}")),
    "metadata invalid UTF-8": Case(sql("UPDATE checkpoints SET metadata = X'7bff' WHERE "
                                       "thread_id = '{t}' AND {latest}")),
    "metadata SQL NULL": Case(sql("UPDATE checkpoints SET metadata = NULL WHERE "
                                  "thread_id = '{t}' AND {latest}")),
    "checkpoint type NULL": Case(sql("UPDATE checkpoints SET type = NULL WHERE "
                                     "thread_id = '{t}' AND {latest}")),
    "checkpoint type json": Case(sql("UPDATE checkpoints SET type = 'json' WHERE "
                                     "thread_id = '{t}' AND {latest}")),
    "checkpoint stored as TEXT": Case(sql("UPDATE checkpoints SET checkpoint = 'plain text' "
                                          "WHERE thread_id = '{t}' AND {latest}")),
    "checkpoint blob NULL": Case(sql("UPDATE checkpoints SET checkpoint = NULL WHERE "
                                     "thread_id = '{t}' AND {latest}")),
    "checkpoint blob empty": Case(sql("UPDATE checkpoints SET checkpoint = X'' WHERE "
                                      "thread_id = '{t}' AND {latest}"), "incompatible"),
    "checkpoint blob truncated": Case(sql("UPDATE checkpoints SET checkpoint = "
                                          "substr(checkpoint, 1, 60) WHERE thread_id = '{t}' "
                                          "AND {latest}")),
    "checkpoint checksum stripped": Case(sql("UPDATE checkpoints SET checkpoint = "
                                             "substr(checkpoint, 37) WHERE thread_id = '{t}' "
                                             "AND {latest}"), "incompatible"),
    "checkpoint byte flipped": Case(lambda db: db.flip_checkpoint_byte()),
    "checkpoint id renamed": Case(sql("UPDATE checkpoints SET checkpoint_id = checkpoint_id || "
                                      "'9' WHERE thread_id = '{t}' AND {latest}")),
    "checkpoint without channel_versions": Case(reshape(lambda c: c.pop("channel_versions"))),
    "checkpoint id a number": Case(reshape(lambda c: c.update(id=5))),
    "checkpoint id of another checkpoint": Case(reshape(lambda c: c.update(id="1" * 36))),
    "checkpoint versions_seen a list": Case(reshape(lambda c: c.update(versions_seen=[]))),
    "checkpoint a string": Case(reshape(lambda c: "null")),
    "checkpoint without channel_values": Case(reshape(lambda c: c.pop("channel_values"))),
    "checkpoint state lacks messages": Case(reshape(lambda c: c["channel_values"].pop("messages"))),
    "checkpoint state lacks thread": Case(reshape(lambda c: c["channel_values"].pop("thread"))),
    "checkpoint version a list": Case(reshape(lambda c: c["channel_versions"].update(messages=[]))),
    "checkpoint extra key": Case(reshape(lambda c: c.update(note="x"))),
    "checkpoint v is text": Case(reshape(lambda c: c.update(v="4"))),
    "checkpoint value holds a forbidden type": Case(reshape(
        lambda c: c["channel_values"]["progress"].update(answer=_forbidden()))),
    "ledger maximum text": Case(sql(
        "DELETE FROM attempt_ledger WHERE thread_id = '{t}'",
        "INSERT INTO attempt_ledger VALUES ('{t}', 1, 1, 'a', '2026-01-01T00:00:00+00:00', "
        "'2026-01-01T00:00:00+00:00')")),
    "ledger attempts 1.5": Case(sql("UPDATE attempt_ledger SET attempts = 1.5 WHERE "
                                    "thread_id = '{t}'")),
    "ledger maximum 4.5": Case(sql(
        "DELETE FROM attempt_ledger WHERE thread_id = '{t}'",
        "INSERT INTO attempt_ledger VALUES ('{t}', 1, 1, 4.5, '2026-01-01T00:00:00+00:00', "
        "'2026-01-01T00:00:00+00:00')")),
    "ledger attempts and claimed 1.5": Case(sql(
        "DELETE FROM attempt_ledger WHERE thread_id = '{t}'",
        "INSERT INTO attempt_ledger VALUES ('{t}', 1.5, 1.5, 4, '2026-01-01T00:00:00+00:00', "
        "'2026-01-01T00:00:00+00:00')")),
    "ledger updated_at a blob": Case(sql(
        "UPDATE attempt_ledger SET updated_at = X'00' WHERE thread_id = '{t}'")),
    "attempt log payload not UTF-8": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
        "VALUES ('{t}', 1, 'reason', CAST(X'7bff7d' AS TEXT), 'x')"),
    "attempt log payload a blob": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) "
        "VALUES ('{t}', 1, 'reason', X'7b7d', 'x')"),
    "attempt log attempt text": Case(sql(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) VALUES "
        """('{t}', 'x', 'reason', '{{"outcome": "answer"}}', 'x')""")),
    "attempt log attempt 1.5": Case(sql(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) VALUES "
        """('{t}', 1.5, 'reason', '{{"outcome": "answer"}}', 'x')""")),
    "attempt log created_at a blob": _log_row(
        "INSERT INTO attempt_log (thread_id, attempt, kind, payload, created_at) VALUES "
        """('{t}', 1, 'reason', '{{"outcome": "answer"}}', X'05')"""),
    "tombstone status a blob": Case(sql(
        "INSERT INTO thread_tombstones VALUES ('{t}', X'05', 'x')")),
    "tombstone time a blob": Case(sql(
        "INSERT INTO thread_tombstones VALUES ('{t}', 'done', X'00')")),
    "approval hash a blob": Case(sql(
        "INSERT INTO write_approvals VALUES ('w', 1, 'w9', 'write_file', NULL, X'05', 'approve', "
        "NULL, 'x', NULL, NULL, NULL, 'ok', NULL, NULL)"), thread="w"),
    "approval tool a blob": Case(sql(
        "INSERT INTO write_approvals VALUES ('w', 1, 'w9', X'00', NULL, 'h', 'approve', NULL, "
        "'x', NULL, NULL, NULL, 'ok', NULL, NULL)"), thread="w"),
    "approval result not UTF-8": Case(sql(
        "INSERT INTO write_approvals VALUES ('w', 1, 'w9', 'write_file', NULL, 'h', 'approve', "
        "NULL, 'x', NULL, NULL, NULL, CAST(X'ff' AS TEXT), NULL, NULL)"), thread="w"),
    "approval turn not an integer": Case(sql(
        "INSERT INTO write_approvals VALUES ('w', 'one', 'w9', 'write_file', NULL, 'h', "
        "'approve', NULL, 'x', NULL, NULL, NULL, 'ok', NULL, NULL)"), thread="w"),
    "approval error a blob": Case(sql(
        "INSERT INTO write_approvals VALUES ('w', 1, 'w9', 'write_file', NULL, 'h', 'approve', "
        "NULL, 'x', NULL, NULL, NULL, 'ok', X'07', NULL)"), thread="w"),
    "interrupt write stored as TEXT": Case(sql(
        "UPDATE writes SET value = 'text' WHERE thread_id = 'w' AND channel = '__interrupt__'",
        thread="w"), thread="w"),
    "older checkpoint checksum fails": Case(sql(
        "UPDATE checkpoints SET checkpoint = X'00' || checkpoint WHERE thread_id = '{t}' AND "
        "{oldest}", thread="old"), "incompatible", "old", True),
    **{f"file: {name}": Case(lambda db, d=damage: d(db.path), code)
       for name, (damage, code) in FILE_CASES.items()},
}

POSTGRES: dict[str, Case] = {
    "row JSON without channel_versions": Case(sql(
        "UPDATE checkpoints SET checkpoint = checkpoint - 'channel_versions' WHERE "
        "thread_id = '{t}' AND {latest}")),
    "row JSON id a number": Case(sql(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{{id}}', '5') WHERE "
        "thread_id = '{t}' AND {latest}")),
    "row JSON id of another checkpoint": Case(sql(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{{id}}', '\"x\"') WHERE "
        "thread_id = '{t}' AND {latest}")),
    "row JSON versions_seen a list": Case(sql(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{{versions_seen}}', '[]') "
        "WHERE thread_id = '{t}' AND {latest}")),
    "row JSON null": Case(sql("UPDATE checkpoints SET checkpoint = 'null' WHERE "
                              "thread_id = '{t}' AND {latest}")),
    "row JSON without channel_values": Case(sql(
        "UPDATE checkpoints SET checkpoint = checkpoint - 'channel_values' WHERE "
        "thread_id = '{t}' AND {latest}")),
    "row JSON extra key": Case(sql(
        "UPDATE checkpoints SET checkpoint = checkpoint || '{{\"note\": 1}}' WHERE "
        "thread_id = '{t}' AND {latest}")),
    "row JSON v is text": Case(sql(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{{v}}', '\"4\"') WHERE "
        "thread_id = '{t}' AND {latest}")),
    "edited messages inline, version pointing at no blob": Case(sql(
        "UPDATE checkpoints SET checkpoint = jsonb_set(jsonb_set(checkpoint, "
        "'{{channel_values,messages}}', '[{{\"role\": \"user\", \"content\": \"x\"}}]'), "
        "'{{channel_versions,messages}}', '\"99\"') WHERE thread_id = '{t}' AND {latest}")),
    "messages version pointing at an older blob": Case(sql(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{{channel_versions,messages}}',"
        " to_jsonb((SELECT min(version) FROM checkpoint_blobs WHERE thread_id = '{t}' AND "
        "channel = 'messages'))) WHERE thread_id = '{t}' AND {latest}")),
    "messages version pointing at no blob": Case(sql(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{{channel_versions,messages}}',"
        " '\"99\"') WHERE thread_id = '{t}' AND {latest}")),
    "messages blob deleted": Case(sql(
        "DELETE FROM checkpoint_blobs WHERE thread_id = '{t}' AND channel = 'messages' AND "
        "version = (SELECT max(version) FROM checkpoint_blobs WHERE thread_id = '{t}' AND "
        "channel = 'messages')")),
    "messages blob and the reason write deleted": Case(sql(
        "DELETE FROM checkpoint_blobs WHERE thread_id = '{t}' AND channel = 'messages' AND "
        "version = (SELECT max(version) FROM checkpoint_blobs WHERE thread_id = '{t}' AND "
        "channel = 'messages')",
        "DELETE FROM checkpoint_writes WHERE thread_id = '{t}' AND channel = 'messages' AND "
        "checkpoint_id = (SELECT max(checkpoint_id) FROM checkpoint_writes WHERE "
        "thread_id = '{t}' AND channel = 'messages')")),
    "thread blob deleted": Case(sql(
        "DELETE FROM checkpoint_blobs WHERE thread_id = '{t}' AND channel = 'thread'")),
    "progress blob deleted": Case(sql(
        "DELETE FROM checkpoint_blobs WHERE thread_id = '{t}' AND channel = 'progress' AND "
        "version = (SELECT max(version) FROM checkpoint_blobs WHERE thread_id = '{t}' AND "
        "channel = 'progress')")),
    "messages blob replaced by an older one": Case(sql(
        "UPDATE checkpoint_blobs SET blob = (SELECT blob FROM checkpoint_blobs WHERE "
        "thread_id = '{t}' AND channel = 'messages' ORDER BY version LIMIT 1) WHERE "
        "thread_id = '{t}' AND channel = 'messages' AND version = (SELECT max(version) FROM "
        "checkpoint_blobs WHERE thread_id = '{t}' AND channel = 'messages')")),
    "messages blob moved to another channel": Case(sql(
        "UPDATE checkpoint_blobs SET channel = 'messages2' WHERE thread_id = '{t}' AND "
        "channel = 'messages'")),
    "blob type empty (LangGraph's absent value)": Case(sql(
        "UPDATE checkpoint_blobs SET type = 'empty' WHERE thread_id = '{t}' AND "
        "channel = 'thread'")),
    "blob type json": Case(sql(
        "UPDATE checkpoint_blobs SET type = 'json' WHERE thread_id = '{t}' AND "
        "channel = 'thread'")),
    "blob truncated": Case(sql(
        "UPDATE checkpoint_blobs SET blob = substring(blob from 1 for 60) WHERE "
        "thread_id = '{t}' AND channel = 'thread'")),
    "blob checksum stripped": Case(sql(
        "UPDATE checkpoint_blobs SET blob = substring(blob from 37) WHERE thread_id = '{t}' "
        "AND channel = 'thread'"), "incompatible"),
    "blob byte flipped": Case(lambda db: db.flip_blob_byte()),
    "blob empty": Case(sql(
        "UPDATE checkpoint_blobs SET blob = ''::bytea WHERE thread_id = '{t}' AND "
        "channel = 'thread'"), "incompatible"),
    "older checkpoint blob checksum fails": Case(sql(
        "UPDATE checkpoint_blobs SET blob = '\\x00'::bytea || blob WHERE thread_id = '{t}' AND "
        "channel = 'progress' AND version = (SELECT min(version) FROM checkpoint_blobs WHERE "
        "thread_id = '{t}' AND channel = 'progress')", thread="old"), "incompatible", "old",
        True),
}


class _Damage:
    """The damage helpers shared by both backends (mixed into the conftest backends)."""

    name: str
    execute: Callable[..., None]

    def execute_fmt(self, statement: str, params: tuple = ()) -> None:
        writes = "writes" if self.name == "sqlite" else "checkpoint_writes"
        self.execute(statement.replace("{writes}", writes), params)

    def drop_trigger_and_lower(self) -> None:
        self.execute("DROP TRIGGER attempt_ledger_never_decreases" + (
            "" if self.name == "sqlite" else " ON attempt_ledger"))
        self.execute("UPDATE attempt_ledger SET attempts = 0, claimed = 0 WHERE thread_id = 't1'")

    def drop_log_trigger(self) -> None:
        self.execute("DROP TRIGGER attempt_log_append_only" + (
            "" if self.name == "sqlite" else " ON attempt_log"))

    def _write_row(self) -> tuple[str, str, bytes]:
        table, column = ("writes", "value") if self.name == "sqlite" else ("checkpoint_writes",
                                                                          "blob")
        conn = self._read_conn()
        try:
            row = conn.execute(f"SELECT type, {column} FROM {table} WHERE thread_id = 'w' AND "
                               "channel = '__interrupt__'").fetchone()
        finally:
            conn.close()
        return column, row[0], bytes(row[1])

    def strip_write(self) -> None:
        column, _, data = self._write_row()
        self._update_write(f"{column} = ?", (data[len(MAGIC) + 32:],))

    def write_type_null(self) -> None:
        self._update_write("type = NULL", ())

    def _update_write(self, assignment: str, params: tuple) -> None:
        self.execute_fmt(f"UPDATE {{writes}} SET {assignment} WHERE thread_id = 'w' AND "
                         "channel = '__interrupt__'", params)

    def add_write(self) -> None:
        type_, data = checksummed_dumps([{"role": "user", "content": "injected"}])
        column = "value" if self.name == "sqlite" else "blob"
        self.execute_fmt(
            f"INSERT INTO {{writes}} (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, "
            f"channel, type, {column}) SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, "
            "7, 'messages', ?, ? FROM {writes} WHERE thread_id = 'w' AND channel = "
            "'__interrupt__'", (type_, data))

    def plant_old_forbidden(self) -> None:
        if self.name == "sqlite":
            reshape(lambda c: c["channel_values"]["progress"].update(answer=_forbidden()),
                    "old", OLDEST_STATE)(self)
            return
        type_, data = checksummed_dumps({"answer": _forbidden()})
        self.execute("UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = 'old' AND "
                     "channel = 'progress' AND version = (SELECT min(version) FROM "
                     "checkpoint_blobs WHERE thread_id = 'old' AND channel = 'progress')", (data,))
        assert type_ == "msgpack"

    def flip_checkpoint_byte(self) -> None:
        self._flip("checkpoints", "checkpoint", f"thread_id = 't1' AND {LATEST.format(t='t1')}")

    def flip_blob_byte(self) -> None:
        self._flip("checkpoint_blobs", "blob", "thread_id = 't1' AND channel = 'thread'")

    def _flip(self, table: str, column: str, where: str) -> None:
        conn = self._read_conn()
        try:
            data = bytearray(conn.execute(f"SELECT {column} FROM {table} WHERE {where}"
                                          ).fetchone()[0])
        finally:
            conn.close()
        position = data.find(b"shipping", len(MAGIC) + 32)
        data[position] ^= 0x20
        self.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (bytes(data),))


class SqliteCopy(_Damage, SqliteBackend):
    def _read_conn(self) -> Any:
        return sqlite3.connect(self.path)

    def settle(self) -> None:
        """Folds the WAL left by the damage into the file, so its bytes can be compared."""
        conn = sqlite3.connect(self.path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()

    def state(self) -> Any:
        return self.path.read_bytes() if self.path.is_file() else "<not a file>"


class PostgresCase(_Damage, PostgresBackend):
    """One database for every PostgreSQL case, restored from a pristine schema before each.

    `CREATE DATABASE ... TEMPLATE` per case costs seconds on a busy server; restoring
    the rows (and re-creating a trigger a case dropped) takes milliseconds.
    """

    def __init__(self, admin_url: str, template: str) -> None:  # noqa: D107
        import psycopg

        self._psycopg = psycopg
        self.admin_url = admin_url
        self.dbname = own_name("case")
        with psycopg.connect(admin_url, autocommit=True) as conn:
            create_database(conn, self.dbname, template)  # synchronous_commit off: see pg_pool
        self.db = f"{admin_url.rsplit('/', 1)[0]}/{self.dbname}"
        with self._read_conn() as conn:
            conn.execute("CREATE SCHEMA pristine")
            for table in self._tables(conn):
                conn.execute(f'CREATE TABLE pristine."{table}" AS SELECT * FROM public."{table}"')

    @staticmethod
    def _tables(conn: Any) -> list[str]:
        return [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]

    def restore(self) -> None:
        """Puts every row back as built, and our triggers."""
        from graph.store.sql.schema import ddl

        with self._read_conn() as conn, conn.transaction():
            tables = self._tables(conn)
            conn.execute("TRUNCATE " + ", ".join(f'public."{t}"' for t in tables))
            for table in tables:
                conn.execute(f'INSERT INTO public."{table}" SELECT * FROM pristine."{table}"')
            conn.execute(ddl("postgres", marker="unused: the restored table has its marker"))

    def _read_conn(self) -> Any:
        return self._psycopg.connect(self.db, autocommit=True)

    def settle(self) -> None:
        """Nothing to fold on PostgreSQL."""

    def state(self) -> Any:
        return self.fingerprint()


def _build(db: str, fake: FakeMandApi, out_dir: Path, monkeypatch: Any) -> None:
    """Three threads: t1 (live, one step in), w (paused for review), old (finished)."""
    monkeypatch.setenv("MANDAPI_API_KEY", KEY)
    monkeypatch.setenv("MANDAPI_BASE_URL", fake.base_url)
    out = run_cli(["--thread", "t1", "--task", TASK, "--model", "mandapi-large", "--live",
                   "--once", "--db", db])
    assert (out["status"], out["exit_code"]) == ("ready", 0), out
    model = Writer()
    for argv in (["--task", WRITE_TASK, "--allow-writes", str(out_dir)], []):
        out = run_cli(["--thread", "w", "--once", "--db", db, *argv],
                      model_factory=lambda m, s: model)
    assert out["status"] == "awaiting_approval", out
    assert run_cli(["--thread", "old", "--task", TASK, "--db", db])["status"] == "done"


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with FakeMandApi(tmp_path_factory.mktemp("fake") / "requests.jsonl") as server:
        yield server


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory, fake: FakeMandApi) -> Any:
    """One source database per backend, built once; each case damages a copy."""
    built: dict[str, Any] = {}
    folder = tmp_path_factory.mktemp("source")
    out_dir = folder / "out"
    out_dir.mkdir()
    (out_dir / "log.txt").write_text("start\n")

    def get(name: str) -> Any:
        if name not in built:
            with pytest.MonkeyPatch.context() as mp:
                mp.chdir(folder)
                if name == "sqlite":
                    path = folder / "source.sqlite"
                    _build(str(path), fake, out_dir, mp)
                    built[name] = path
                else:
                    pg = PostgresBackend(postgres_admin_url())
                    _build(pg.db, fake, out_dir, mp)
                    built["postgres source"] = pg
                    built[name] = PostgresCase(postgres_admin_url(), pg.dbname)
        return built[name]

    yield get
    for value in built.values():
        if isinstance(value, PostgresBackend):
            value.drop()


def _cases() -> list[Any]:
    params = []
    for backend, table in (("sqlite", {**COMMON, **SQLITE}), ("postgres", {**COMMON, **POSTGRES})):
        marks = [pytest.mark.postgres] if backend == "postgres" else []
        params += [pytest.param(backend, name, marks=marks, id=f"{backend}-{name}")
                   for name in sorted(table)]
    return params


CASES = {"sqlite": {**COMMON, **SQLITE}, "postgres": {**COMMON, **POSTGRES}}


def _problems(db: str) -> list[str]:
    from graph.verify import verify

    try:
        return verify(db)
    except RefusedError as exc:
        return [exc.message]


@pytest.mark.parametrize(("backend_name", "case_name"), _cases())
def test_damaged_data_is_refused_counted_nowhere_and_verify_lists_it(
    backend_name: str, case_name: str, sources: Any, fake: FakeMandApi, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = CASES[backend_name][case_name]
    source = sources(backend_name)
    if backend_name == "sqlite":
        db: Any = SqliteCopy(tmp_path / "checkpoints.sqlite")
        shutil.copyfile(source, db.path)
        db.path.chmod(0o600)
    else:
        db = source
        db.restore()
    try:
        case.damage(db)
        if not case_name.startswith("file:"):
            db.settle()
        before, requests = db.state(), len(fake.requests())
        monkeypatch.setenv("MANDAPI_API_KEY", KEY)
        monkeypatch.setenv("MANDAPI_BASE_URL", fake.base_url)
        if case.older:
            _assert_older_refused(db, case)
        else:
            decide = ["--approve", "w1", "--approve", "w2"] if case.thread == "w" else []
            out = run_cli(["--thread", case.thread, "--once", "--live", "--db", db.db, *decide])
            assert (out["exit_code"], out["error_code"]) == (4, case.code), out
        assert len(fake.requests()) == requests
        assert db.state() == before
        problems = _problems(db.db)
        assert problems and any(case.thread in p or "table" in p or db.db in p
                                for p in problems), problems
        assert db.state() == before
    finally:
        pass


def _assert_older_refused(db: Any, case: Case) -> None:
    from graph.copy import main as copy_main
    from graph.history import main as history_main

    assert run_cli(["--thread", case.thread, "--db", db.db])["status"] == "done"
    assert history_main(["--thread", case.thread, "--db", db.db]) == 4
    target = Path.cwd() / "target.sqlite"
    assert copy_main(["--from", db.db, "--to", str(target), "--thread", case.thread]) == 4
    assert copy_main(["--from", db.db, "--to", str(target), "--thread", case.thread]) == 4
    if target.exists():
        with sqlite3.connect(target) as conn:
            assert conn.execute("SELECT count(*) FROM attempt_ledger").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0
        conn.close()


def test_corpus_has_at_least_150_cases_over_both_backends() -> None:
    assert len(CASES["sqlite"]) + len(CASES["postgres"]) >= 150
