"""Fixtures the fleet tests share: a PostgreSQL database of a test's own (queue and caps)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import PostgresBackend, postgres_admin_url


@pytest.fixture
def pg() -> Iterator[PostgresBackend]:
    """A new PostgreSQL database from the worker's pool, dropped after the test."""
    backend = PostgresBackend(postgres_admin_url())
    try:
        yield backend
    finally:
        backend.drop()
