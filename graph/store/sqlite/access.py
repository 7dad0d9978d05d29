"""What the current user may do with a SQLite checkpoint file, checked before opening it.

Writing (a step, prune, copy) needs the file and its folder writable: SQLite's WAL
keeps `-wal` and `-shm` files beside the database. Reading (history, verify) needs only
read access: when this user cannot write the file, nothing is created beside it, and
SQLite reads the file as it is (`immutable=1`) if no write-ahead log holds newer
commits, or through the existing `-wal` and `-shm` files otherwise.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from graph.errors import ErrorCode, UsageError

__all__ = ["check_sqlite_access", "read_only_uri"]


def _denied(path: Path, what: str) -> UsageError:
    return UsageError(f"permission denied: {path}: this user may not {what}",
                      error_code=ErrorCode.PERMISSION_DENIED)


def check_sqlite_access(db: str, *, read_only: bool, name: str = "--db") -> None:
    """Refuses a `--db` path that is a folder, unreachable, or lacks the needed permission.

    A missing file passes (the caller reports `no_such_file` or creates it). `name` is
    how a refusal names the setting: `--db`, or `db` for a caller of `graph.api`.

    Raises:
        UsageError: `usage` for a folder or an impossible path; `permission_denied`
            naming the file or folder and the missing permission (exit 2).
    """
    try:
        path = Path(db)
        os.stat(path)
    except ValueError as exc:  # an embedded NUL byte
        raise UsageError(f"{name} {db[:80]!r} is not a usable path: {exc}") from None
    except PermissionError:
        raise _denied(Path(db).parent, "look inside this folder (search permission)") from None
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            if not read_only and path.parent.is_dir() and not os.access(path.parent, os.W_OK):
                raise _denied(path.parent, "create a database file in this folder") from None
            return
        raise UsageError(f"{name} {db[:80]!r} is not a usable path: {exc.strerror}") from None
    if os.path.isdir(path):
        raise UsageError(f"{name} {path} is a folder, not a checkpoint database file")
    if not os.path.isfile(path):  # a FIFO would block open() forever; devices are no files
        raise UsageError(f"{name} {path} is not a regular file (a FIFO, socket or device), not "
                         "a checkpoint database file")
    if not os.access(path, os.R_OK):
        raise _denied(path, "read this file")
    try:
        with open(path, "rb") as fh:
            fh.read(100)
    except PermissionError:
        raise _denied(path, "read this file") from None
    except OSError as exc:  # an I/O error, a special file
        raise UsageError(f"{name} {path} cannot be read: {exc.strerror or exc}") from None
    if read_only:
        if not writable(path) and _wal_size(path) and not _sidecar(path, "-shm").exists():
            raise _denied(path.parent, "create the -shm file needed to read this database's "
                          "write-ahead log (ask its owner to run a step or open it once)")
        return
    if not os.access(path, os.W_OK):
        raise _denied(path, "write this file (only graph.history and graph.verify need no "
                      "write access)")
    if not writable(path):
        raise _denied(path.parent, "create the -wal and -shm files SQLite needs beside the "
                      "database in this folder")


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _wal_size(path: Path) -> int:
    try:
        return _sidecar(path, "-wal").stat().st_size
    except OSError:
        return 0


def writable(path: Path) -> bool:
    """True when this user may write the database and everything SQLite keeps beside it."""
    if not os.access(path, os.W_OK):
        return False
    if os.access(path.parent, os.W_OK):
        return True
    sidecars = [_sidecar(path, s) for s in ("-wal", "-shm")]
    return all(p.exists() and os.access(p, os.W_OK) for p in sidecars)


def read_only_uri(path: Path) -> str:
    """The SQLite URI that reads `path` without writing anything this user may not write.

    `mode=ro` when the user may write the database's files (SQLite then shares the
    `-shm` index with writers). Otherwise `immutable=1` when no write-ahead log holds
    commits (the file alone is the whole database), else `mode=ro` through the existing
    `-wal` and `-shm` files (SQLite reads them without writing).
    """
    uri = f"{path.resolve().as_uri()}?mode=ro"
    if not writable(path) and not _wal_size(path):
        uri += "&immutable=1"
    return uri
