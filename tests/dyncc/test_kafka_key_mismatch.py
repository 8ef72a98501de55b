"""A Kafka client key that does not match its certificate (issue 33 item 7): `dyncc ingest`,
`dyncc agent` and `dyncc control kill-switch` say so in one line and exit 2, as `dyncc collect`
does, instead of a KafkaException traceback and exit 1 (librdkafka refuses to build the client:
_INVALID_ARG "ssl.key.location failed: ... key values mismatch").  The real broker's address;
nothing reaches it, the client is never built."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from schemas.signing import generate_keypair
from tests.conftest import KAFKA_BROKERS
from tests.support.netns_util import namespaces, new_ns_name

LINE = "bad Kafka settings: --kafka-key does not match --kafka-cert ("


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture
def tls(tmp_path: Path) -> Path:
    """ca.crt (a self-signed certificate, also the client's) and other.key (another key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dyncc-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "other.key").write_bytes(_pem_key(ec.generate_private_key(ec.SECP256R1())))
    generate_keypair(tmp_path / "signing.key", tmp_path / "signing.pub")
    return tmp_path


@pytest.fixture
def edge_ns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    with namespaces([new_ns_name("km")]) as (name,):
        yield name


def _dyncc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyncc.cli", *args], capture_output=True, text=True, timeout=60, env=os.environ.copy()
    )


def _kafka(tls: Path) -> list[str]:
    cert = str(tls / "ca.crt")
    return ["--kafka", KAFKA_BROKERS, "--kafka-ca", cert, "--kafka-cert", cert, "--kafka-key", str(tls / "other.key")]


@pytest.mark.kafka
@pytest.mark.clickhouse
def test_a_mismatched_client_key_is_one_line_and_exit_2(tls: Path, edge_ns: str, clickhouse_db_url: str) -> None:
    runs = {
        "ingest": _dyncc("ingest", "--metrics-port", "0", "--clickhouse", clickhouse_db_url, *_kafka(tls)),
        "agent": _dyncc(
            "agent",
            "--pop",
            "fra",
            "--netns",
            edge_ns,
            "--public-key",
            str(tls / "signing.pub"),
            "--state-dir",
            str(tls / "state"),
            "--metrics-port",
            "0",
            *_kafka(tls),
        ),
        "control": _dyncc(
            "control",
            "kill-switch",
            "--pop",
            "fra",
            "--force",
            "--clickhouse",
            clickhouse_db_url,
            "--key",
            str(tls / "signing.key"),
            *_kafka(tls),
        ),
    }
    for name, proc in runs.items():
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        assert proc.returncode == 2, (name, proc.stderr[-2000:])
        assert last.startswith(f"dyncc {name}: {LINE}") and "key values mismatch" in last, (name, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, name
