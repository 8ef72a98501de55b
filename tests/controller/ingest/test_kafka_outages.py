"""Outages of the loader's dependencies, on real servers: a broker SIGKILLed for 30 s, a ClickHouse stop.

The loader is a real `dyncc ingest` subprocess.  Private servers run through
the deploy scripts on this file's ports: Kafka 20200/20201, ClickHouse
20220-20222; nothing listens on 20217-20219 (the unreachable brokers).
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
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.sinks import KafkaSink, KafkaStart
from controller.store import StoreError
from tests.conftest import unique_name
from tests.support.ingest_kafka import count_rows, create_topic, dup_count, make_msgs, produce, total_rows
from tests.support.private_server import PrivateServer

REPO = Path(__file__).resolve().parents[3]
KAFKA_PORT, KAFKA_CONTROLLER_PORT = 20200, 20201
CH_TCP, CH_HTTP, CH_INTERSERVER = 20220, 20221, 20222
UNREACHABLE = "127.0.0.1:20219"  # nothing listens there


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(cond: Callable[[], bool], timeout: float, what: str, alive: Loader | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and alive.proc.poll() is not None:
            raise AssertionError(f"loader exited ({alive.proc.returncode}) waiting for {what}:\n{alive.log[-4000:]}")
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f":\n{alive.log[-4000:]}" if alive else ""))


def loaded_rows(url: str) -> int:
    """Rows in tcpinfo; -1 while the loader has not created the table yet."""
    try:
        return count_rows(url)
    except StoreError:
        return -1


def produce_to(brokers: str, topic: str, messages: list[tuple[str, bytes]], partition: int) -> None:
    producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "linger.ms": 5})
    for key, value in messages:
        producer.produce(topic, key=key.encode(), value=value, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


class Loader:
    """`dyncc ingest` in a subprocess; a thread keeps its log lines with their arrival times."""

    def __init__(self, *args: str) -> None:
        self.metrics_port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", str(self.metrics_port), *args],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line))

    @property
    def log(self) -> str:
        return "".join(line for _, line in self.lines)

    def lines_between(self, t0: float, t1: float) -> list[str]:
        return [line for t, line in self.lines if t0 <= t < t1]

    def metrics(self) -> dict[str, float]:
        """Scrape /metrics: sample name{labels} -> value, plus per-family sums under the bare name."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
                out[s.name] = out.get(s.name, 0.0) + s.value
        return out

    def lag(self) -> tuple[int, float]:
        """(partitions with a lag sample, summed lag)."""
        m = self.metrics()
        parts = [k for k in m if k.startswith("dyncc_ingest_consumer_lag{")]
        return len(parts), m.get("dyncc_ingest_consumer_lag", 0.0)

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)
        return rc


# ------------------------------------------------------------------ broker SIGKILL


@pytest.fixture
def private_kafka() -> Iterator[PrivateServer]:
    if shutil.which("java") is None:
        pytest.skip("java not installed")
    server = PrivateServer(
        "kafka", DYNCC_KAFKA_PORT=str(KAFKA_PORT), DYNCC_KAFKA_CONTROLLER_PORT=str(KAFKA_CONTROLLER_PORT)
    )
    try:
        server.start()
        yield server
    finally:
        server.remove()


def _sigkill_broker(server: PrivateServer) -> None:
    pid = int((server.stack / "kafka" / "kafka.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.05)
    raise AssertionError(f"broker pid {pid} survived SIGKILL")


@pytest.mark.kafka
@pytest.mark.clickhouse
@pytest.mark.slow
def test_broker_sigkilled_for_30s_loader_stays_up_resumes_every_row_once_bounded_log(
    private_kafka: PrivateServer, clickhouse_db_url: str
) -> None:
    """4 partitions, data on partition 0 only (the other three have nothing committed: the
    lag update asks the broker for their committed offsets, which timed out into a crash)."""
    brokers = f"127.0.0.1:{KAFKA_PORT}"
    topic = unique_name("outage")
    url = clickhouse_db_url
    create_topic(brokers, topic, partitions=4)
    first, second = make_msgs(2000, seed=21), make_msgs(2000, seed=22, run_id=2)
    want = total_rows(first) + total_rows(second)
    produce_to(brokers, topic, first, partition=0)
    loader = Loader(
        "--kafka", brokers, "--topic", topic, "--group", f"g-{topic}", "--clickhouse", url,
        "--max-wait", "300ms", "--backoff-max", "2s",
    )  # fmt: skip
    try:
        wait_until(lambda: loaded_rows(url) == total_rows(first), 60, "first half loaded", loader)
        # the lag gauge covers all 4 partitions and is 0: offsets committed, the housekeeping ran
        wait_until(lambda: loader.lag() == (4, 0.0), 30, "lag 0 on 4 partitions", loader)
        t_kill = time.monotonic()
        _sigkill_broker(private_kafka)
        while time.monotonic() - t_kill < 30:
            assert loader.proc.poll() is None, f"loader died during the broker outage:\n{loader.log[-4000:]}"
            time.sleep(0.5)
        t_restart = time.monotonic()
        during = loader.lines_between(t_kill, t_restart)
        private_kafka.start()  # same data dir
        t_back = time.monotonic()
        produce_to(brokers, topic, second, partition=0)
        wait_until(lambda: loaded_rows(url) >= want, 120, "second half loaded after the broker came back", loader)
        t_loaded = time.monotonic()
        wait_until(lambda: loader.lag() == (4, 0.0), 60, "lag 0 again", loader)
        errors = {k: v for k, v in loader.metrics().items() if k.startswith("dyncc_ingest_kafka_errors_total{")}
    finally:
        rc = loader.stop()
    log = loader.log
    print(
        f"\noutage {t_restart - t_kill:.1f} s: {len(during)} loader log lines; "
        f"broker start {t_back - t_restart:.1f} s; "
        f"second half loaded {t_loaded - t_back:.1f} s after the broker was back; kafka errors {errors}"
    )
    assert rc == 0, log[-4000:]
    assert "Traceback" not in log
    assert len(during) < 50, "".join(during)
    assert sum(errors.values()) > 0  # the outage was seen and counted
    assert count_rows(url) == want
    assert dup_count(url) == 0


# ------------------------------------------------------------------ ClickHouse outage: lag


@pytest.fixture
def private_clickhouse(clickhouse_db_url: str) -> Iterator[PrivateServer]:
    """A ClickHouse 18.16 of this test's own (clickhouse_db_url skips when none is installed)."""
    server = PrivateServer(
        "clickhouse",
        DYNCC_CH_TCP_PORT=str(CH_TCP),
        DYNCC_CH_HTTP_PORT=str(CH_HTTP),
        DYNCC_CH_INTERSERVER_PORT=str(CH_INTERSERVER),
    )
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.mark.kafka
@pytest.mark.clickhouse
def test_lag_gauge_shows_the_backlog_while_clickhouse_hangs_and_while_it_is_down(
    kafka_brokers: str, kafka_topic: str, private_clickhouse: PrivateServer
) -> None:
    """Two outages: the server frozen (SIGSTOP: the loader blocks in a store call, not paused),
    then stopped (the loader paused, retrying).  In both the gauge shows every message produced
    meanwhile; afterwards it returns to 0 and every row is there once."""
    # timeout=60: a frozen server keeps the loader blocked for the whole first outage
    url = f"clickhouse://default:@127.0.0.1:{CH_TCP}/dingest_lag?connect_timeout=1&timeout=60"
    create_topic(kafka_brokers, kafka_topic, partitions=3)
    first = make_msgs(1500, seed=31)
    frozen = make_msgs(1500, seed=32, run_id=2)
    down = make_msgs(3000, seed=33, run_id=3)
    want = total_rows(first) + total_rows(frozen) + total_rows(down)
    ch_pid = int((private_clickhouse.stack / "clickhouse" / "clickhouse-server.pid").read_text())
    loader = Loader(
        "--kafka", kafka_brokers, "--topic", kafka_topic, "--group", f"g-{kafka_topic}", "--clickhouse", url,
        "--max-wait", "300ms", "--backoff-max", "1s",
    )  # fmt: skip
    lags: dict[str, list[float]] = {"frozen": [], "down": []}
    try:
        produce(kafka_brokers, kafka_topic, first)
        wait_until(lambda: loaded_rows(url) == total_rows(first), 60, "first part loaded", loader)
        wait_until(lambda: loader.lag() == (3, 0.0), 30, "lag 0 on 3 partitions", loader)

        os.kill(ch_pid, signal.SIGSTOP)
        try:
            produce(kafka_brokers, kafka_topic, frozen)
            wait_until(lambda: loader.lag()[1] >= len(frozen), 20, f"lag >= {len(frozen)} while frozen", loader)
            lags["frozen"].append(loader.lag()[1])
            assert loader.metrics().get("dyncc_ingest_paused") == 0  # blocked in a call, not paused
        finally:
            os.kill(ch_pid, signal.SIGCONT)
        wait_until(lambda: loaded_rows(url) == total_rows(first) + total_rows(frozen), 60, "frozen part loaded", loader)
        wait_until(lambda: loader.lag() == (3, 0.0), 30, "lag back to 0 after the freeze", loader)

        private_clickhouse.stop()
        produce(kafka_brokers, kafka_topic, down)
        wait_until(
            lambda: loader.metrics().get("dyncc_ingest_paused") == 1 and loader.lag()[1] >= len(down),
            30,
            f"paused with lag >= {len(down)}",
            loader,
        )
        lags["down"].append(loader.lag()[1])
        time.sleep(6)  # longer than the lag interval: the gauge is kept up to date while paused
        lags["down"].append(loader.lag()[1])
        assert loader.metrics().get("dyncc_ingest_paused") == 1
        private_clickhouse.start()
        wait_until(lambda: loaded_rows(url) >= want, 60, "last part loaded", loader)
        wait_until(lambda: loader.lag() == (3, 0.0), 30, "lag back to 0", loader)
    finally:
        rc = loader.stop()
    print(f"\nlag while ClickHouse was frozen / down: {lags} ({len(frozen)} / {len(down)} messages produced meanwhile)")
    assert rc == 0, loader.log[-4000:]
    assert all(lag >= len(down) for lag in lags["down"]), lags
    assert count_rows(url) == want
    assert dup_count(url) == 0


# ------------------------------------------------------------------ unreachable brokers


@pytest.mark.clickhouse
def test_ingest_drain_to_unreachable_broker_exits_2_with_one_line(clickhouse_db_url: str) -> None:
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", "0",
            "--kafka", UNREACHABLE, "--clickhouse", clickhouse_db_url, "--drain", "--connect-timeout", "3s",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - t0
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert UNREACHABLE in lines[0] and "Traceback" not in proc.stderr
    assert took < 20, took


def test_collect_once_to_unreachable_broker_one_line_non_zero() -> None:
    proc = subprocess.run(
        [
            sys.executable, "-m", "dyncc.cli", "collect", "--once", "--no-default-excludes",
            "--sink", "kafka", "--brokers", UNREACHABLE, "--topic", "t", "--flush-timeout", "2s",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0, proc.stderr
    assert len(lines) == 1, proc.stderr[-3000:]
    assert re.search(r"ERROR dyncc.collect: \d+ batches were not delivered", lines[0]), lines[0]
    assert UNREACHABLE in lines[0] and "Connection refused" in lines[0]
    assert "Traceback" not in proc.stderr


def test_librdkafka_messages_during_an_outage_are_rate_limited() -> None:
    """A real producer reconnecting to a closed port for 4 s: dozens of librdkafka messages (it
    retries every ~50-500 ms), logged as the first one of each kind plus one summary line."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger = logging.getLogger("dyncc.kafka")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        sink = KafkaSink(KafkaStart(UNREACHABLE, "h"), "t", CollectMetrics(prometheus=False))  # default interval (10 s)
        sink.send_poll([b"x" * 100])
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.0:
            sink.service(0.05)
        sink.close(0.5)  # logs the summary of what was held back
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    texts = [r.getMessage() for r in records]
    assert len(records) <= 5, "\n".join(texts)
    assert sink.kafka_log.messages > 20, sink.kafka_log.messages  # the outage was noisy
    assert "repeated messages" in texts[-1] and UNREACHABLE in texts[-1], texts
