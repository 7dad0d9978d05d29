"""The attempt ledger on SQLite: a claim reaches the database file before its request leaves.

In WAL mode a commit lives in the `-wal` file until a checkpoint copies it into the
database file. A `-wal` that is deleted, truncated or damaged after a crash makes
SQLite recover an older state, which would bring back a claimed attempt whose request
the server already received. So after each claim commits, a `TRUNCATE` checkpoint
copies every committed change into the database file, syncs it (`synchronous=FULL`)
and empties the `-wal`: whatever later happens to the `-wal` holds only newer changes.
The count needs no checkpoint: an attempt counted but not claimed sends nothing, and
the claim's checkpoint carries the count with it.

The claim's own commit skips its sync of the `-wal` (`synchronous=NORMAL` for that one
statement): the checkpoint right after it syncs the `-wal` before copying it and the
database file after, and nothing is sent before both are done, so a crash in between
loses only a claim whose request never left (as a crash before the claim). One sync
per step fewer; every other commit keeps `synchronous=FULL`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from graph.errors import NotDurableError
from graph.store.sql.conn import SqliteSql
from graph.store.sql.ledger import SqlLedger

__all__ = ["SqliteLedger"]


class SqliteLedger(SqlLedger):
    """`SqlLedger` whose successful claims are checkpointed into the database file."""

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """Claims like `SqlLedger.claim`, then makes the claim durable in the database file.

        Raises:
            NotDurableError: See `make_durable`. The attempt stays claimed, so it is
                spent and its request must not be sent (exit 6, `wal_busy`).
        """
        assert isinstance(self._db, SqliteSql)
        with self._db.lock, self._checkpoint_syncs(self._db):
            if not super().claim(thread_id, attempt, charge):
                return False
            self.make_durable(f"thread {thread_id!r}: attempt {attempt} is counted, but")
        return True

    @staticmethod
    @contextmanager
    def _checkpoint_syncs(db: SqliteSql) -> Iterator[None]:
        """`synchronous=NORMAL` for a block that ends with `make_durable`, else as it is.

        Only outside any transaction (SQLite refuses to change it inside one, and what a
        transaction kept back would then commit unsynced): with anything kept back, the
        block runs with `FULL`. Hold `db.lock` for the block, so no other statement of
        this connection commits meanwhile; the block leaves no transaction open (the
        claim autocommits, `make_durable` commits), and `FULL` is set again whatever
        happens.
        """
        if db.holds or db.conn.in_transaction:
            yield
            return
        db.conn.execute("PRAGMA synchronous = NORMAL")
        try:
            yield
        finally:
            db.conn.execute("PRAGMA synchronous = FULL")

    def make_durable(self, what: str) -> None:
        """Copies every committed change from the `-wal` into the database file (synced).

        Called after each record that guards an effect outside the database: a claim
        (before its request leaves) and a write's plan (before the file is written,
        `graph.step.approvals`), so a lost `-wal` can never bring back a state in which
        that effect looks undone.

        Args:
            what: The start of the refusal message, naming what is not durable yet.

        Another process's checkpoint holds SQLite's checkpoint lock, and SQLite then
        returns busy at once without calling the busy handler ("Even if there is a
        busy-handler configured, it will not be invoked in this case":
        `sqlite3_wal_checkpoint_v2`); so that case is waited out here, up to the
        connection's busy timeout, polling as SQLite's own busy handler does. Waiting
        for readers is left to the busy handler.

        Raises:
            NotDurableError: The checkpoint could not finish within the busy timeout
                (another process kept reading an older snapshot, or kept checkpointing);
                the effect must not happen (exit 6, `wal_busy`).
        """
        assert isinstance(self._db, SqliteSql)
        deadline: float | None = None
        pause = 0.001
        while True:
            with self._db.lock:  # no background save may open a transaction in between
                self._db.commit()  # what was kept back for a later commit goes with it
                busy, in_log, copied = self._run("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if busy and in_log == -1 and deadline is None:  # checkpoint lock held
                    timeout_ms = self._run("PRAGMA busy_timeout").fetchone()[0]
                    deadline = time.monotonic() + timeout_ms / 1000
            if not (busy and in_log == -1) or deadline is None or time.monotonic() >= deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        if busy or in_log != copied:
            raise NotDurableError(
                f"{what} the database could not copy it from its -wal into the main file "
                "(another process kept reading or checkpointing for the whole busy timeout); "
                "nothing was sent or written; run again")
