"""The file checks of a poll miss, handed to the open that follows it: checked once.

`graph.run` asks the quick poll (`graph.store.poll`) first; on a miss it opens the
store (`graph.store.open_store`). Both make the same checks of the SQLite file, in the
same order: access (`graph.store.sqlite.access`), the header and schema
(`graph.store.sqlite.file`), one name (`graph.store.sqlite.names`). The poll hands
what it found to the open that follows, which takes it instead of checking again, but
only for the same file in the same state: the file's identity (device, inode, mode,
owner, links, size, modification and change times) must be what it was when the poll
checked it. Taken once: a hand-off serves one open, and an open that finds none, or
one for a file that changed since, checks everything itself.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

__all__ = ["Checked", "hand_on", "take"]


@dataclass(frozen=True)
class Checked:
    """What the poll found of a file whose checks all passed.

    Attributes:
        needs_setup: `graph.store.sqlite.file.schema_needs_setup`'s answer.
    """

    needs_setup: bool


_HANDED: dict[tuple[str, bool], tuple[tuple[int, ...], Checked]] = {}
_LOCK = threading.Lock()


def _identity(db: str) -> tuple[int, ...] | None:
    """The file's identity as `os.stat` gives it, or None when it cannot be read."""
    try:
        st = os.stat(db)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_nlink, st.st_size,
            st.st_mtime_ns, st.st_ctime_ns)


def _key(db: str, read_only: bool) -> tuple[str, bool]:
    return os.path.realpath(db), read_only


def hand_on(db: str, *, read_only: bool, checked: Checked) -> None:
    """Records that every check of file `db` passed just now (the poll, after its checks)."""
    identity = _identity(db)
    if identity is not None:
        with _LOCK:
            _HANDED[_key(db, read_only)] = (identity, checked)


def take(db: str, *, read_only: bool) -> Checked | None:
    """The hand-off for file `db` if its identity is unchanged since; None: check it all.

    Removes the hand-off either way: it serves one open.
    """
    with _LOCK:
        handed = _HANDED.pop(_key(db, read_only), None)
    if handed is None or handed[0] != _identity(db):
        return None
    return handed[1]
