"""Opening a Redis connection (`graph.redis_conn.connect`): the TCP connect and a `rediss://` TLS
handshake are bounded by `CONNECT_TIMEOUT_S`, commands then by `SOCKET_TIMEOUT_S`."""

from __future__ import annotations

import datetime
import ipaddress
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph.errors import UsageError
from graph.exitcodes import ErrorCode
from graph.run import main as run_main

pytestmark = pytest.mark.redis


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1].split("/")[0]


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files), made with `cryptography`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """valkey-server speaking TLS only, on a free port of 127.0.0.1: (its rediss URL, its cert)."""
    from tests.redis_server import valkey_server

    binary = valkey_server()
    assert binary is not None and shutil.which(binary), "valkey-server >= 8 is needed"
    cert, key = _self_signed(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:  # until it accepts connections (then the handshake is its to answer)
            assert process.poll() is None, "valkey-server with TLS exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "valkey-server with TLS did not listen"
                time.sleep(0.05)
        yield f"rediss://127.0.0.1:{port}/0", cert
    finally:
        process.terminate()
        process.wait(10)


def test_a_rediss_url_naming_a_plain_server_is_refused_after_the_connect_timeout(
        redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A plain server waits for a line the TLS handshake never sends: the handshake ran under
    the 30 s command timeout, so the refusal took 30 s. It is bounded by the connect timeout
    (10 s; 0.5 s here, so the test does not wait it out), and the message says TLS."""
    import graph.redis_conn as redis_conn

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
    from graph.redis_conn import CONNECT_TIMEOUT_S, SOCKET_TIMEOUT_S, connect

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
    from graph.redis_conn import SOCKET_TIMEOUT_S, connect

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
    from graph.redis_conn import connect

    url, _ = tls_server
    with pytest.raises(UsageError) as refused:
        connect(f"{url}?ssl_cert_reqs=required")  # the self-signed certificate is not trusted
    assert refused.value.error_code == ErrorCode.DB_UNREACHABLE
