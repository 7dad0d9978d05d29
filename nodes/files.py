"""Small file helpers shared by the write tools and the SQLite store."""

from __future__ import annotations

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
