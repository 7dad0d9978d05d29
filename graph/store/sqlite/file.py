"""What a SQLite checkpoint file must be before anything opens it, checked without writing.

A bounded check on every open (`check_database`: header, our tables, truncation), the
schema check that decides whether DDL must run (`schema_needs_setup`, which also
refuses a dropped trigger of ours), and SQLite's full `integrity_check` for
`graph.verify`. The tables and triggers checked are those of `graph.store.sql.schema`.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from graph.errors import ErrorCode, RefusedError
from graph.store.sql.schema import SQLITE_LANGGRAPH_COLUMN, SQLITE_REQUIRED_TABLES, TRIGGERS, sqlite_objects
from graph.store.sqlite.access import read_only_uri

__all__ = ["check_database", "integrity_check", "schema_needs_setup"]

SQLITE_HEADER = b"SQLite format 3\x00"


def check_database(path: Path) -> None:
    """Refuses a file that is not an intact checkpoint database, without writing to it.

    A bounded check that keeps start-up fast however large the file: the SQLite
    header, our tables in the schema, and the page count against the file size
    (truncation). Deeper damage is caught by SQLite when a page is read, and by the
    checksums when a value is read; `python -m graph.verify` runs SQLite's full
    `integrity_check`.

    Raises:
        RefusedError: `no_such_file` when missing; `damaged` otherwise.
    """

    def refuse(why: str) -> RefusedError:
        return RefusedError(f"{path}: {why}", error_code=ErrorCode.DAMAGED)

    if not path.exists():
        raise RefusedError(f"no such checkpoint file: {path}", error_code=ErrorCode.NO_SUCH_FILE)
    if not path.is_file():
        raise refuse("is not a regular file")
    with open(path, "rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_HEADER):
        raise refuse("is not a SQLite database" + (" (empty file)" if not header else ""))
    for attempt in range(_TORN_READS):
        try:
            tables, pages, page_size = _read_schema(path)
            break
        except sqlite3.DatabaseError as exc:
            if attempt + 1 == _TORN_READS:
                raise refuse(f"is not a readable SQLite database ({exc})") from None
            time.sleep(_TORN_READ_PAUSE_S)
    if not SQLITE_REQUIRED_TABLES <= tables:
        raise refuse(f"is a SQLite database but not a mandapi-resume checkpoint database "
                     f"(tables: {', '.join(sorted(tables)) or 'none'})")
    wal = path.with_name(path.name + "-wal")
    if (not wal.exists() or wal.stat().st_size == 0) and path.stat().st_size < pages * page_size:
        raise refuse(f"is truncated ({path.stat().st_size} bytes, {pages} pages of {page_size})")


_TORN_READS = 3
_TORN_READ_PAUSE_S = 0.05
"""The bounded check reads the file as it stands (`immutable=1`, neither locks nor WAL),
so a WAL checkpoint another process is copying into it (after each claim, or freeing the
pages of trimmed checkpoints) can show it torn for a moment: a file is refused only when
it fails `_TORN_READS` reads, `_TORN_READ_PAUSE_S` seconds apart. Real damage persists."""


def _read_schema(path: Path) -> tuple[set[str], int, int]:
    """Table names, page count and page size, read from the file as it stands."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return (tables, conn.execute("PRAGMA page_count").fetchone()[0],
                conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def integrity_check(path: Path) -> list[str]:
    """SQLite's full `PRAGMA integrity_check`, read-only (slow on large files).

    Returns:
        SQLite's lines naming problems; empty when the file is intact.
    """
    conn = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        rows = [str(exc)]
    finally:
        conn.close()
    return [row for row in rows if row != "ok"]


def schema_needs_setup(path: Path) -> bool:
    """Whether opening `path` for writing must run DDL (an older schema gains tables).

    Read before any DDL, so a refused file keeps its bytes.

    Raises:
        RefusedError: `damaged` when a trigger of ours is missing beside its table
            (dropped: the ledger's promises no longer hold, and re-creating it would
            hide that).
    """
    table, column = SQLITE_LANGGRAPH_COLUMN
    conn = sqlite3.connect(read_only_uri(path), uri=True)  # creates no -wal/-shm it may not
    try:
        found = {(kind, name) for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master")}
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    except sqlite3.DatabaseError as exc:
        raise RefusedError(f"{path}: is not a readable SQLite database ({exc})",
                           error_code=ErrorCode.DAMAGED) from None
    finally:
        conn.close()
    for trigger in TRIGGERS:
        if (trigger.guarded and ("table", trigger.table) in found
                and ("trigger", trigger.name) not in found):
            raise RefusedError(f"{path}: trigger {trigger.name} of table {trigger.table} was "
                               "dropped; the database was changed outside this program",
                               error_code=ErrorCode.DAMAGED)
    return not sqlite_objects() <= found or column not in columns
