"""Every citation of the promises resolves: `INVARIANTS.md` is in the repository, each `I<n>` in it.

The promises live in `INVARIANTS.md` at the root, beside `README.md`: code and tests
cite them as `INVARIANTS I8` (or `INVARIANTS I1, I2`), and markdown names the file
by a path relative to itself (`../INVARIANTS.md` from `tests/README.md`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

INVARIANTS = ROOT / "INVARIANTS.md"
_CITATION = re.compile(r"INVARIANTS(?:\.md)?((?:(?:,\s*|\s+and\s+|\s+)I\d+\b)+)")
_PATH = re.compile(r"[\w./-]*INVARIANTS\.md")
_DEFINED = re.compile(r"^\|\s*(I\d+)\s*\|", re.MULTILINE)


def _sources() -> Iterator[Path]:
    for folder in ("graph", "nodes", "tests", "bench", "notebooks"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md", ".ipynb") and path.is_file() and path != Path(__file__):
                yield path  # this file's own examples are not citations
    yield from (ROOT / "README.md", ROOT / "mandapi_resume_pytest.py", ROOT / "pyproject.toml")


def cited_ids(text: str) -> set[str]:
    """Every `I<n>` of every `INVARIANTS ...` citation in `text`."""
    return {ident for found in _CITATION.finditer(text) for ident in re.findall(r"I\d+", found.group(1))}


def test_every_cited_invariant_exists_in_the_repository_copy() -> None:
    defined = set(_DEFINED.findall(INVARIANTS.read_text()))
    assert {f"I{n}" for n in range(1, 15)} <= defined
    missing = {f"{path.relative_to(ROOT)}: {ident}" for path in _sources()
               for ident in cited_ids(path.read_text()) - defined}
    assert missing == set()


def test_every_path_to_invariants_md_names_a_file_that_exists() -> None:
    broken = []
    for path in _sources():
        for cited in _PATH.findall(path.read_text()):
            # `../` or `./`: relative to the citing file; otherwise from the root
            target = path.parent / cited if cited.startswith(".") else ROOT / cited
            if not target.resolve().is_file():
                broken.append(f"{path.relative_to(ROOT)}: {cited}")
    assert broken == []


def test_the_citation_reader_finds_lists_and_ignores_other_words() -> None:
    assert cited_ids("(INVARIANTS I1, I2): and INVARIANTS I13), INVARIANTS.md I8") == {
        "I1", "I2", "I13", "I8"}
    assert cited_ids("INVARIANTS I99") == {"I99"}  # so an unknown one fails the test above
    assert cited_ids("the INVARIANTS file; I5 alone") == set()
