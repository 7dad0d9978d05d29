"""A batch's shared request cap (`--max-requests`): set up once, read before each thread.

The cap lives in the ledger (`request_caps`), is charged in the same transaction as
each request's claim, and is never reset or changed. `graph.batch` and its queue
workers set it up with the same function, `open_cap`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graph.errors import RefusedError
from graph.exitcodes import ErrorCode

if TYPE_CHECKING:
    from graph.database import Store

MAX_REQUESTS_LIMIT = 10**9
"""Largest accepted `--max-requests` (the smallest is 1)."""


def open_cap(store: Store, cap_id: str | None, max_requests: int | None) -> str | None:
    """Creates the cap `cap_id` if new; returns the cap to charge, or None for no cap.

    Args:
        store: An open store (its ledger holds the caps).
        cap_id: The cap's name (`--batch-id`, the tasks file's name, `parent:ID`).
        max_requests: `--max-requests`, or None: then an existing cap of that name is
            charged, and without one there is no cap.

    Returns:
        `cap_id` when requests are to be charged to it, else None.

    Raises:
        RefusedError: `identity_mismatch` when the cap exists with another maximum.
    """
    if cap_id is None:
        return None
    if max_requests is None:
        return cap_id if store.ledger.cap(cap_id) is not None else None
    _, maximum = store.ledger.ensure_cap(cap_id, max_requests)
    if maximum != max_requests:
        raise RefusedError(f"request cap {cap_id!r} was created with --max-requests "
                           f"{maximum}; it is never reset or changed",
                           error_code=ErrorCode.IDENTITY_MISMATCH, location=store.location)
    return cap_id


def cap_full(store: Store, cap_id: str | None) -> bool:
    """Whether the cap `cap_id` has no request left (False without a cap)."""
    if cap_id is None:
        return False
    requests, maximum = store.ledger.cap(cap_id) or (0, 0)
    return requests >= maximum
