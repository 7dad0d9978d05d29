r"""Read-only tools over a workspace folder: list files, read a file, search text.

Every path is relative to the workspace root and confined to it: absolute paths,
`..` components and symlinks that lead outside are refused as tool errors (the model
is told, nothing is read). Binary files are reported, not dumped; reads are capped.
Each result carries evidence ids (`path#Lstart-Lend`) for the model to cite.

A file name that is not valid UTF-8 (`bad\x9bname.txt` on disk) is shown with each
such byte written as `\xNN` (`shown_name`), so every result is valid Unicode text; the
model may cite the name as shown: a path that does not exist as written is tried again
with its `\xNN` escapes (80-ff) read back as those bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nodes.paths import PathRefused, RefusalKind, confine, is_inside

MAX_READ_LINES = 200
"""Most lines one `read_file` returns."""
MAX_LINE_CHARS = 400
"""Longer lines are cut (characters)."""
MAX_READ_CHARS = 6_000
"""Most text one `read_file` returns (characters): the evidence id names only lines shown."""
MAX_LIST_ENTRIES = 300
MAX_MATCHES = 50
MAX_SEARCH_BYTES = 2_000_000
"""Files larger than this are skipped by `search_text` (bytes)."""


_REFUSED: dict[RefusalKind, str] = {
    "not_relative": "'path' must be a non-empty relative path",
    "absolute": "{rel!r} is absolute; use a path relative to the workspace",
    "parent": "{rel!r} leaves the workspace ('..' is not allowed)",
    "outside": "{rel!r} leads outside the workspace (a symlink)",
}
"""What the model is told for each refused path (`nodes.paths`; links are followed)."""


class WorkspaceError(Exception):
    """A request the model can fix: a bad or unreachable path, a binary file, ..."""


_BYTE_ESCAPE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def shown_name(name: str) -> str:
    r"""`name` (from the file system) as valid Unicode: a byte that is not UTF-8 as `\xNN`."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file system gives: nothing can address it
        return name.encode("utf-8", "replace").decode("utf-8")


def _unescaped(rel: str) -> str:
    r"""`rel` with each `\xNN` (80-ff) as the file-system byte it shows (see `shown_name`)."""
    return _BYTE_ESCAPE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), rel)


def evidence_id(path: str, start: int, end: int) -> str:
    """The stable citation for lines `start`..`end` of `path`: `path#Lstart-Lend`."""
    return f"{path}#L{start}-L{end}"


class Workspace:
    """A confined, read-only view of a folder.

    Args:
        root: The folder; must exist (checked by the caller before counting).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def _resolve(self, rel: Any) -> tuple[Path, str]:
        try:
            full = confine(self.root, rel, follow_links=True)
        except PathRefused as exc:
            raise WorkspaceError(_REFUSED[exc.kind].format(rel=rel)) from None
        if not full.exists() and isinstance(rel, str) and _BYTE_ESCAPE.search(rel):
            return self._resolve(_unescaped(rel))
        if not full.exists():
            raise WorkspaceError(f"{shown_name(rel) if isinstance(rel, str) else rel!r} "
                                 "does not exist")
        return full, (shown_name(full.relative_to(self.root).as_posix())
                      if full != self.root else ".")

    @staticmethod
    def _is_binary(path: Path) -> bool:
        with open(path, "rb") as fh:
            return b"\0" in fh.read(8192)

    def list_files(self, path: str = ".") -> dict[str, Any]:
        """Files under `path`, recursively, sorted, with sizes; symlinks out are skipped."""
        full, rel = self._resolve(path)
        entries = []
        for candidate, size in self._files(full, path):
            entries.append({"path": shown_name(candidate.relative_to(self.root).as_posix()),
                            "bytes": size})
            if len(entries) >= MAX_LIST_ENTRIES:
                return {"folder": rel, "files": entries, "truncated": True, "evidence": []}
        return {"folder": rel, "files": entries, "truncated": False, "evidence": []}

    def _files(self, full: Path, path: str) -> Iterator[tuple[Path, int]]:
        """Each file under folder `full` (sorted, links out skipped) and its size in bytes."""
        if not full.is_dir():
            raise WorkspaceError(f"{path!r} is not a folder")
        for dirpath, dirnames, filenames in os.walk(full):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                candidate = Path(dirpath) / name
                real = candidate.resolve()
                if is_inside(self.root, real) and real.is_file():
                    yield candidate, real.stat().st_size

    def read_file(self, path: str, offset: int = 1, limit: int = MAX_READ_LINES) -> dict[str, Any]:
        """Lines `offset`.. (1-based) of a text file, at most `limit` (≤ `MAX_READ_LINES`)."""
        full, rel = self._resolve(path)
        if not full.is_file():
            raise WorkspaceError(f"{path!r} is not a file")
        for name, value in (("offset", offset), ("limit", limit)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WorkspaceError(f"'{name}' must be a positive integer")
        if self._is_binary(full):
            return {"path": rel, "binary": True, "bytes": full.stat().st_size, "evidence": []}
        limit = min(limit, MAX_READ_LINES)
        lines, total, chars = [], 0, 0
        with open(full, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, start=1):
                total = number
                if "\x00" in line:
                    return {"path": rel, "binary": True, "bytes": full.stat().st_size,
                            "evidence": []}
                text = line.rstrip("\n")[:MAX_LINE_CHARS]
                if offset <= number < offset + limit and chars + len(text) <= MAX_READ_CHARS:
                    lines.append(text)
                    chars += len(text) + 1
                elif number >= offset + len(lines) and lines:
                    limit = len(lines)  # the character cap ended the range
        if offset > max(total, 1):
            raise WorkspaceError(f"{path!r} has {total} lines; offset {offset} is past the end")
        end = offset + len(lines) - 1
        return {"path": rel, "start_line": offset, "end_line": end, "total_lines": total,
                "text": "\n".join(lines), "evidence": [evidence_id(rel, offset, max(end, offset))]}

    def search_text(self, query: str, path: str = ".") -> dict[str, Any]:
        """Lines containing `query` (case-insensitive) in text files under `path`."""
        if not isinstance(query, str) or not query.strip():
            raise WorkspaceError("'query' must be a non-empty string")
        needle, matches = query.lower(), list[dict[str, Any]]()
        for number_of_files, (full, size) in enumerate(self._files(self._resolve(path)[0], path)):
            if number_of_files >= MAX_LIST_ENTRIES:
                break
            if size > MAX_SEARCH_BYTES or self._is_binary(full):
                continue
            shown = shown_name(full.relative_to(self.root).as_posix())
            with open(full, encoding="utf-8", errors="replace") as fh:
                for number, line in enumerate(fh, start=1):
                    if needle in line.lower():
                        matches.append({"path": shown, "line": number,
                                        "text": line.strip()[:MAX_LINE_CHARS]})
                        if len(matches) >= MAX_MATCHES:
                            break
            if len(matches) >= MAX_MATCHES:
                break
        return {"query": query, "matches": matches,
                "evidence": [evidence_id(m["path"], m["line"], m["line"]) for m in matches]}
