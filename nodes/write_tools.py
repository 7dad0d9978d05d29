"""Write tools behind human review: specs, argument hashes, and the confined atomic write.

The tools node never writes: it pauses the thread for review (`interrupt`), and only
an approval (see `graph.step.approvals`) applies an approved call, through `apply_write`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path, PurePosixPath
from typing import Any

from nodes.arguments import ArgumentsError, canonical, parse_arguments
from nodes.files import sha256_hex, sweep_stale
from nodes.paths import PathRefused, confine, relative_path

WRITE_TOOLS = ("write_file", "append_file")
MAX_WRITE_CHARS = 200_000
_NOT_PLAIN = "{rel!r} is not a plain relative path inside the writable folder"
"""What the model is told for a path refused by its syntax (`nodes.paths.relative_path`)."""


class WriteError(Exception):
    """A write call that cannot be applied as asked (bad path, bad arguments)."""


def _spec(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "additionalProperties": False,
                       "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                       "required": ["path", "text"]}}}


WRITE_TOOL_SPECS = [
    _spec("write_file", "Create or replace a text file in the writable folder. A person reviews "
          "and approves every write before it happens."),
    _spec("append_file", "Append text to a file in the writable folder. A person reviews and "
          "approves every write before it happens."),
]


def canonical_arguments(arguments: Any) -> str:
    """The arguments as canonical JSON (see `nodes.arguments`), or the raw text if ambiguous.

    Ambiguous arguments are never reviewed (a write with them is a tool error at once).
    """
    try:
        return canonical(parse_arguments(arguments))
    except ArgumentsError:
        return str(arguments)


def call_hash(call: dict[str, Any]) -> str:
    """SHA-256 (hex) of a tool call's name and canonical arguments: what a reviewer approves."""
    function = call.get("function") or {}
    text = f"{function.get('name')}\n{canonical_arguments(function.get('arguments', ''))}"
    return sha256_hex(text.encode())


def parse_write(call: dict[str, Any]) -> tuple[str, str, str]:
    """(tool name, relative path, text) of a write call, parsed strictly.

    Raises:
        WriteError: Unparsable, ambiguous (a key given twice) or wrong arguments.
    """
    function = call.get("function") or {}
    name = function.get("name")
    try:
        args = parse_arguments(function.get("arguments"))
    except ArgumentsError as exc:
        raise WriteError(str(exc)) from None
    if (name not in WRITE_TOOLS or set(args) != {"path", "text"}
            or not isinstance(args["path"], str) or not isinstance(args["text"], str)):
        raise WriteError("a write needs exactly a 'path' and a 'text' string")
    if len(args["text"]) > MAX_WRITE_CHARS:
        raise WriteError(f"text longer than {MAX_WRITE_CHARS} characters")
    return name, args["path"], args["text"]


def check_path(rel: str) -> PurePosixPath:
    """`rel` as a path, if it is a plain relative path (checked without the file system).

    The tools node decides with this alone which write calls are paused for review, so
    the decision is the same when LangGraph re-runs the node on resume, whatever
    happened to the folder meanwhile.

    Raises:
        WriteError: Empty, absolute, `..`, or a NUL character.
    """
    try:
        return relative_path(rel)
    except PathRefused:
        raise WriteError(_NOT_PLAIN.format(rel=rel)) from None


def resolve_target(root: str | Path, rel: str) -> Path:
    """The confined absolute path of `rel` under `root`.

    Args:
        root: The writable folder, as fixed at creation (absolute, symlinks resolved).
        rel: The call's relative path.

    Raises:
        WriteError: Absolute, `..`, a symlink anywhere on the way (the writable folder
            itself or one of its parents replaced by a link since creation included),
            or a missing folder.
    """
    try:
        target = confine(root, rel, follow_links=False)
    except PathRefused as exc:
        if exc.kind == "root_moved":
            raise WriteError(f"the writable folder {root} now leads elsewhere ({exc.detail}); writes "
                             "never follow links") from None
        if exc.kind == "link":
            raise WriteError(f"{rel!r} goes through a symlink; writes never follow links") from None
        raise WriteError(_NOT_PLAIN.format(rel=rel)) from None
    if not target.parent.is_dir():
        raise WriteError(f"folder of {rel!r} does not exist")
    if target.exists() and not target.is_file():
        raise WriteError(f"{rel!r} is not a file")
    return target


def planned_content(path: Path, name: str, text: str) -> bytes:
    """The bytes the file will hold after the write."""
    new = text.encode()
    return (path.read_bytes() if path.exists() else b"") + new if name == "append_file" else new


def atomic_write(path: Path, data: bytes) -> None:
    """Writes `data` to `path` atomically: a temporary file, fsync, rename, fsync the folder.

    The temporary file is created exclusively and never through a symlink
    (`O_EXCL | O_NOFOLLOW`), and the file keeps its permissions.
    """
    sweep_stale(path.parent, path.name, ".tmp")  # left by a killed writer
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
