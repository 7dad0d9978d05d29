"""One SQLite database, one name: refuses a database file reachable through a second name.

SQLite keeps a database's write-ahead log and its lock/index file (`-wal`, `-shm`)
beside the database *name* it was opened with. Two names for one file (a hard link,
a bind mount of the file) give it two logs and two sets of WAL locks: processes on
different names do not see each other's commits, lose them, and corrupt the file.
Symlinks and `/proc/self/fd/N` are not second names (SQLite and `Path.resolve` follow
them to the real name), nor is a bind mount of the folder (the `-wal` beside it is
the same file). What is refused, before anything is counted (exit 2, `db_second_name`):

- a file with more than one hard link (its own name aside, only the temporary name of
  an atomic creation, `.NAME.PID.creating`, is allowed: nobody opens a database by it);
- a file that is bind-mounted (as a file) anywhere this process can see;
- a file that a live process has open under another WAL name: every open store holds a
  shared lock on one byte of the file at a *name slot* derived from its WAL name (the
  folder's device and inode, and the file name), and refuses when it finds any lock
  in the name-slot region outside its own slot. This catches what the first two cannot
  see (another mount namespace, for example) while both names are in use.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
from pathlib import Path

from graph.errors import SecondNameError

__all__ = ["NameSlot", "check_one_name"]

_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", None)

SLOT_BASE = 1 << 62
"""First byte of the name-slot region: far past SQLite's lock bytes (1 GiB) and the
per-thread locks of `graph.store.sqlite.locks` (1 TiB to 1 TiB + 2**56)."""
SLOT_SPAN = 1 << 40
"""Bytes in the name-slot region."""

_HOW_TO_FIX = ("SQLite keeps its write-ahead log per file name, so two names for one "
               "database lose commits and with them counted attempts (the budget). Use one "
               "path for it everywhere")


def _refuse(path: Path, why: str, fix: str) -> SecondNameError:
    return SecondNameError(f"{path}: {why}. {_HOW_TO_FIX}; {fix}.")


def _creating_links(path: Path, inode: int) -> int:
    """How many temporary creation names (`.NAME.PID.creating`) are links to `inode`."""
    count = 0
    for other in path.parent.glob(f".{path.name}.*.creating"):
        try:
            count += other.lstat().st_ino == inode
        except FileNotFoundError:
            pass  # its creator removed it just now
    return count


def _check_links(path: Path) -> None:
    for _ in range(100):  # a creator may be removing its temporary name right now
        first = path.stat()
        temporary = _creating_links(path, first.st_ino)
        if path.stat().st_nlink == first.st_nlink:
            break
    extra = first.st_nlink - 1 - temporary
    if extra > 0:
        raise _refuse(path, f"the database file has {extra} other hard link(s)",
                      f"remove the extra link (`find / -xdev -samefile {path}` lists them)")


def _unescape(field: str) -> str:
    """A path field of `/proc/self/mountinfo` (spaces and such are octal escapes)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="surrogateescape")


def _check_file_mounts(path: Path) -> None:
    st = path.stat()
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return  # not Linux: the name slots still catch a second name in use
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or fields[2] != device:
            continue  # only mounts of this file's filesystem can show it
        mount_point = Path(_unescape(fields[4]))
        try:
            other = mount_point.stat()
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino) and mount_point.is_file():
            raise _refuse(path, f"the database file is bind-mounted at {mount_point}",
                          "unmount it, or use the mounted path only where the other is not seen")


def check_one_name(path: Path) -> None:
    """Refuses a database file that has a second name this process can see.

    Args:
        path: The database file, resolved (symlinks followed).

    Raises:
        SecondNameError: A hard link or a file bind mount (exit 2, `db_second_name`).
    """
    _check_links(path)
    _check_file_mounts(path)


def _slot(path: Path) -> int:
    folder = path.parent.stat()
    key = f"{folder.st_dev}:{folder.st_ino}/{path.name}".encode("utf-8", "surrogateescape")
    return SLOT_BASE + int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % SLOT_SPAN


def _flock(lock_type: int, start: int, length: int) -> bytes:
    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks).
    return struct.pack("hhqqi", lock_type, os.SEEK_SET, start, length, 0)


def _other_lock_in(fd: int, start: int, length: int) -> bool:
    if length <= 0:
        return False
    assert _OFD_GETLK is not None
    answer = fcntl.fcntl(fd, _OFD_GETLK, _flock(fcntl.F_WRLCK, start, length))
    return struct.unpack("hhqqi", answer)[0] != fcntl.F_UNLCK


class NameSlot:
    """Holds this store's name slot on the database file; refuses if another name is in use.

    The slot lock is shared, so any number of processes may use the same name; it is an
    open-file-description lock, released by the kernel when its process dies. Take it
    before SQLite opens the file, and close it after SQLite's connections (see
    `graph.store.sqlite.locks`). Without OFD locks (not Linux) it does nothing.

    Args:
        path: The database file, resolved.

    Raises:
        SecondNameError: A live process holds the file under another WAL name.
    """

    def __init__(self, path: Path) -> None:
        self._fd: int | None = None
        if _OFD_SETLK is None or _OFD_GETLK is None:  # pragma: no cover - non-Linux
            return
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            slot = _slot(path)
            fcntl.fcntl(self._fd, _OFD_SETLK, _flock(fcntl.F_RDLCK, slot, 1))
            end = SLOT_BASE + SLOT_SPAN
            if (_other_lock_in(self._fd, SLOT_BASE, slot - SLOT_BASE)
                    or _other_lock_in(self._fd, slot + 1, end - slot - 1)):
                raise _refuse(path, "another process has this database open under another "
                              "name (a hard link, a bind mount, another mount namespace)",
                              "stop using the other name")
        except OSError as exc:
            self.close()
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return  # a filesystem without byte-range locks: nothing to check with
            raise
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Releases the slot (closes its handle)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
