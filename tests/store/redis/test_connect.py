"""Opening a Redis connection (`graph.store.redis.conn.connect`): the TCP connect and a `rediss://` TLS
handshake are bounded by `CONNECT_TIMEOUT_S`, commands then by `SOCKET_TIMEOUT_S`.

The TLS server uses `tests/fixtures/tls/`: a self-signed certificate for 127.0.0.1 (valid
until 2126) and its key, made for these tests only:
`openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem
-out cert.pem -days 36500 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.errors import ErrorCode, UsageError
from graph.run import main as run_main
from tests.conftest import ROOT

pytestmark = pytest.mark.redis
TLS = ROOT / "tests" / "fixtures" / "tls"


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1].split("/")[0]


@pytest.fixture
def tls_server(redis_server: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """valkey-server speaking TLS only, on a free port of 127.0.0.1: (its rediss URL, its cert).

    Needs the session server (`redis_server`) only for its skip or failure when valkey-server
    is missing."""
    from tests.redis_server import valkey_server

    binary = valkey_server()
    assert binary is not None
    cert, key = TLS / "cert.pem", TLS / "key.pem"
    for _ in range(3):  # another process may take the free port before the server binds it
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        process = subprocess.Popen(
            [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
             "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-auth-clients", "no",
             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if _listens(process, port):
            break
        process.wait(10)
    else:
        pytest.fail("valkey-server with TLS did not start")
    try:
        yield f"rediss://127.0.0.1:{port}/0", cert
    finally:
        process.terminate()
        process.wait(10)


def _listens(process: subprocess.Popen[bytes], port: int) -> bool:
    """Waits until the server accepts connections (False if it exits, or after 20 s)."""
    deadline = time.monotonic() + 20
    while process.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    if process.poll() is None:
        process.kill()
    return False


def test_a_rediss_url_naming_a_plain_server_is_refused_after_the_connect_timeout(
        redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A plain server waits for a line the TLS handshake never sends: the handshake ran under
    the 30 s command timeout, so the refusal took 30 s. It is bounded by the connect timeout
    (10 s; 0.5 s here, so the test does not wait it out), and the message says TLS."""
    import graph.store.redis.conn as redis_conn

    monkeypatch.setattr(redis_conn, "CONNECT_TIMEOUT_S", 0.5)
    url = f"rediss://127.0.0.1:{_port(redis_url)}/0?ssl_cert_reqs=none"
    started = time.monotonic()
    code = run_main(["--db", url, "--thread", "tls1", "--task", "q", "--once", "--json"])
    elapsed = time.monotonic() - started
    out = json.loads(capsys.readouterr().out)
    assert (code, out["error_code"]) == (2, "db_unreachable"), out
    assert "speaks TLS" in out["error"]
    assert elapsed < redis_conn.SOCKET_TIMEOUT_S / 2, f"waited {elapsed:.1f} s, not the connect timeout"


def test_a_rediss_url_connects_to_a_tls_server_and_commands_keep_their_own_timeout(
        tls_server: tuple[str, Path]) -> None:
    from graph.store.redis.conn import CONNECT_TIMEOUT_S, SOCKET_TIMEOUT_S, connect

    url, cert = tls_server
    for query in ("ssl_cert_reqs=none", f"ssl_cert_reqs=required&ssl_ca_certs={cert}"):
        client = connect(f"{url}?{query}")
        try:
            assert client.ping() is True
            conn: Any = client.connection_pool.get_connection()
            try:
                assert conn._sock.gettimeout() == SOCKET_TIMEOUT_S != CONNECT_TIMEOUT_S
                assert conn._sock.version() is not None, "the connection is TLS"
            finally:
                client.connection_pool.release(conn)
        finally:
            client.close()


def test_a_plain_connection_gets_the_command_timeout_once_open(redis_url: str) -> None:
    from graph.store.redis.conn import SOCKET_TIMEOUT_S, connect

    client = connect(redis_url)
    try:
        conn: Any = client.connection_pool.get_connection()
        try:
            assert conn._sock.gettimeout() == SOCKET_TIMEOUT_S
        finally:
            client.connection_pool.release(conn)
    finally:
        client.close()


def test_a_tls_server_with_an_untrusted_certificate_is_unreachable_not_a_bug(
        tls_server: tuple[str, Path]) -> None:
    from graph.store.redis.conn import connect

    url, _ = tls_server
    with pytest.raises(UsageError) as refused:
        connect(f"{url}?ssl_cert_reqs=required")  # the self-signed certificate is not trusted
    assert refused.value.error_code == ErrorCode.DB_UNREACHABLE


@pytest.mark.parametrize("face", ["graph.run", "graph.history", "graph.verify"])
def test_a_redis_url_without_the_redis_extra_is_a_usage_error_not_a_bug(face: str) -> None:
    """Found by a new user after issue 27's import hoisting: exit 1 (ModuleNotFoundError)."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    argv = {"graph.run": ["--thread", "t", "--once", "--json"],
            "graph.history": ["--thread", "t", "--json"], "graph.verify": ["--json"]}[face]
    code = ("import sys; sys.modules['redis'] = None; import runpy; "
            f"sys.argv = ['{face}', *{argv!r}, '--db', 'redis://127.0.0.1:1/0']; "
            f"runpy.run_module('{face}', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr[-2000:])
    assert "Redis needs the redis extra" in done.stdout + done.stderr
