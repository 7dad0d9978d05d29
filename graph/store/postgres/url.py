"""PostgreSQL URLs in messages: the password never shown.

Light on purpose (no psycopg, no LangGraph): `graph.store.postgres.poll` names the database
in its answers exactly as `graph.store.postgres.open` does.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

CONNECT_TIMEOUT_S = 10
"""How long a connection to PostgreSQL may take to open (libpq `connect_timeout`, seconds):
the store's (`graph.store.postgres.open`), the quick poll's (`graph.store.postgres.poll`) and the
queue's (`graph.fleet.queue_db`). Here, not in `graph.store.postgres.open`, so that a queue worker
refused at start or an enqueue needs no LangGraph import to read it."""


def redact(url: str, unparsable: str = "postgresql://(unparsable URL)") -> str:
    """Returns `url` with any password (in the user part or a query parameter) as `***`.

    `unparsable` is shown instead of a URL `urlsplit` cannot read (`graph.store.redis.url`
    passes its own).
    """
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[-1]}"
        query = re.sub(r"(?i)(^|&)(password|passfile)=[^&]*", r"\1\2=***", parts.query)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return unparsable
