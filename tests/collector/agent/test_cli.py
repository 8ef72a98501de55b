"""`dyncc agent` end to end through the CLI: --from-file --once, and the Kafka mode on the real broker."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.congestion_pb2 import ApplyStatus
from tests.support.agent_lab import POP, Lab, build_lab

pytestmark = pytest.mark.netns


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with build_lab(tmp_path) as made:
        yield made


def dyncc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyncc.cli", "agent", *args], capture_output=True, text=True, timeout=timeout
    )


def edge_args(lab: Lab) -> list[str]:
    """The agent's options for the lab's edge host."""
    return [
        "--pop",
        POP,
        "--public-key",
        str(lab.public_key_path),
        "--netns",
        lab.edge,
        "--state-dir",
        str(lab.state_dir),
    ]


def once_args(lab: Lab, path: Path) -> list[str]:
    return ["--from-file", str(path), "--once", *edge_args(lab)]


def test_from_file_once_end_to_end(lab: Lab, tmp_path: Path) -> None:
    path = tmp_path / f"{POP}.pb"
    path.write_bytes(lab.config(3, ["198.51.100.0/24", "2001:db8:100::/56"]).SerializeToString())
    done = dyncc(*once_args(lab, path))
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert (status["result"], status["version"], status["routes_added"]) == ("APPLIED", "3", 2)
    assert status["health"]["owned_routes"] == 2
    assert sorted(r["dst"] for r in lab.owned_json()) == ["198.51.100.0/24", "2001:db8:100::/56"]

    again = json.loads(dyncc(*once_args(lab, path)).stdout)
    assert again["result"] == "UNCHANGED" and again["applied_version"] == "3"

    # JSON form of a newer signed config (kill switch)
    from google.protobuf import json_format

    kill = tmp_path / "kill.json"
    kill.write_text(json_format.MessageToJson(lab.config(4, [], kill=True)))
    killed = dyncc(*once_args(lab, kill))
    assert killed.returncode == 0 and json.loads(killed.stdout)["routes_removed"] == 2
    assert lab.owned_json() == []

    # refused (stale) -> exit 1, nothing changes
    stale = dyncc(*once_args(lab, path))
    assert stale.returncode == 1 and json.loads(stale.stdout)["result"] == "REFUSED"
    assert lab.owned_json() == []


def test_bad_invocations_exit_2_with_one_line(lab: Lab, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\xff\xfe not a config")
    cases = [
        (once_args(lab, garbage), "not a CongestionConfig"),
        (once_args(lab, tmp_path / "missing.pb"), "cannot read config file"),
        ([*once_args(lab, garbage)[:2], "--pop", POP, "--public-key", str(lab.public_key_path)], "--once"),
        ([*once_args(lab, garbage), "--proto", "4"], "--proto 4"),
        ([*once_args(lab, garbage)[:-4], "--netns", "dag-nonexistent"], "does not exist"),
        (["--kafka", "127.0.0.1:1", "--pop", POP, "--public-key", str(tmp_path / "nokey.pem")], "public key"),
    ]
    for args, message in cases:
        done = dyncc(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.kafka
def test_kafka_mode_latest_config_route_events_kill_switch_and_sigterm(
    lab: Lab, kafka_brokers: str, kafka_topic: str
) -> None:
    config_topic, status_topic = f"{kafka_topic}_cfg", f"{kafka_topic}_status"
    admin = AdminClient({"bootstrap.servers": kafka_brokers})
    topics = [
        NewTopic(config_topic, num_partitions=2, replication_factor=1, config={"cleanup.policy": "compact"}),
        NewTopic(status_topic, num_partitions=1, replication_factor=1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_brokers})

    def publish(key: str, value: bytes) -> None:
        producer.produce(config_topic, key=key.encode(), value=value)
        assert producer.flush(30) == 0

    # before the agent starts: an older config, another POP's config, then the latest for our POP
    publish(POP, lab.config(1, ["203.0.113.0/24"]).SerializeToString())
    publish("fra", lab.config(9, ["198.51.100.0/24"], pop="fra").SerializeToString())
    publish(POP, lab.config(2, ["198.51.100.0/24", "2001:db8:100::/56"]).SerializeToString())

    statuses: list[ApplyStatus] = []
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_brokers,
            "group.id": f"g-{status_topic}",
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.subscribe([status_topic])

    def wait_for(pred: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                assert msg.key() == b"edge-1"
                statuses.append(ApplyStatus.FromString(msg.value() or b""))
            if pred():
                return
        seen = [(s.version, s.result) for s in statuses]
        raise AssertionError(f"timed out waiting for {what}; statuses: {seen}")

    def reported(version: int) -> Callable[[], bool]:
        return lambda: any(s.version == version and s.result == ApplyStatus.APPLIED for s in statuses)

    port = free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dyncc.cli",
            "agent",
            "--kafka",
            kafka_brokers,
            *edge_args(lab),
            "--config-topic",
            config_topic,
            "--status-topic",
            status_topic,
            "--host",
            "edge-1",
            "--reconcile-every",
            "1h",
            "--metrics-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(reported(2), "v2 applied")
        assert not any(s.version == 1 for s in statuses)  # latest wins on catch-up
        assert statuses[0].result == ApplyStatus.UNCHANGED  # the start-up reconcile
        assert sorted(r["dst"] for r in lab.owned_json()) == ["198.51.100.0/24", "2001:db8:100::/56"]
        applied = next(s for s in statuses if s.version == 2)
        assert applied.health.owned_routes == 2 and applied.health.mem_available_bytes > 0

        # a covering route change is followed without waiting for the periodic reconcile
        lab.sh("ip", "route", "replace", "default", "via", "192.0.2.3", "dev", "up0", "congctl", "cubic")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if "198.51.100.0/24 via 192.0.2.3" in lab.sh("ip", "route", "show", "proto", "250"):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(lab.owned_text())

        publish(POP, lab.config(3, [], kill=True).SerializeToString())
        wait_for(reported(3), "kill switch")
        assert lab.owned_json() == []
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "dyncc_agent_applied_version 3.0" in metrics
        assert 'dyncc_agent_reconciles_total{result="ok",trigger="route-change"}' in metrics

        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=20) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        consumer.close()
        admin.delete_topics([config_topic, status_topic])
    stderr = agent.stderr.read() if agent.stderr else ""
    assert "applied v2" in stderr and "applied v3 (kill switch)" in stderr
