"""Small file helpers shared by the write tools, the approvals and the SQLite store."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True when a process with this id exists (or exists but is not ours to signal)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(folder: Path, name: str, suffix: str) -> None:
    """Deletes `.NAME.PID.*SUFFIX` files left in `folder` by processes that no longer exist."""
    for stale in folder.glob(f".{name}.*{suffix}"):
        pid = stale.name[len(name) + 2:].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            stale.unlink(missing_ok=True)


def sha256_hex(data: bytes) -> str:
    """SHA-256 of `data`, as 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    """`sha256_hex` of a file's bytes, or `absent` when it does not exist."""
    return sha256_hex(path.read_bytes()) if path.exists() else "absent"
