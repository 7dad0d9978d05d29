"""Per-checkpoint digests kept by this project, beside whatever rows a backend uses.

LangGraph stores a checkpoint in several rows (on PostgreSQL: the row's JSON, one
blob per channel version, one row per pending write), and the per-value checksum of
`graph.store.serde` cannot tell that a blob was deleted, repointed to another version, or
replaced by a value written inline. So when a checkpoint is written, a SHA-256 of
its canonical loaded form (id, channel versions, versions seen, every channel value
as serialized) is recorded in `checkpoint_digests`; each pending write gets one too
(task, channel, serialized value). Every load recomputes them from what LangGraph
actually loaded and compares. The digest is written before the rows it covers, in
the same transaction on SQLite (`graph.store.saver.sqlite_saver`); on PostgreSQL a
process killed in between leaves an unused digest, never an undigested checkpoint.
A slot keeps every digest recorded for it, so a rerun with other values is not
refused. A deleted pending write is therefore not detected (it looks like a kill
before the write; LangGraph runs the task again).

Backend-neutral: the same table and statements on SQLite and PostgreSQL (and any
other backend whose saver goes through `graph.store.saver`).

Checkpoints written before this table existed (ids older than the marker row the
table is created with) have no digest and are checked by shape and checksum only.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.base import SerializerProtocol

from graph.store.sql.conn import Sql, SqlTable
from graph.store.sql.schema import CHECKPOINTS, DIGEST_MARKER_KEY, DIGESTS

__all__ = ["SqlDigests", "checkpoint_digest", "new_marker", "write_digest"]


def new_marker() -> str:
    """A checkpoint id (LangGraph's time-ordered uuid6) for the moment of creation."""
    return str(uuid6())


def _sha(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def _stored_form(serde: SerializerProtocol, value: Any) -> tuple[str, bytes]:
    """`serde.dumps_typed(value)`, without its read-back check where the serde has one.

    A digest covers a value that is stored through `dumps_typed` as well (which checks
    it) or that was just loaded, so checking it again here would only cost time.
    """
    checksummed = getattr(serde, "checksummed", None)
    return checksummed(value) if checksummed is not None else serde.dumps_typed(value)


def checkpoint_digest(serde: SerializerProtocol, checkpoint: Mapping[str, Any]) -> str:
    """The digest of a checkpoint as LangGraph hands it to `put` or loads it back."""
    head = json.dumps({"id": checkpoint["id"], "channel_versions": checkpoint["channel_versions"],
                       "versions_seen": checkpoint["versions_seen"]},
                      sort_keys=True, separators=(",", ":")).encode()
    parts = [head]
    for name in sorted(checkpoint["channel_values"]):
        type_, data = _stored_form(serde, checkpoint["channel_values"][name])
        parts += [name.encode(), type_.encode(), bytes(data)]
    return _sha(*parts)


def write_digest(serde: SerializerProtocol, task_id: str, channel: str, value: Any) -> str:
    """The digest of one pending write."""
    type_, data = _stored_form(serde, value)
    return _sha(task_id.encode(), channel.encode(), type_.encode(), bytes(data))


class SqlDigests(SqlTable):
    """Reads and writes `checkpoint_digests` (see `graph.store.sql.conn.SqlTable`).

    LangGraph writes from several threads; statements here are serialized (each with
    its rows fetched before the next starts). On SQLite the table shares the saver's
    connection and its lock, so a digest commits with the rows it covers; on
    PostgreSQL it runs on our control connection and commits at once.
    """

    def __init__(self, db: Sql) -> None:
        super().__init__(db)
        self._lock = threading.Lock()

    def record(self, key: tuple[str, str, str, str, int], digest: str) -> None:
        """Records a digest for a checkpoint or write slot (several may be recorded).

        A slot keeps every digest recorded for it: a process killed after recording
        but before LangGraph wrote the row leaves one that a rerun (with other values)
        must not make wrong. A loaded value must match one of its slot's digests.
        """
        with self._lock:
            self._run(f"INSERT INTO {DIGESTS} VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                      (*key, digest))

    def marker(self) -> str | None:
        """The marker id; None when the table is missing (a database from before it).

        Raises:
            ValueError: The table exists but its marker row was removed or altered.
        """
        with self._lock:
            rows = self._rows_if_table(DIGESTS, f"SELECT digest FROM {DIGESTS} WHERE "
                                       "thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
                                       "AND task_id = ? AND idx = ?", DIGEST_MARKER_KEY)
        if rows is None:
            return None
        if len(rows) != 1 or not isinstance(rows[0][0], str) or len(rows[0][0]) != 36:
            raise ValueError("the checkpoint digest table lost its marker row")
        return str(rows[0][0])

    def of_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str
                      ) -> dict[str, set[str]]:
        """Every digest recorded for one checkpoint, by task id (the checkpoint's own: '')."""
        with self._lock:
            rows = self._rows_if_table(DIGESTS, f"SELECT task_id, digest FROM {DIGESTS} "
                                       "WHERE thread_id = ? AND checkpoint_ns = ? "
                                       "AND checkpoint_id = ?", (thread_id, ns, checkpoint_id))
        found: dict[str, set[str]] = {}
        for task, digest in rows or []:
            found.setdefault(task, set()).add(digest)
        return found

    def checkpoint_exists(self, thread_id: str, ns: str, checkpoint_id: str) -> bool:
        """Whether LangGraph's checkpoint row is there now, read on this table's connection.

        A reader whose snapshot still shows a checkpoint that a writer has since trimmed
        (`graph.store.sql.window` deletes its rows and digests in one transaction) finds
        its digests gone; this tells that apart from a digest deleted by hand.
        """
        with self._lock:
            rows = self._run(f"SELECT 1 FROM {CHECKPOINTS} WHERE thread_id = ? AND "
                             "checkpoint_ns = ? AND checkpoint_id = ?",
                             (thread_id, ns, checkpoint_id)).fetchall()
        return bool(rows)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes a thread's digests (with the thread)."""
        with self._lock:
            self._run(f"DELETE FROM {DIGESTS} WHERE thread_id = ?", (thread_id,))
