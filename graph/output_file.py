"""The one check and atomic write for every command flag that writes a file.

`batch --out` and `replay export -o` write their file atomically (a temporary file
beside it, fsync, rename). A rename replaces whatever the name points at, so a target
that is not a regular file is refused first (exit 2, naming the flag and what it is):
renaming over a folder fails, and renaming over a device, FIFO, socket or symlink
would silently replace it with a regular file (`--out /dev/full` as root destroyed the
device). A missing parent folder is refused the same way, before any work is done.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from graph.errors import UsageError

__all__ = ["check_output_path", "write_atomic"]

_KINDS = ((stat.S_ISDIR, "is a folder"), (stat.S_ISCHR, "is a character device"),
          (stat.S_ISBLK, "is a block device"), (stat.S_ISFIFO, "is a FIFO (named pipe)"),
          (stat.S_ISSOCK, "is a socket"))


def check_output_path(path: str | Path, flag: str) -> Path:
    """Refuses an output path that an atomic write would fail on or destroy.

    Args:
        path: The file to write (a missing file passes; an existing regular file passes
            and is replaced).
        flag: How a refusal names the setting, e.g. `--out` or `-o`.

    Returns:
        `path` as a `Path`.

    Raises:
        UsageError: (exit 2) `path` is a symlink, folder, device, FIFO or socket, its
            parent folder does not exist or is not a folder, or it is not a usable path.
    """
    out = Path(path)
    try:
        mode = os.lstat(out).st_mode
    except ValueError as exc:  # an embedded NUL byte
        raise UsageError(f"{flag} {str(path)[:80]!r} is not a usable path: {exc}") from None
    except (FileNotFoundError, NotADirectoryError):
        parent = out.parent
        if not parent.is_dir():
            why = "is not a folder" if parent.exists() else "does not exist"
            raise UsageError(f"{flag} {out}: its folder {parent} {why}") from None
        return out
    except OSError as exc:  # EACCES, ENAMETOOLONG, a symlink loop
        raise UsageError(f"{flag} {out}: not a usable path ({exc.strerror or exc})") from None
    if stat.S_ISLNK(mode):
        raise UsageError(f"{flag} {out}: is a symbolic link; name the file itself (it would "
                         "replace the link, not write where it points)")
    for test, what in _KINDS:
        if test(mode):
            raise UsageError(f"{flag} {out}: {what}, not a regular file")
    return out


def write_atomic(path: str | Path, text: str, flag: str, *, private: bool) -> None:
    """Writes `text` (UTF-8) to `path` atomically: temporary file, fsync, rename.

    Args:
        path: The file to write; checked with `check_output_path` again just before.
        text: The whole content.
        flag: How a refusal names the setting.
        private: Mode 0600 (the content is private, like a checkpoint); else the
            usual mode for a new file (0666 less the umask).

    Raises:
        UsageError: (exit 2) `check_output_path` refuses `path`, or the folder cannot
            be written (`OSError.strerror` in the message).
    """
    out = check_output_path(path, flag)
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot write ({exc.strerror or exc})") from None
    try:
        if not private:
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise UsageError(f"{flag} {out}: cannot write ({exc.strerror or exc})") from None
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
