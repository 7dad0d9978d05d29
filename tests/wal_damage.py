"""Ways to lose or damage a SQLite `-wal` file, shared by the WAL-loss and kill tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

HEADER, FRAME_HEADER = 32, 24
"""Sizes (bytes) of the WAL header and of each frame's header."""


def _truncate(offset: int) -> Callable[[Path], None]:
    def damage(wal: Path) -> None:
        size = wal.stat().st_size
        with open(wal, "r+b") as fh:
            fh.truncate(max(0, min(offset if offset >= 0 else size + offset, size)))
    return damage


def _flip(offset: int) -> Callable[[Path], None]:
    def damage(wal: Path) -> None:
        data = bytearray(wal.read_bytes())
        if not data:
            return
        at = max(0, min(offset if offset >= 0 else len(data) + offset, len(data) - 1))
        data[at] ^= 0x40
        wal.write_bytes(bytes(data))
    return damage


DAMAGE: dict[str, Callable[[Path], None]] = {
    "deleted": lambda wal: wal.unlink(),
    "truncated to 0": _truncate(0),
    "truncated mid-header": _truncate(HEADER // 2),
    "truncated after the header": _truncate(HEADER),
    "truncated mid-frame-header": _truncate(HEADER + FRAME_HEADER // 2),
    "truncated mid-first-frame": _truncate(HEADER + FRAME_HEADER + 1000),
    "truncated mid-last-frame": _truncate(-1000),
    "flipped header byte (salt)": _flip(16),
    "flipped header byte (checksum)": _flip(24),
    "flipped first frame header": _flip(HEADER + 8),
    "flipped first frame page": _flip(HEADER + FRAME_HEADER + 200),
    "flipped last frame page": _flip(-200),
}
