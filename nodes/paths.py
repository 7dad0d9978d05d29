"""Path confinement for the workspace tools and the write tools: one algorithm, two policies.

A path a model gives is relative to a root folder. `relative_path` checks its syntax
(no file system): a non-empty string without NUL, not absolute, no `..` component.
Reads also refuse a first component with a colon (a Windows drive such as `c:`);
writes keep accepting it, because a thread paused for review must be paused for the
same calls when its tools node runs again on resume. `confine` then places the path
under the root:

- reads (`follow_links=True`): links are followed, and the real path must stay inside
  the root's real path;
- writes (`follow_links=False`): no link anywhere on the way, the root included (a root
  replaced by a link since the thread was created is refused).

Each refusal is a `PathRefused` with a `kind`; callers word it for the model.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Literal

RefusalKind = Literal["not_relative", "absolute", "parent", "outside", "link", "root_moved"]


class PathRefused(Exception):
    """A path that must not be used.

    Attributes:
        kind: `not_relative` (not a non-empty string, or holds NUL), `absolute`, `parent`
            (a `..` component), `outside` (a followed link leads out of the root), `link`
            (a link on the way, for writes) or `root_moved` (the root itself now leads
            elsewhere, for writes).
        path: The path as given.
        detail: For `root_moved`, where the root now leads; else None.
    """

    def __init__(self, kind: RefusalKind, path: Any, detail: str | None = None) -> None:
        super().__init__(f"{kind}: {path!r}")
        self.kind: RefusalKind = kind
        self.path = path
        self.detail = detail


def is_inside(root: Path, path: Path) -> bool:
    """True when `path` is `root` or below it (both absolute; compared as given)."""
    return path == root or path.is_relative_to(root)


def relative_path(rel: Any, *, drives: bool = False) -> PurePosixPath:
    """`rel` as a relative path, checked without the file system.

    Args:
        rel: The path as given.
        drives: Also refuse a first component with a colon (a Windows drive) as absolute.

    Raises:
        PathRefused: `not_relative`, `absolute` (a leading slash or backslash) or `parent`
            (`..`).
    """
    if not isinstance(rel, str) or not rel.strip() or "\x00" in rel:
        raise PathRefused("not_relative", rel)
    pure = PurePosixPath(rel)
    if (pure.is_absolute() or rel.startswith(("/", "\\"))
            or (drives and ":" in (pure.parts or ("",))[0])):
        raise PathRefused("absolute", rel)
    if ".." in pure.parts:
        raise PathRefused("parent", rel)
    return pure


def confine(root: str | Path, rel: Any, *, follow_links: bool) -> Path:
    """The absolute path of `rel` under `root`, confined to it (see module doc).

    Args:
        root: The folder (absolute). For writes, as fixed when the thread was created.
        rel: The relative path a tool call gives.
        follow_links: True for reads (links inside the root are fine), False for writes.

    Returns:
        For reads, the real path (links resolved); for writes, the path under the root.
        Whether it exists is not checked.

    Raises:
        PathRefused: Syntax (`relative_path`), `outside`, `link` or `root_moved`.
    """
    if follow_links:
        pure = relative_path(rel, drives=True)
        base = Path(root).resolve()
        full = (base / pure).resolve()
        if not is_inside(base, full):
            raise PathRefused("outside", rel)
        return full
    base = Path(root).absolute()
    real = base.resolve()
    if real != base:
        raise PathRefused("root_moved", rel, detail=str(real))
    pure = relative_path(rel)
    node = base
    for part in pure.parts:
        node = node / part
        if node.is_symlink():
            raise PathRefused("link", rel)
    return base.joinpath(*pure.parts)
