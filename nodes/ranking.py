"""Ranks short texts against a question: BM25+ over Snowball stems.

Used by the reference search tool and by the offline demo model to pick what answers
a question ("Do you ship internationally?" must find *International shipping*). Words
are split (camelCase and snake_case too), lowercased, stripped of common question
words and reduced to their Snowball English stems, so "ships", "shipping" and "ship"
meet; synonyms are the collection's business (the references' `keywords`). Scores are BM25+
(rank-bm25's `BM25Plus`, Lv & Zhai 2011), whose term weights stay positive in a
collection of two or three texts, where plain BM25 gives a shared word weight zero.

rank-bm25 (which imports numpy) is imported on the first ranking and snowballstemmer
on the first stemming, never at module import: together they take about 0.11–0.16 ×
the time of `import langgraph.graph`, measured side by side, paid only by a process
that searches or runs the demo model's workspace turns, never by polling or by a
step that only sends a request to MandAPI.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from typing import Any

_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[^\W_]+")
STOPWORDS = frozenset(
    "a about all an and any are as at be by can could do does for from has have how i if in "
    "is it its long me my of on or our should so that the their there this to us was we what "
    "when where which who why will with would you your".split()
)
"""Question words that say nothing about the subject (lowercase, before stemming)."""


_LOCAL = threading.local()


def _stemmer() -> Any:
    """This thread's own Snowball stemmer.

    A stemmer keeps state while it works: one shared by queue-worker slots or
    `asyncio.to_thread` calls returned wrong stems or raised IndexError.
    """
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        import snowballstemmer  # noqa: PLC0415 - only a process that ranks pays for it

        stemmer = _LOCAL.stemmer = snowballstemmer.stemmer("english")
    return stemmer


def words(text: str) -> list[str]:
    """The words of `text`, lowercased, camelCase and snake_case split, stopwords dropped."""
    found = [part.lower() for word in _WORD.findall(text) for part in _CAMEL.findall(word)]
    return [w for w in found if w not in STOPWORDS]


def terms(text: str) -> list[str]:
    """The Snowball English stems of `words(text)`, in order, repeats kept."""
    return list(_stemmer().stemWords(words(text)))


def search_fragments(text: str, limit: int = 3) -> list[str]:
    """Short substrings worth searching a folder for, most specific first.

    For each word, the part it shares with its stem ("internationally" → "internat",
    "shipping" → "ship"), so a case-insensitive substring search also finds the word's
    other forms. Longer fragments come first (ties in text order); fragments shorter
    than three characters are dropped.

    Returns:
        At most `limit` distinct fragments, possibly none.
    """
    fragments: list[str] = []
    for word, stem in zip(words(text), terms(text), strict=True):
        fragment = os.path.commonprefix([word, stem])
        if len(fragment) >= 3 and fragment not in fragments:
            fragments.append(fragment)
    return sorted(fragments, key=len, reverse=True)[:limit]


def rank(query: str, documents: Sequence[str]) -> list[tuple[int, float]]:
    """Ranks `documents` by how well they answer `query`.

    Args:
        query: The question, free text.
        documents: The texts to rank (any number, possibly empty).

    Returns:
        `(index, score)` for each document sharing at least one stem with the query,
        best first, ties in document order; scores are positive BM25+ values (unitless,
        comparable only within one call). Empty when nothing matches.
    """
    wanted = list(dict.fromkeys(terms(query)))
    corpus = [terms(doc) for doc in documents]
    if not wanted or not any(corpus):
        return []
    from rank_bm25 import BM25Plus  # noqa: PLC0415 - rank_bm25 brings numpy, imported only by a process that ranks

    scores = BM25Plus(corpus).get_scores(wanted)
    matching = [i for i, doc in enumerate(corpus) if set(wanted) & set(doc)]
    return sorted(((i, float(scores[i])) for i in matching), key=lambda item: (-item[1], item[0]))
