"""One writer per thread on one machine: a byte-range lock per thread on the database file.

Each thread id maps to one byte of the SQLite database file itself, far beyond the bytes
SQLite locks (its lock bytes sit at 1 GiB; ours start at 1 TiB, offset from SHA-256 of
the id, so threads never share a byte in practice; `graph.store.sqlite.names` uses the bytes from
2**62 on). Locking the database file, not a file beside it, means every path that
reaches the same file meets the same locks, and there is no lock file to delete
(second names are refused anyway: SQLite's own locking would be split, see
`graph.store.sqlite.names`). On Linux the lock is an open-file-description lock (`F_OFD_SETLK`): it
conflicts even between two handles in one process and is released by the kernel when
its process dies, `kill -9` included, so a dead holder never blocks a thread (INVARIANTS
I8). The handle is closed only after
SQLite's own connections (closing any handle drops a process's POSIX locks on a file).
Elsewhere it falls back to POSIX `lockf`, which does not conflict within one process.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from graph.errors import BusyError

__all__ = ["ThreadLocks"]

_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", None)


_BASE = 1 << 40
"""First byte used for thread locks: far past SQLite's lock bytes (1 GiB + 512)."""


def _offset(thread_id: str) -> int:
    return _BASE + int.from_bytes(hashlib.sha256(thread_id.encode()).digest()[:7], "big")


class ThreadLocks:
    """Per-thread exclusive locks over byte ranges of one file.

    Args:
        path: The database file (it must exist; nothing is written to it).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self._held: set[str] = set()

    def _set(self, lock_type: int, thread_id: str) -> None:
        offset = _offset(thread_id)
        if _OFD_SETLK is not None:
            # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks).
            fcntl.fcntl(self._fd, _OFD_SETLK, struct.pack("hhqqi", lock_type, 0, offset, 1, 0))
        else:  # pragma: no cover - non-Linux fallback
            cmd = fcntl.LOCK_UN if lock_type == fcntl.F_UNLCK else fcntl.LOCK_EX | fcntl.LOCK_NB
            fcntl.lockf(self._fd, cmd, 1, offset)

    @contextmanager
    def hold(self, thread_id: str) -> Iterator[None]:
        """Holds the thread's lock for the block; fails at once if someone else has it.

        Raises:
            BusyError: Another process (or handle) holds the lock (exit 5).
        """
        try:
            self._set(fcntl.F_WRLCK, thread_id)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise BusyError.for_thread(thread_id) from None
            raise
        self._held.add(thread_id)
        try:
            yield
        finally:
            self._held.discard(thread_id)
            self._set(fcntl.F_UNLCK, thread_id)

    def fence(self, thread_id: str) -> str:
        """The fencing hook (`graph.store.base.WriterLocks.fence`): '' unless refused.

        Raises:
            BusyError: Another process (or handle) holds the thread's lock, this one not.
        """
        if thread_id not in self._held and self.held_elsewhere(thread_id):
            raise BusyError.for_thread(thread_id).at(location=str(self.path))
        return ""

    def held_elsewhere(self, thread_id: str) -> bool:
        """True when another process (or handle) holds the thread's lock; nothing is taken.

        For readers that must report "busy" as a writer would (`graph.store.poll`) without
        ever making a writer busy themselves.
        """
        if _OFD_GETLK is None:  # pragma: no cover - non-Linux fallback
            try:
                with self.hold(thread_id):
                    return False
            except BusyError:
                return True
        probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, _offset(thread_id), 1, 0)
        return struct.unpack("hhqqi", fcntl.fcntl(self._fd, _OFD_GETLK, probe))[0] != fcntl.F_UNLCK

    def close(self) -> None:
        """Closes the lock file, releasing every lock held through it."""
        os.close(self._fd)
