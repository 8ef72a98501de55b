"""An expired server certificate is reported as expired, not as an untrusted CA (issue 33 item 7).

A TLS listener of the test's own on loopback (Python's ssl, OpenSSL) presents a certificate that
its CA signed and that expired yesterday, or one that is valid.  The handshakes are real: librdkafka
(`dyncc ingest`, whose start probe fails at the TLS handshake, before any Kafka request) and
clickhouse-driver (a store query) verify the certificate against the right CA and fail.  Before,
ingest said "verify that ssl.ca.location is correctly configured" and the store "the server's
certificate is not trusted (certificate has expired): did ca_certs=... sign it?".
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from controller.store import StoreError, open_store
from dyncc_common.kafka_security import certificate_out_of_date

NOW = dt.datetime.now(dt.UTC)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_pki(path: Path, expired: bool) -> None:
    """path/ca.crt, and path/server.crt + server.key for localhost / 127.0.0.1, signed by the CA."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("dyncc test CA"))
        .issuer_name(_name("dyncc test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=30))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    end = NOW - dt.timedelta(days=1) if expired else NOW + dt.timedelta(days=1)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=5))
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (path / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (path / "server.key").write_bytes(pem)


def _listener(path: Path) -> Iterator[int]:
    """A loopback TLS listener presenting path/server.crt; yields its port; closed afterwards."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(path / "server.crt", path / "server.key")
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()
        thread.join(5)


@pytest.fixture
def expired(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    _write_pki(tmp_path, expired=True)
    for port in _listener(tmp_path):
        yield tmp_path, port


@pytest.fixture
def valid(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    _write_pki(tmp_path, expired=False)
    for port in _listener(tmp_path):
        yield tmp_path, port


def test_ingest_says_the_broker_certificate_expired(expired: tuple[Path, int], clickhouse_db_url: str) -> None:
    pki, port = expired
    args = ["ingest", "--kafka", f"localhost:{port}", "--kafka-ca", str(pki / "ca.crt"), "--drain"]
    proc = subprocess.run(
        [sys.executable, "-m", "dyncc.cli", *args, "--clickhouse", clickhouse_db_url, "--metrics-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr[-2000:]
    day = (NOW - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    assert f"TLS handshake failed: the broker's certificate (localhost:{port}) expired on {day}" in last, last
    # librdkafka's own words follow, trimmed (which ones depends on where its handshake stopped)
    assert "ssl.ca.location" in last or "certificate verify failed" in last, last


def test_a_valid_certificate_is_not_called_out_of_date(valid: tuple[Path, int]) -> None:
    assert certificate_out_of_date(f"localhost:{valid[1]}") == ""
    assert certificate_out_of_date("127.0.0.1:9") == ""  # nothing listens: nothing to say


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_the_store_says_the_server_certificate_expired(expired: tuple[Path, int], host: str) -> None:
    pki, port = expired
    store = open_store(f"clickhouse://default:@{host}:{port}/default?secure=1&ca_certs={pki / 'ca.crt'}")
    try:
        with pytest.raises(StoreError) as err:
            store.query_rows("SELECT 1")
    finally:
        store.close()
    assert "the server's certificate is out of its validity period (certificate has expired)" in str(err.value)
    assert "not trusted" not in str(err.value)
