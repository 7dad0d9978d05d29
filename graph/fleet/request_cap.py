"""A batch's shared request cap (`--max-requests`): set up once, read before each thread.

The cap lives in the ledger (`request_caps`), is charged in the same transaction as
each request's claim, and is never reset or changed. `graph.batch` and its queue
workers set it up with the same function, `open_cap`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from graph.errors import ErrorCode, ExitCode, RefusedError, UsageError
from graph.settings import Source, setting_name

if TYPE_CHECKING:
    from graph.outcome import Outcome
    from graph.store.base import Store

__all__ = [
    "MAX_REQUESTS_LIMIT",
    "cap_full",
    "held_by_full_cap",
    "check_cap",
    "check_cap_id",
    "check_max_requests",
    "open_cap",
]

MAX_REQUESTS_LIMIT = 10**9
"""Largest accepted `--max-requests` (the smallest is 1)."""
_CAP_ID = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
"""A cap's name: 1-200 printable characters."""


def check_max_requests(max_requests: int | None, name: str = "--max-requests") -> None:
    """Refuses a cap maximum outside 1 to `MAX_REQUESTS_LIMIT` (None passes).

    Raises:
        UsageError: Naming the setting as `name` (exit 2).
    """
    if max_requests is not None and (not isinstance(max_requests, int)
                                     or isinstance(max_requests, bool)
                                     or not 1 <= max_requests <= MAX_REQUESTS_LIMIT):
        raise UsageError(f"{name} must be a positive integer up to {MAX_REQUESTS_LIMIT}")


def check_cap_id(cap_id: str | None, source: Source = "flags") -> None:
    """Refuses a cap name that is not 1-200 printable characters of valid text (None passes).

    Raises:
        UsageError: `batch id ... (name it with --batch-id)` for the command, `cap_id ...`
            for a caller of `graph.api` (exit 2).
    """
    if cap_id is None:
        return
    valid = isinstance(cap_id, str) and bool(_CAP_ID.fullmatch(cap_id))
    try:
        valid = valid and bool(cap_id.encode("utf-8"))
    except UnicodeEncodeError:  # a file name that is not UTF-8
        valid = False
    if not valid:
        shown = cap_id[:40] if isinstance(cap_id, str) else cap_id
        raise UsageError(f"cap_id {shown!r} must be 1-200 printable characters"
                         if source == "keywords" else
                         f"batch id {shown!r} must be 1-200 printable characters "
                         "(name it with --batch-id)")


def check_cap(cap_id: str | None, max_requests: int | None, source: Source = "flags") -> None:
    """`check_max_requests`, then `check_cap_id`, naming settings as `source` spells them.

    Raises:
        UsageError: The first setting out of range (exit 2).
    """
    check_max_requests(max_requests, setting_name("max_requests", source))
    check_cap_id(cap_id, source)


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
                           f"{maximum}; it is never reset or changed: to allow more "
                           "requests, name a new cap with --batch-id (cap_id in graph.api)",
                           error_code=ErrorCode.IDENTITY_MISMATCH, location=store.location)
    return cap_id


def cap_full(store: Store, cap_id: str | None) -> bool:
    """Whether the cap `cap_id` has no request left (False without a cap)."""
    if cap_id is None:
        return False
    requests, maximum = store.ledger.cap(cap_id) or (0, 0)
    return requests >= maximum


def held_by_full_cap(store: Store, outcome: Outcome, cap_id: str | None) -> Outcome:
    """`outcome`, reported as `batch_cap` (exit 8) when a full cap held its request back.

    One rule for `graph.batch` and its queue workers: an attempt the step counted but could
    not claim because cap `cap_id` is full (`Outcome.held_back`) sent nothing; the thread
    keeps its status (`ready`), and the outcome says why it did not advance. A worker logged
    it as `ready`, exit 0, where the batch said `batch_cap`, exit 8.
    """
    if outcome.held_back and cap_full(store, cap_id):
        outcome.exit_code, outcome.error_code = ExitCode.BATCH_CAP, ErrorCode.BATCH_CAP
        outcome.error = f"request cap {cap_id!r} is full; no request was sent"
    return outcome
