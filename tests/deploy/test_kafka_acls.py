"""Kafka ACLs (issue 33 item 4): only the controller may write configs.

A private broker (deploy/kafka/kafka.sh with DYNCC_KAFKA_TLS_PORT, DYNCC_KAFKA_MTLS_PORT and
DYNCC_KAFKA_ACLS=deploy/kafka/acl-roles; ports 19592-19595, data under /tmp/h3-kafka-*) runs
KRaft's StandardAuthorizer with the roles applied by the script itself.  Over SASL_SSL
(SCRAM-SHA-512) and mutual TLS, the real clients: the controller's config sink publishes a signed
config, the agent's config consumer reads it, a collector (a SCRAM user or only a client
certificate) and an agent are refused on the config topic and may write only their own topic.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "deploy" / "kafka" / "kafka.sh"
PORTS = {"plaintext": 19592, "controller": 19593, "sasl_ssl": 19594, "mtls": 19595}
USERS = ("dyncc-control", "dyncc-agent", "dyncc-collect", "dyncc-ingest")
CONFIG, STATUS, TELEMETRY = "dyncc-configs", "dyncc-apply-status", "tcpinfo"


class AclBroker:
    def __init__(self) -> None:
        self.stack = Path(tempfile.mkdtemp(prefix="h3-kafka-", dir="/tmp"))
        self.users = self.stack / "scram-users"
        self.passwords = {u: f"pw-{u}-{os.urandom(6).hex()}" for u in USERS}
        self.users.write_text("".join(f"{u}:{p}\n" for u, p in self.passwords.items()))
        self.env = dict(
            os.environ,
            DYNCC_STACK_DIR=str(self.stack),
            DYNCC_KAFKA_PORT=str(PORTS["plaintext"]),
            DYNCC_KAFKA_CONTROLLER_PORT=str(PORTS["controller"]),
            DYNCC_KAFKA_TLS_PORT=str(PORTS["sasl_ssl"]),
            DYNCC_KAFKA_MTLS_PORT=str(PORTS["mtls"]),
            DYNCC_KAFKA_SCRAM_USERS=str(self.users),
            DYNCC_KAFKA_ACLS=str(REPO / "deploy" / "kafka" / "acl-roles"),
            DYNCC_KAFKA_STOP_TIMEOUT="5",
        )
        self.tls = self.stack / "kafka" / "tls"
        self.applied = ""  # what `kafka.sh start wait` said (the ACL line among it)
        self.refused_sink = ""

    def run(self, *cmds: str) -> str:
        out = []
        for cmd in cmds:
            done = subprocess.run(
                ["bash", str(KAFKA_SH), cmd], env=self.env, capture_output=True, text=True, timeout=180
            )
            assert done.returncode == 0, f"kafka.sh {cmd}: {done.stderr[-2000:]}"
            out.append(done.stdout + done.stderr)
        return "".join(out)

    def sasl(self, user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{PORTS['sasl_ssl']}",
            "security.protocol": "sasl_ssl",
            "ssl.ca.location": str(self.tls / "ca.crt"),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": self.passwords[user],
        }

    def mtls(self) -> dict[str, Any]:
        """A client with only a certificate (CN=dyncc-client: a collector in acl-roles)."""
        return {
            "bootstrap.servers": f"127.0.0.1:{PORTS['mtls']}",
            "security.protocol": "ssl",
            "ssl.ca.location": str(self.tls / "ca.crt"),
            "ssl.certificate.location": str(self.tls / "client.crt"),
            "ssl.key.location": str(self.tls / "client.key"),
        }


@pytest.fixture(scope="module")
def broker() -> Iterator[AclBroker]:
    made = AclBroker()
    try:
        made.applied = made.run("start", "wait")
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{PORTS['plaintext']}"})  # the super user
        topics = [NewTopic(CONFIG, 1, 1, config={"cleanup.policy": "compact"}), NewTopic(STATUS, 1, 1)]
        for future in admin.create_topics([*topics, NewTopic(TELEMETRY, 1, 1)]).values():
            future.result(30)
        del admin
        yield made
    finally:
        subprocess.run(["bash", str(KAFKA_SH), "stop"], env=made.env, capture_output=True, timeout=60)
        shutil.rmtree(made.stack, ignore_errors=True)


def produce(options: dict[str, Any], topic: str, value: bytes = b"x") -> str | None:
    """The delivery error of one message (None: delivered), as librdkafka names it."""
    errors: list[str] = []
    fatal: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err.name() + ": " + err.str())

    producer = Producer({**options, "message.timeout.ms": 15000, "error_cb": lambda e: fatal.append(e.str())})
    producer.produce(topic, key=b"lax", value=value, on_delivery=delivered)
    assert producer.flush(30) == 0
    return errors[0] if errors else None


def test_the_script_applied_the_roles(broker: AclBroker) -> None:
    assert "acls: 23 bindings for 5 principals on 127.0.0.1:19592" in broker.applied
    conf = (broker.stack / "kafka" / "server.properties").read_text()
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in conf
    assert "super.users=User:ANONYMOUS" in conf
    assert "acls: 23 bindings" in broker.run("acls")  # applied again: nothing new, no error


def test_a_collector_is_refused_on_the_config_topic_and_writes_telemetry(broker: AclBroker) -> None:
    for options in (broker.sasl("dyncc-collect"), broker.mtls()):
        refused = produce(options, CONFIG)
        assert refused is not None and refused.startswith("TOPIC_AUTHORIZATION_FAILED"), refused
        assert produce(options, TELEMETRY) is None
        assert (produce(options, STATUS) or "").startswith("TOPIC_AUTHORIZATION_FAILED")


def test_the_controller_publishes_a_signed_config_the_agent_reads_it_and_may_not_write_it(
    broker: AclBroker, tmp_path: Path
) -> None:
    from collector.agent.kafka import ConfigConsumer
    from controller.rollout.generate import build_config
    from controller.rollout.signing import Signer, keygen
    from controller.rollout.sinks import KafkaConfigSink, PublishError
    from schemas.congestion_pb2 import PrefixEntry
    from schemas.signing import load_public_key, verify

    private, public = keygen(tmp_path / "keys")
    config = build_config(
        "lax", 3, [PrefixEntry(prefix="198.51.100.0/24", algorithm="bbr")], created_at_ns=time.time_ns()
    )
    signed = Signer.from_file(private).sign(config)

    def strip(options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        rest = dict(options)
        return rest.pop("bootstrap.servers"), rest

    # the collector's principal through the controller's own sink: refused, nothing published
    brokers, collector = strip(broker.sasl("dyncc-collect"))
    with pytest.raises(PublishError) as refused:
        sink = KafkaConfigSink(brokers, CONFIG, timeout=15, options=collector)
        sink.publish("lax", signed)
    broker.refused_sink = str(refused.value)
    assert "uthoriz" in str(refused.value), refused.value

    brokers, controller = strip(broker.sasl("dyncc-control"))
    sink = KafkaConfigSink(brokers, CONFIG, timeout=15, options=controller)
    sink.publish("lax", signed)
    sink.close()

    brokers, agent = strip(broker.sasl("dyncc-agent"))
    consumer = ConfigConsumer(brokers, CONFIG, "lax", "edge-1", options=agent)
    try:
        assert consumer.check(10) is None
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = consumer.poll(0.5)
    finally:
        consumer.close()
    assert [c.version for c in got] == [3]
    verify(got[0], load_public_key(public))

    agent_write = produce(broker.sasl("dyncc-agent"), CONFIG, signed.SerializeToString())
    assert agent_write is not None and agent_write.startswith("TOPIC_AUTHORIZATION_FAILED"), agent_write
    assert produce(broker.sasl("dyncc-agent"), STATUS) is None  # its ApplyStatus reports
    assert (produce(broker.sasl("dyncc-ingest"), CONFIG) or "").startswith("TOPIC_AUTHORIZATION_FAILED")
    print(f"\ncollector via the config sink: {broker.refused_sink}")
    print(f"agent writing the config topic: {agent_write}")
