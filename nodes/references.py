"""The demo shop's reference collection and read-only look-ups over it.

The collection is a small JSON file shipped with the package (`nodes/data/`). Each
reference has a stable `id` (for example `ship-01`), a `topic`, a `title`, `keywords`
(words a question may use instead of the text's: "abroad" for international shipping)
and a `text`. Nothing here writes anything.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from nodes import ranking


@cache
def load_references() -> tuple[dict[str, str], ...]:
    """Returns the shipped references, in file order.

    Returns:
        A tuple of dicts with the keys `id`, `topic`, `title`, `keywords` and `text`.
    """
    raw = resources.files("nodes").joinpath("data/references.json").read_text("utf-8")
    return tuple(json.loads(raw))


def search(query: str, limit: int = 3) -> list[dict[str, Any]]:
    """Ranks references by how well they answer `query` (BM25+ over word stems, `nodes.ranking`).

    A reference is indexed by its topic, title, keywords and text.

    Args:
        query: Free text.
        limit: At most this many hits (1 to 5).

    Returns:
        Hits, best first (ties in collection order), each with `id`, `title`,
        `score` (BM25+, rounded to 3 decimals; comparable within one search) and
        `text`; only references sharing a word stem with the query, so empty when
        nothing matches.
    """
    refs = load_references()
    ranked = ranking.rank(query, [f"{r['topic']} {r['title']} {r['keywords']} {r['text']}" for r in refs])
    return [
        {"id": refs[i]["id"], "title": refs[i]["title"], "score": round(score, 3), "text": refs[i]["text"]}
        for i, score in ranked[: max(1, min(limit, 5))]
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
