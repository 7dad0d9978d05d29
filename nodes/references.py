"""The demo shop's reference collection and read-only look-ups over it.

The collection is a small JSON file shipped with the package (`nodes/data/`). Each
reference has a stable `id` (for example `ship-01`), a `topic`, a `title` and a
`text`. Nothing here writes anything.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    "a an and are at do does for from how i in is it long of on or the to what when "
    "where which who why with you your my me can".split()
)


@cache
def load_references() -> tuple[dict[str, str], ...]:
    """Returns the shipped references, in file order.

    Returns:
        A tuple of dicts with the keys `id`, `topic`, `title` and `text`.
    """
    raw = resources.files("nodes").joinpath("data/references.json").read_text("utf-8")
    return tuple(json.loads(raw))


def _terms(text: str) -> set[str]:
    words = set(_WORD.findall(text.lower()))
    stems = {w[:-1] for w in words if w.endswith("s") and len(w) > 3}
    return (words | stems) - _STOPWORDS


def search(query: str, limit: int = 3) -> list[dict[str, Any]]:
    """Ranks references by how many query words they share.

    Args:
        query: Free text.
        limit: At most this many hits (1 to 5).

    Returns:
        Hits, best first (ties in collection order), each with `id`, `title`,
        `score` (shared words) and `text`; empty when nothing matches.
    """
    wanted = _terms(query)
    scored = []
    for index, ref in enumerate(load_references()):
        score = len(wanted & _terms(f"{ref['topic']} {ref['title']} {ref['text']}"))
        if score:
            scored.append((-score, index, ref))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [
        {"id": ref["id"], "title": ref["title"], "score": -neg, "text": ref["text"]}
        for neg, _, ref in scored[: max(1, min(limit, 5))]
    ]


def get(ref_id: str) -> dict[str, str] | None:
    """Returns the reference with id `ref_id`, or None when there is none."""
    for ref in load_references():
        if ref["id"] == ref_id:
            return dict(ref)
    return None


def listing(topic: str | None = None) -> list[dict[str, str]]:
    """Lists `id`, `topic` and `title` of every reference, or of one topic, in file order."""
    return [
        {"id": r["id"], "topic": r["topic"], "title": r["title"]}
        for r in load_references()
        if topic is None or r["topic"] == topic
    ]
