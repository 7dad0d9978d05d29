"""Fixtures of the storage tests: the session's Redis client and a Redis ledger on it.

`client` is the session's client (`tests.redis_server.redis_client`), flushed per test. A
file that needs another client (the product's `connect`, a server of its own) defines its own
`client`, which wins in that file; `tests/store/test_ledger.py` defines its own `ledger`.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def client(redis_client: Any) -> Any:
    return redis_client


@pytest.fixture
def ledger(client: Any, redis_url: str) -> Any:
    from graph.store.redis.ledger import RedisLedger

    return RedisLedger(client, redis_url)
