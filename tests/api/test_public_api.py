"""The public names of `graph.api` are exactly these: adding or removing one is a decision.

`graph.api` is what the README documents for Python callers; its private modules may be
merged or split (issue 27), its names may not change by accident.
"""

from __future__ import annotations

import graph.api

API = [
    "BusyError",
    "Candidate",
    "Database",
    "DatabaseLostError",
    "ErrorCode",
    "ExitCode",
    "Outcome",
    "PruneReport",
    "RefusedError",
    "RunError",
    "SecondNameError",
    "UsageError",
    "VerifyReport",
    "open_database",
    "verify_database",
]


def test_graph_api_exports_exactly_its_documented_names() -> None:
    assert graph.api.__all__ == API
    assert all(hasattr(graph.api, name) for name in API)

