"""The benchmark scripts keep working (tiny sizes; no timing is asserted)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.postgres]  # bench.run_all also measures PostgreSQL


def test_every_benchmark_runs_and_prints_its_tables(capsys) -> None:
    from bench.run_all import main
    from tests.conftest import postgres_admin_url

    main(["--quick", "--postgres", postgres_admin_url()])
    out = capsys.readouterr().out
    for title in ("Cold start", "One step in process", "Storage and resume on SQLite",
                  "Storage and resume on PostgreSQL", "threads ×", "queue worker"):
        assert title in out, title
    assert "÷ import floor" in out and "commits/step" in out
