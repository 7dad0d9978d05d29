"""Summaries of finished threads: what `graph.run` answers for them, readable without LangGraph.

A thread that is done, exhausted or cancelled never changes again, yet a scheduler may
ask about it every minute. Its answer's state fields (status, attempts, model, answer,
usage, ...) are stored here once the full path has read and checked them, with a
fingerprint: a SHA-256 over the summary itself and the raw rows the full path reads to
give that answer (the thread's ledger row, its latest checkpoint with its pending
writes and digests, the digest marker, its decisions on write calls, and the highest
attempt in its attempt log). `graph.store.poll` answers from a summary only while that
fingerprint still matches what is stored, so any change to those rows since (a damaged
or edited checkpoint, ledger row or summary, a newer checkpoint, a thread started anew)
sends the invocation the full way, which checks everything. Damage that the full path
does not read for a finished thread either (an older checkpoint, the rows of the
attempt log) is answered alike by both; `graph.verify` lists it. A summary without a
field of `_FIELDS` (written before `partial_answer`) is not used either: the full path
answers and stores it anew.

The fingerprint reads LangGraph's tables as stored, on SQLite and on PostgreSQL (whose
rows come as psycopg returns them: `jsonb` as parsed JSON, `bytea` as bytes). Imports
stay light (no LangGraph, no psycopg): `graph.store.poll` uses this module before deciding.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from graph.outcome import Figures, Outcome
from graph.store.rows import is_int, is_text, is_text_or_none
from graph.store.sql.conn import PostgresSql, Sql, SqlTable
from graph.store.sql.schema import SUMMARIES

__all__ = ["SqlSummaries"]

FINAL = ("done", "exhausted", "cancelled")
"""The statuses of a finished thread (`nodes.state.FINAL_STATUSES`)."""

_LATEST = ("(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ? "
           "AND checkpoint_ns = '')")
_LEDGER = ("SELECT * FROM attempt_ledger WHERE thread_id = ?", 1)
_CHECKPOINT = (f"SELECT * FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
               f"AND checkpoint_id = {_LATEST}", 2)
_OURS = (
    (f"SELECT * FROM checkpoint_digests WHERE thread_id = '' OR (thread_id = ? "
     f"AND checkpoint_ns = '' AND checkpoint_id = {_LATEST}) "
     "ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx, digest", 2),
    ("SELECT * FROM write_approvals WHERE thread_id = ? ORDER BY attempt, tool_call_id", 1),
    ("SELECT max(attempt) FROM attempt_log WHERE thread_id = ? AND kind = 'reason'", 1),
)
_SQLITE = (
    _LEDGER, _CHECKPOINT,
    (f"SELECT * FROM writes WHERE thread_id = ? AND checkpoint_ns = '' "
     f"AND checkpoint_id = {_LATEST} ORDER BY task_id, idx", 2),
    *_OURS,
)
_POSTGRES = (
    _LEDGER, _CHECKPOINT,
    ("SELECT b.* FROM checkpoints c CROSS JOIN jsonb_each_text(c.checkpoint -> "
     "'channel_versions') v JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND "
     "b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.key AND b.version = v.value "
     f"WHERE c.thread_id = ? AND c.checkpoint_ns = '' AND c.checkpoint_id = {_LATEST} "
     "ORDER BY b.channel", 2),
    (f"SELECT * FROM checkpoint_writes WHERE thread_id = ? AND checkpoint_ns = '' "
     f"AND checkpoint_id = {_LATEST} ORDER BY task_id, idx", 2),
    *_OURS,
    ("SELECT max(v) FROM checkpoint_migrations", 0),
)
"""The rows a summary stands for, per backend: each query with how many times it takes
the thread id. LangGraph's tables differ: on SQLite a checkpoint is one row with its
pending writes beside it; on PostgreSQL its row holds the channel versions of its
values, whose blobs are rows of their own, and the version of LangGraph's schema
(`checkpoint_migrations`) is the one the full path found set up."""


def _is_usage(value: Any) -> bool:
    return isinstance(value, dict) and all(is_text(k) and is_int(v) for k, v in value.items())


_FIELDS = {
    "status": lambda v: v in FINAL, "attempts": is_int, "max_attempts": lambda v: is_int(v, 1),
    "model": is_text, "answer": is_text_or_none, "partial_answer": is_text_or_none,
    "stop_reason": is_text_or_none,
    "usage": _is_usage, "max_tokens": lambda v: v is None or is_int(v),
    "next": lambda v: isinstance(v, list) and all(is_text(n) for n in v),
    "figures": lambda v: v == _FIGURES,
}
"""The summary's fields (those `Outcome.from_state` reads) and their exact types."""
_FIGURES = "ledger_and_log"
"""Where the summary's `attempts` and `usage` come from (`graph.outcome.Figures`): a summary
written before (from the checkpoint's own figures, which a fork lowers) lacks the field,
so it is not used; the full path answers and stores it anew."""


def _summary_text(outcome: Outcome) -> str:
    """The stored form of a finished thread's outcome: its state fields as JSON (ASCII)."""
    return json.dumps({"status": outcome.status, "attempts": outcome.attempts,
                       "max_attempts": outcome.max_attempts, "model": outcome.model,
                       "answer": outcome.answer, "partial_answer": outcome.partial_answer,
                       "stop_reason": outcome.stop_reason,
                       "usage": outcome.usage or {}, "max_tokens": outcome.max_tokens,
                       "next": list(outcome.next_nodes), "figures": _FIGURES}, sort_keys=True)


def _fields(text: str) -> dict[str, Any] | None:
    """The summary's fields, or None unless they are exactly `_FIELDS` with their types."""
    try:
        fields = json.loads(text)
    except ValueError:
        return None
    if not isinstance(fields, dict) or set(fields) != set(_FIELDS):
        return None
    return fields if all(ok(fields[key]) for key, ok in _FIELDS.items()) else None


class SqlSummaries(SqlTable):
    """Reads and writes `thread_summaries` (see `graph.store.sql.conn.SqlTable`)."""

    def __init__(self, db: Sql, fence: Callable[[str], str] | None = None) -> None:
        super().__init__(db, fence)
        self._fingerprinted = _POSTGRES if isinstance(db, PostgresSql) else _SQLITE

    def fingerprint(self, thread_id: str, text: str) -> str:
        """SHA-256 of summary `text` and the rows it stands for, as stored (types included)."""
        rows = [self._run(sql, (thread_id,) * uses).fetchall()
                for sql, uses in self._fingerprinted]
        return hashlib.sha256(repr((text, rows)).encode()).hexdigest()

    def _stored(self, thread_id: str) -> tuple[Any, Any] | None:
        found = self._rows_if_table(SUMMARIES, f"SELECT outcome, fingerprint FROM {SUMMARIES} "
                                    "WHERE thread_id = ?", (thread_id,))
        return tuple(found[0]) if found else None

    def keep(self, thread_id: str, outcome: Outcome) -> None:
        """Stores the summary of `outcome`, read from the thread's checked latest checkpoint.

        Writes only when the stored summary is missing or differs. Call it holding the
        thread's writer lock, with an outcome of a finished thread (`Outcome.from_state`).
        """
        self._fence(thread_id)
        text = _summary_text(outcome)
        row = (text, self.fingerprint(thread_id, text))
        if self._stored(thread_id) != row:
            self._run(f"INSERT INTO {SUMMARIES} VALUES (?, ?, ?) ON CONFLICT (thread_id) DO "
                      "UPDATE SET outcome = excluded.outcome, fingerprint = excluded.fingerprint",
                      (thread_id, *row))

    def answer(self, thread_id: str) -> Outcome | None:
        """The finished thread's outcome from its summary; None unless everything agrees.

        None when there is no summary, when it is damaged (a type, its JSON), when its
        fingerprint no longer matches the rows, or when the ledger's counts do not
        agree with it. Read it in one read transaction.
        """
        stored = self._stored(thread_id)
        if stored is None or not all(is_text(value) for value in stored):
            return None
        text, fingerprint = stored
        fields = _fields(text)
        if fields is None or fingerprint != self.fingerprint(thread_id, text):
            return None
        try:  # lone surrogates (JSON escapes) cannot be printed as UTF-8: the full path decides
            json.dumps(fields, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return None
        if not self._ledger_agrees(thread_id, fields):
            return None
        progress = {key: fields[key] for key in ("status", "attempts", "answer", "partial_answer",
                                                 "stop_reason", "usage")}
        thread = {key: fields[key] for key in ("max_attempts", "model", "max_tokens")}
        return Outcome.from_state(thread_id, {"progress": progress, "thread": thread},
                                  tuple(fields["next"]), Figures(fields["attempts"], fields["usage"]))

    def _ledger_agrees(self, thread_id: str, fields: dict[str, Any]) -> bool:
        """The ledger's counts against the summary's, as `graph.store.checks.check_ledger`."""
        row = self._run("SELECT attempts, claimed, max_attempts FROM attempt_ledger "
                        "WHERE thread_id = ?", (thread_id,)).fetchone()
        if row is None or not all(is_int(value) for value in row):
            return False
        attempts, claimed, max_attempts = row
        return (claimed <= attempts <= max_attempts == fields["max_attempts"]
                and fields["attempts"] <= attempts and claimed >= fields["attempts"] - 1)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's summary (with the thread)."""
        self._fence(thread_id)
        self._run(f"DELETE FROM {SUMMARIES} WHERE thread_id = ?", (thread_id,))
