"""The names of this project's keys in a Redis database, defined once.

Every key of ours starts with `PREFIX`, so it never meets LangGraph's own keys
(`checkpoint:...`, `checkpoint_write:...`, its search indexes) or anyone else's. A
thread's keys end with the thread id as it is (any text; the part before it is fixed, so
the id is read back by cutting the prefix off; bytes that are not UTF-8 come back as
lone surrogates and go out again as the same bytes). Keys of one operation may lie in
different hash slots: the backend runs on one server (or a primary with replicas), not on
Redis Cluster.
"""

from __future__ import annotations

from typing import Any

__all__ = ["APPROVALS", "CAP", "DIGEST", "DIGESTS", "FSYNC", "LANGGRAPH_FAMILIES", "LEDGER", "LOCK",
           "LOG", "PREFIX", "SAVED", "TOMBSTONE", "approvals_key", "cap_key", "digest_key",
           "digests_key", "glob_escape", "is_own_digest", "langgraph_keys", "ledger_key", "lock_key",
           "log_key", "pattern", "saved_key", "scan_thread", "shown", "suffix", "tombstone_key"]

PREFIX = "mandapi-resume:"
"""The start of every key this project writes."""

LEDGER = f"{PREFIX}ledger:"
"""A hash per thread: `attempts`, `claimed`, `max_attempts`, `created_at`, `updated_at`."""
CAP = f"{PREFIX}cap:"
"""A hash per request cap (a batch or a parent task): `requests`, `max_requests`."""
LOCK = f"{PREFIX}lock:"
"""A string per thread held by its writer: the holder's token, with the lease as its TTL."""
DIGEST = f"{PREFIX}digest:"
"""A hash per checkpoint (`graph.store.redis.digests`): digests by slot (task id and index)."""
DIGESTS = f"{PREFIX}digests:"
"""A set per thread: the keys of its checkpoints' digest hashes (deleted with the thread)."""
SAVED = f"{PREFIX}saved:"
"""A set per thread: `ns NUL checkpoint_id` of each checkpoint whose `put` finished."""
LOG = f"{PREFIX}log:"
"""A list per thread: its attempt-log rows, oldest first, each a JSON object."""
TOMBSTONE = f"{PREFIX}tombstone:"
"""A hash per pruned thread: `final_status`, `pruned_at`. Never expires."""
APPROVALS = f"{PREFIX}approvals:"
"""A hash per thread: one decision per write call, field `attempt:tool_call_id`, value JSON."""
FSYNC = f"{PREFIX}fsync"
"""A counter written only so that a following `WAITAOF` has a write of its own to wait for."""


def _encode(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


def ledger_key(thread_id: str) -> bytes:
    """The thread's ledger hash."""
    return _encode(LEDGER + thread_id)


def cap_key(cap_id: str) -> bytes:
    """The request cap's hash."""
    return _encode(CAP + cap_id)


def lock_key(thread_id: str) -> bytes:
    """The thread's writer lock."""
    return _encode(LOCK + thread_id)


def digest_key(thread_id: str, ns: str, checkpoint_id: str) -> bytes:
    """The digest hash of one checkpoint (parts joined by NUL, never parsed back)."""
    return _encode(f"{DIGEST}{thread_id}\0{ns}\0{checkpoint_id}")


def digests_key(thread_id: str) -> bytes:
    """The set of a thread's digest hash keys."""
    return _encode(DIGESTS + thread_id)


def is_own_digest(thread_id: str, member: bytes) -> bool:
    """Whether a member of the thread's digest set has the form of one of its digest hashes.

    Anything else in the set is damage: never a key to expire or delete with the thread.
    """
    return (bytes(member).startswith(digest_key(thread_id, "", "")[:-1])
            and bytes(member).count(b"\0") == 2)


def saved_key(thread_id: str) -> bytes:
    """The set of a thread's saved checkpoints."""
    return _encode(SAVED + thread_id)


def log_key(thread_id: str) -> bytes:
    """The thread's attempt log."""
    return _encode(LOG + thread_id)


def tombstone_key(thread_id: str) -> bytes:
    """The thread's tombstone."""
    return _encode(TOMBSTONE + thread_id)


def approvals_key(thread_id: str) -> bytes:
    """The thread's decisions on write calls."""
    return _encode(APPROVALS + thread_id)


def shown(key: bytes, limit: int = 80) -> str:
    """A key as a message names it: its text in quotes, cut to `limit` characters.

    Bytes that are not UTF-8 are written as backslash escapes; never Python's `b'...'`.
    """
    text = key.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")


def glob_escape(text: str) -> str:
    """`text` with the `SCAN MATCH` wildcards escaped."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def pattern(prefix: str) -> bytes:
    """A `SCAN MATCH` pattern for every key that starts with `prefix` (one of ours)."""
    return prefix.encode() + b"*"


LANGGRAPH_FAMILIES = (("checkpoint:", 2), ("checkpoint_latest:", 1), ("checkpoint_write:", 4),
                      ("write_keys_zset:", 2))
"""`RedisSaver`'s key families and how many `:`-separated parts follow the thread id
(namespace and checkpoint id; namespace; namespace, checkpoint id, task id, index;
namespace and checkpoint id). Neither a namespace (the root's is `__empty__`; this
program has no subgraphs) nor an id holds a `:`, so a key parses back to one thread."""


def scan_thread(client: Any, prefix: str, thread_id: str) -> list[bytes]:
    """Every key that starts with `prefix`, the thread id and `:` (other threads' too)."""
    match = f"{prefix}{glob_escape(thread_id)}:*".encode("utf-8", "surrogateescape")
    return [key if isinstance(key, bytes) else str(key).encode()
            for key in client.scan_iter(match=match, count=1000)]


def langgraph_keys(client: Any, thread_id: str) -> list[bytes]:
    """Every key `RedisSaver` keeps for the thread (checkpoints first), found now by `SCAN`."""
    found = []
    for prefix, parts in LANGGRAPH_FAMILIES:
        for key in scan_thread(client, prefix, thread_id):
            rest = key.decode("utf-8", "surrogateescape")[len(prefix):].rsplit(":", parts)
            if len(rest) == parts + 1 and rest[0] == thread_id:
                found.append(key)
    return found


def suffix(key: bytes, prefix: str) -> str:
    """The id at the end of `key` (a key `SCAN` found with `pattern(prefix)`), never failing."""
    return key[len(prefix.encode()):].decode("utf-8", "surrogateescape")
