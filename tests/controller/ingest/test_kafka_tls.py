"""Kafka over TLS with SASL SCRAM-SHA-512 (issue 26): every client against a private TLS broker.

collector -> SASL_SSL -> `dyncc ingest --drain` (every row once), publisher -> SASL_SSL -> the
agent's config consumer (the signature verifies); a wrong password, an untrusted CA, an
expired client certificate and a plaintext client on the TLS listener are each one line,
exit 2, and nothing is lost (a run with the credentials fixed delivers everything once); the
password never shows in --help, logs or metrics.  The broker (deploy/kafka/kafka.sh with
DYNCC_KAFKA_TLS_PORT, ports 19600-19603) is started once for the module.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dyncc_common.errors import ConfigError
from dyncc_common.kafka_log import KafkaLog
from dyncc_common.kafka_security import KafkaSecurity, KafkaSecurityError, classify, librdkafka_options
from tests.conftest import unique_name
from tests.support.ingest_kafka import count_rows
from tests.support.kafka_tls import TlsKafka

REPO = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------ settings (no broker)


def test_settings_refuse_plain_without_tls_and_half_a_client_certificate() -> None:
    with pytest.raises(ConfigError, match="PLAIN sends the password in clear"):
        KafkaSecurity(kafka_sasl="PLAIN", kafka_user="u", kafka_password_env="PW")
    KafkaSecurity(kafka_sasl="PLAIN", kafka_user="u", kafka_password_env="PW", kafka_tls=True)  # over TLS: fine
    with pytest.raises(ConfigError, match="go together"):
        KafkaSecurity(kafka_cert=Path("/c.crt"))
    with pytest.raises(ConfigError, match="needs --kafka-user"):
        KafkaSecurity(kafka_sasl="SCRAM-SHA-512", kafka_password_env="PW")
    with pytest.raises(ConfigError, match="need --kafka-sasl"):
        KafkaSecurity(kafka_user="u")


def test_options_from_toml_read_the_password_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collector.telemetry.settings import CollectSettings

    (tmp_path / "ca.crt").write_text("x")
    (tmp_path / "pw").write_text("s3cret-pw\n")
    toml = tmp_path / "collect.toml"
    toml.write_text(
        f'[collect]\nbrokers = "k:9093"\nkafka_ca = "{tmp_path}/ca.crt"\nkafka_sasl = "SCRAM-SHA-512"\n'
        f'kafka_user = "edge"\nkafka_password_file = "{tmp_path}/pw"\n'
    )
    settings = CollectSettings.from_sources({}, str(toml))
    assert "s3cret-pw" not in repr(settings)
    assert librdkafka_options(settings.kafka_security) == {
        "security.protocol": "sasl_ssl",
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": str(tmp_path / "ca.crt"),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "edge",
        "sasl.password": "s3cret-pw",
    }
    env = KafkaSecurity(kafka_sasl="SCRAM-SHA-512", kafka_user="u", kafka_password_env="DYNCC_TEST_PW")
    monkeypatch.delenv("DYNCC_TEST_PW", raising=False)
    with pytest.raises(ConfigError, match="DYNCC_TEST_PW: the environment variable is not set"):
        librdkafka_options(env)
    monkeypatch.setenv("DYNCC_TEST_PW", "from-env")
    assert librdkafka_options(env)["sasl.password"] == "from-env"
    assert librdkafka_options(env)["security.protocol"] == "sasl_plaintext"
    assert librdkafka_options(KafkaSecurity()) == {}  # plaintext: the client as before
    with pytest.raises(ConfigError, match=r"--kafka-ca .*: no such file"):
        librdkafka_options(KafkaSecurity(kafka_ca=tmp_path / "missing.crt"))
    with pytest.raises(ConfigError, match=r"--kafka-password-file .*: cannot read it"):
        librdkafka_options(KafkaSecurity(kafka_sasl="SCRAM-SHA-512", kafka_user="u", kafka_password_file=tmp_path))


@pytest.mark.parametrize("name", ["collect", "ingest", "agent", "control"])
def test_the_commented_kafka_tls_keys_of_the_example_configs_load(name: str, tmp_path: Path) -> None:
    from dyncc_common.settings import REGISTRY
    from dyncc_common.settings_doc import load

    text = (REPO / "deploy" / "config" / f"{name}.toml").read_text()
    uncommented = re.sub(r"^# (kafka_\w+ = )", r"\1", text, flags=re.M)
    assert uncommented.count("kafka_sasl = ") == 1
    path = tmp_path / f"{name}.toml"
    path.write_text(uncommented)
    settings: Any = load(REGISTRY[name]).from_sources({}, str(path))
    security = settings.rollout.kafka_security if name == "control" else settings.kafka_security
    assert security.kafka_sasl == "SCRAM-SHA-512" and security.protocol == "sasl_ssl"


class _Err:
    def __init__(self, name: str, text: str) -> None:
        self._name, self._text = name, text

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text

    def fatal(self) -> bool:
        return False


def test_auth_failures_of_a_running_client_are_counted_and_logged_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kafka_log = KafkaLog(logging.getLogger("dyncc.test.tls"), interval=10.0)
    text = "sasl_ssl://k:9093/1: SASL authentication error: Authentication failed (after 3ms in state AUTH_REQ)"
    with caplog.at_level(logging.DEBUG, logger="dyncc.test.tls"):
        for _ in range(200):
            kafka_log.error(_Err("_AUTHENTICATION", text))
    assert kafka_log.security_errors == 200
    assert kafka_log.security_failure() == ("auth", text)
    assert len(caplog.records) == 1  # the rest are counted for the next summary line
    assert classify("_SSL", "SSL handshake failed") == "tls"
    assert classify("_TRANSPORT", "Connect to ipv4#127.0.0.1:1 failed: Connection refused") == ""


# ------------------------------------------------------------------ against a private TLS broker


@pytest.fixture(scope="module")
def broker() -> Iterator[TlsKafka]:
    if shutil.which("java") is None or shutil.which("openssl") is None:
        pytest.skip("java and openssl are needed for the TLS broker")
    server = TlsKafka()
    try:
        server.start()
        yield server
    finally:
        server.remove()


def _dyncc(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyncc.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _collect(brokers: str, topic: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return _dyncc(
        "collect", "--once", "--no-default-excludes", "--sink", "kafka", "--brokers", brokers, "--topic", topic,
        "--flush-timeout", "10s", *flags,
    )  # fmt: skip


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *expected: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.clickhouse
def test_collect_to_ingest_over_tls_and_scram_every_row_once_after_a_wrong_password(
    broker: TlsKafka, tmp_path: Path, clickhouse_db_url: str
) -> None:
    topic = unique_name("tls")
    good = broker.password_file(tmp_path / "pw")
    bad = broker.password_file(tmp_path / "bad-pw", "not-the-password")
    outputs = []

    refused = _collect(broker.sasl_ssl, topic, *broker.flags(bad))
    _one_line_exit_2(refused, broker.sasl_ssl, "SASL authentication failed")
    outputs.append(refused.stderr)
    run = _collect(broker.sasl_ssl, topic, *broker.flags(good))  # the same run with the password fixed
    assert run.returncode == 0, run.stderr[-3000:]
    found = re.search(r"exported=(\d+)", run.stderr)
    assert found, run.stderr
    exported = int(found.group(1))
    assert exported > 0
    outputs.append(run.stderr)

    ingest = ("ingest", "--kafka", broker.sasl_ssl, "--topic", topic, "--clickhouse", clickhouse_db_url)
    refused = _dyncc(*ingest, "--drain", "--metrics-port", "0", *broker.flags(bad))
    _one_line_exit_2(refused, "SASL authentication failed")
    outputs.append(refused.stderr)
    loaded = _dyncc(*ingest, "--drain", "--metrics-port", "0", *broker.flags(good))
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    outputs.append(loaded.stderr)
    assert count_rows(clickhouse_db_url) == exported  # every row once: nothing lost by the refused runs
    assert not any(broker.password in out for out in outputs)


@pytest.mark.parametrize("case", ["wrong-ca", "expired-client-cert", "plaintext-on-tls"])
def test_refused_certificate_or_protocol_is_one_line_exit_2(broker: TlsKafka, tmp_path: Path, case: str) -> None:
    topic = unique_name("tls")
    good = broker.password_file(tmp_path / "pw")
    if case == "wrong-ca":
        proc = _collect(broker.sasl_ssl, topic, *broker.flags(good, ca="other-ca"))
        _one_line_exit_2(proc, "TLS handshake failed", "certificate verify failed")
    elif case == "expired-client-cert":
        tls = ["--kafka-ca", str(broker.ca()), "--kafka-key"]
        proc = _collect(
            broker.mtls, topic, *tls, str(broker.tls / "expired.key"), "--kafka-cert", str(broker.tls / "expired.crt")
        )
        _one_line_exit_2(proc, "TLS handshake failed")
        # the same run with a valid certificate delivers
        fixed = _collect(
            broker.mtls, topic, *tls, str(broker.tls / "client.key"), "--kafka-cert", str(broker.tls / "client.crt")
        )
        assert fixed.returncode == 0, fixed.stderr[-3000:]
    else:
        proc = _collect(broker.sasl_ssl, topic)
        _one_line_exit_2(proc, "a TLS listener?")


@pytest.mark.clickhouse
def test_ingest_with_an_untrusted_ca_is_one_line_exit_2(
    broker: TlsKafka, tmp_path: Path, clickhouse_db_url: str
) -> None:
    good = broker.password_file(tmp_path / "pw")
    proc = _dyncc(
        "ingest", "--kafka", broker.sasl_ssl, "--clickhouse", clickhouse_db_url, "--drain", "--metrics-port", "0",
        *broker.flags(good, ca="other-ca"),
    )  # fmt: skip
    _one_line_exit_2(proc, "TLS handshake failed")


def test_signed_config_published_over_tls_is_read_by_the_agent_consumer(broker: TlsKafka, tmp_path: Path) -> None:
    from collector.agent.kafka import ConfigConsumer
    from controller.rollout.signing import Signer, keygen
    from controller.rollout.sinks import KafkaConfigSink, PublishError
    from schemas.congestion_pb2 import CongestionConfig
    from schemas.signing import load_public_key, verify

    topic = unique_name("tlscfg")
    private, public = keygen(tmp_path / "keys")
    signed = Signer.from_file(private).sign(CongestionConfig(schema_version=1, pop="fra1", version=7, round_id="r7"))
    security = KafkaSecurity(
        kafka_ca=broker.ca(), kafka_sasl="SCRAM-SHA-512", kafka_user=broker.user,
        kafka_password_file=broker.password_file(tmp_path / "pw"),
    )  # fmt: skip
    options = librdkafka_options(security)
    wrong = {**options, "sasl.password": "not-the-password"}
    with pytest.raises(PublishError, match="SASL authentication failed"):
        KafkaConfigSink(broker.sasl_ssl, topic, timeout=10, options=wrong)

    sink = KafkaConfigSink(broker.sasl_ssl, topic, timeout=15, options=options)
    sink.publish("fra1", signed)
    sink.close()

    untrusted = ConfigConsumer(
        broker.sasl_ssl, topic, "fra1", "h1", options={**options, "ssl.ca.location": str(broker.ca("other-ca"))}
    )
    with pytest.raises(KafkaSecurityError, match="TLS handshake failed"):
        untrusted.check(10)
    untrusted.close()

    consumer = ConfigConsumer(broker.sasl_ssl, topic, "fra1", "h1", options=options)
    try:
        assert consumer.check(10) is None
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = consumer.poll(0.5)
    finally:
        consumer.close()
    assert [c.version for c in got] == [7]
    verify(got[0], load_public_key(public))  # raises if the signature does not match


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_password_never_in_help_logs_or_metrics(broker: TlsKafka, tmp_path: Path) -> None:
    helps = [  # at once: each is an interpreter start
        subprocess.Popen(
            [sys.executable, "-m", "dyncc.cli", command, "--help"], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        for command in ("collect", "ingest", "agent", "control")
    ]
    for help_proc in helps:
        text = help_proc.communicate(timeout=60)[0]
        assert "--kafka-password-file" in text and "--kafka-password-env" in text
        assert "--kafka-password " not in text  # no flag takes the password itself
        assert broker.password not in text
    env = dict(os.environ, DYNCC_TEST_KAFKA_PASSWORD=broker.password)
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "dyncc.cli", "collect", "-v", "--no-default-excludes", "--sink", "kafka",
            "--brokers", broker.sasl_ssl, "--topic", unique_name("tls"), "--interval", "1s",
            "--metrics-port", str(port), "--kafka-ca", str(broker.ca()), "--kafka-sasl", "SCRAM-SHA-512",
            "--kafka-user", broker.user, "--kafka-password-env", "DYNCC_TEST_KAFKA_PASSWORD",
        ],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    metrics = ""
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                metrics = ""
            if re.search(r"^dyncc_collect_batches_delivered_total [1-9]", metrics, re.M):
                break
            time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert re.search(r"^dyncc_collect_batches_delivered_total [1-9]", metrics, re.M), err[-3000:]
    assert proc.returncode == 0, err[-3000:]
    for text in (out, err, metrics):
        assert broker.password not in text
