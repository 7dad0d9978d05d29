"""Ages of finished threads as written by a user: `90s`, `30m`, `24h`, `7d`.

One form for retention's ages (`graph.prune --completed/--failed`, `graph.threads.retention`)
and Redis's times-to-live (`GRAPH_TTL_COMPLETED`, `GRAPH_TTL_FAILED`,
`graph.store.redis.ttl`), so both read and refuse a value alike.
"""

from __future__ import annotations

import re
from datetime import timedelta

from graph.errors import UsageError

__all__ = ["parse_age"]

_AGE = re.compile(r"([0-9]+)([smhd])")  # ASCII digits only, like the documented form
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_age(text: str, name: str = "age") -> timedelta:
    """Parses `90s`, `30m`, `24h` or `7d`.

    Args:
        text: The age as given.
        name: How a refusal names it: `age` (the command's wording for `--completed`
            and `--failed`), the keyword of `graph.api` (`completed`, `failed`), or the
            environment variable.

    Raises:
        UsageError: Anything else, or not text, or more than a hundred years (exit 2).
    """
    match = _AGE.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise UsageError(f"{name} {text!r} must look like 90s, 30m, 24h or 7d")
    try:
        age = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    except (OverflowError, ValueError):  # ValueError: past 4,300 digits (CVE-2020-10735)
        raise UsageError(f"{name} {text[:40]!r} is too large") from None
    if age > timedelta(days=36_500):
        raise UsageError(f"{name} {text!r} is more than a hundred years")
    return age
