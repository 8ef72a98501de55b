"""The Kafka sink on real brokers: round trip, flush on SIGTERM, and a broker outage.

The outage test runs its own broker (deploy/kafka/kafka.sh on ports 19292/19293
with a data dir under /tmp) so the shared broker is never stopped.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from collector.telemetry.filters import FilterSpec
from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.poller import Poller, PollerConfig
from collector.telemetry.sinks import KafkaSink, KafkaStart
from schemas.tcpinfo_decode import decode_batch
from tests.support.kafka import consume
from tests.support.private_server import PrivateServer

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[3]


class Collector:
    """`dyncc collect` in a subprocess; a thread keeps reading its log so the pipe never fills."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dyncc.cli",
                "collect",
                "--no-default-excludes",
                "--host",
                "t-edge",
                *args,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def polls(self) -> int:
        found = re.findall(r"poll (\d+):", self.log)
        return int(found[-1]) if found else 0

    def wait_polls(self, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.polls() < n:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"collector did not reach poll {n}:\n{self.log}")
            time.sleep(0.05)

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=5)
        return rc


def produced_batches(log: str) -> int:
    return sum(int(n) for n in re.findall(r"poll \d+: .* batches=(\d+)", log))


def test_round_trip_through_kafka(kafka_brokers: str, kafka_topic: str) -> None:
    cfg = PollerConfig(host="t-edge", filters=FilterSpec(), max_rows=3)
    batches = Poller(cfg).poll().batches
    assert len(batches) >= 2
    metrics = CollectMetrics(prometheus=False)
    sink = KafkaSink(KafkaStart(kafka_brokers, "t-edge"), kafka_topic, metrics)
    sink.send_poll(batches)
    assert sink.close(30) == 0
    assert metrics.value("dyncc_collect_batches_delivered_total") == len(batches)
    got = consume(kafka_brokers, kafka_topic, len(batches))
    assert sorted(got) == sorted(batches)
    sent = {decode_batch(b).sequence: decode_batch(b) for b in batches}
    for data in got:
        d = decode_batch(data)
        want = sent[d.sequence]
        for name, col in want.columns.items():
            np.testing.assert_array_equal(d.columns[name], col, err_msg=name)


def test_sink_on_a_producer_made_earlier(kafka_brokers: str, kafka_topic: str) -> None:
    """KafkaStart's producer is the sink's: what the sink sends arrives; a creation error is raised by the sink."""
    start = KafkaStart(kafka_brokers, "t-edge", linger_ms=5, quiet=True)
    assert start.error is None
    metrics = CollectMetrics(prometheus=False)
    sink = KafkaSink(start, kafka_topic, metrics)
    assert sink.producer is start.producer
    batches = [b"one", b"two", b"three"]
    sink.send_poll(batches)
    assert sink.close(30) == 0
    assert sorted(consume(kafka_brokers, kafka_topic, 3)) == sorted(batches)

    bad = KafkaStart(kafka_brokers, "t-edge", extra={"no.such.setting": "x"})
    assert bad.producer is None and bad.error is not None
    with pytest.raises(Exception, match=r"no\.such\.setting"):
        KafkaSink(bad, kafka_topic, metrics)


def test_sigterm_flushes_queued_batches(kafka_brokers: str, kafka_topic: str) -> None:
    # a 5 s linger keeps the first poll inside the producer when SIGTERM arrives
    col = Collector(
        "--interval",
        "30s",
        "--linger",
        "5s",
        "--max-rows",
        "2",
        "--brokers",
        kafka_brokers,
        "--topic",
        kafka_topic,
    )
    col.wait_polls(1)
    rc = col.stop()
    log = col.log
    assert rc == 0, log
    assert "stopping (SIGTERM)" in log
    total = produced_batches(log)
    assert total >= 2
    got = [decode_batch(b) for b in consume(kafka_brokers, kafka_topic, total)]
    assert sorted(d.sequence for d in got) == list(range(total))


@pytest.fixture(scope="module")
def private_broker() -> Iterator[PrivateServer]:
    if shutil.which("java") is None:
        pytest.skip("java not installed")
    server = PrivateServer("kafka", DYNCC_KAFKA_PORT="19292", DYNCC_KAFKA_CONTROLLER_PORT="19293")
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.mark.slow
def test_broker_outage_loses_nothing(private_broker: PrivateServer) -> None:
    brokers = "127.0.0.1:19292"
    topic = f"dcol_outage_{uuid.uuid4().hex[:8]}"
    col = Collector(
        "--interval",
        "300ms",
        "--jitter",
        "0s",
        "--max-rows",
        "4",
        "--brokers",
        brokers,
        "--topic",
        topic,
        "--flush-timeout",
        "60s",
    )
    try:
        col.wait_polls(3)
        private_broker.stop()
        before = col.polls()
        time.sleep(3)
        private_broker.start()
        during = col.polls()
        col.wait_polls(during + 4)
    finally:
        rc = col.stop(timeout=90)
    log = col.log
    assert rc == 0, log
    assert during > before  # polls went on during the outage
    assert "Connection refused" in log  # the outage was real
    total = produced_batches(log)
    got = [decode_batch(b) for b in consume(brokers, topic, total, timeout=60)]
    assert sorted(d.sequence for d in got) == list(range(total))  # contiguous, no loss, no duplicates
    assert len({d.run_id for d in got}) == 1
