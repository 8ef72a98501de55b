"""`dyncc ingest` against the real Kafka broker and ClickHouse 18.16: once, never duplicated."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from controller.ingest.kafka import CRASH_ENV, KafkaConfig, KafkaLoader
from controller.ingest.writer import BatchWriter
from controller.store import open_store
from controller.store.migrate import apply_migrations
from dyncc_common.runtime import StopFlag
from tests.support.ingest_kafka import count_rows, create_topic, dup_count, make_msgs, produce, total_rows
from tests.support.kafka import committed_total
from tests.support.private_server import PrivateServer

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]


def _ingest(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", "0", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _drain_args(brokers: str, topic: str, store_url: str) -> list[str]:
    """`dyncc ingest` options that load `topic` into `store_url` and exit once caught up."""
    return ["--kafka", brokers, "--topic", topic, "--group", f"g-{topic}", "--clickhouse", store_url, "--drain"]


def test_drain_loads_every_row_and_dead_letters_bad_messages(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    create_topic(kafka_brokers, kafka_topic)
    msgs = make_msgs(6000, seed=1)
    half = len(msgs) // 2
    garbage = ("edge00.fra1", b"\x08\x01\x12\xff garbage \xff\xff")
    truncated = ("edge00.fra1", msgs[half][1][:5000])
    produce(kafka_brokers, kafka_topic, [*msgs[:half], garbage, truncated, *msgs[half:]])
    proc = _ingest(*_drain_args(kafka_brokers, kafka_topic, clickhouse_db_url))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "flush" in proc.stderr and "drained" in proc.stderr
    assert count_rows(clickhouse_db_url) == total_rows(msgs)
    assert dup_count(clickhouse_db_url) == 0
    s = open_store(clickhouse_db_url)
    try:
        dead = s.query_rows("SELECT topic, partition, length(raw), error FROM ingest_dead_letter ORDER BY length(raw)")
        # the same batch once more: nothing new
        assert len(dead) == 2 and {d[0] for d in dead} == {kafka_topic}
        assert [d[2] for d in dead] == sorted([len(garbage[1]), len(truncated[1])])
        assert all(d[3] for d in dead)
    finally:
        s.close()


def test_killed_between_insert_and_commit_then_restarted_no_duplicates(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    create_topic(kafka_brokers, kafka_topic, partitions=2)
    msgs = make_msgs(4000, seed=2)
    produce(kafka_brokers, kafka_topic, msgs)
    common = _drain_args(kafka_brokers, kafka_topic, clickhouse_db_url)
    crashed = _ingest(*common, env={CRASH_ENV: "1"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert "SIGKILL after the insert, before the commit" in crashed.stderr
    loaded_before = count_rows(clickhouse_db_url)
    assert loaded_before > 0  # the insert landed, the commit did not happen
    proc = _ingest(*common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "already loaded" in proc.stderr
    assert count_rows(clickhouse_db_url) == total_rows(msgs)
    assert dup_count(clickhouse_db_url) == 0
    # the restarted loader saw the crashed flush's batches again and skipped them
    assert sum(int(n) for n in re.findall(r"(\d+) already loaded", proc.stderr)) > 0


@pytest.fixture
def private_clickhouse(clickhouse_db_url: str) -> Iterator[PrivateServer]:
    """A ClickHouse 18.16 of this test's own on port 19400 (clickhouse_db_url skips when none is installed)."""
    server = PrivateServer(
        "clickhouse", DYNCC_CH_TCP_PORT="19400", DYNCC_CH_HTTP_PORT="18423", DYNCC_CH_INTERSERVER_PORT="19409"
    )
    try:
        server.start()
        yield server
    finally:
        server.remove()


PRIVATE_CLICKHOUSE_URL = "clickhouse://default:@127.0.0.1:19400/dingest_outage?connect_timeout=1&timeout=10"


def _wait(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_clickhouse_down_mid_run_then_back_every_row_once(
    kafka_brokers: str, kafka_topic: str, private_clickhouse: PrivateServer
) -> None:
    """The real server is stopped (SIGTERM) mid-run and started again on the same data."""
    create_topic(kafka_brokers, kafka_topic)
    first, second = make_msgs(3000, seed=3), make_msgs(3000, seed=4, first_sequence=1000)
    url = PRIVATE_CLICKHOUSE_URL
    store = open_store(url)
    apply_migrations(store)
    writer = BatchWriter(store)
    group = f"g-{kafka_topic}"
    cfg = KafkaConfig(
        brokers=kafka_brokers,
        topic=kafka_topic,
        group=group,
        max_wait=0.3,
        backoff_initial=0.2,
        backoff_max=1.0,
    )
    stop = StopFlag()
    loader = KafkaLoader(writer, cfg, stop)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(loader.run()), daemon=True)
    thread.start()
    try:
        produce(kafka_brokers, kafka_topic, first)
        _wait(lambda: count_rows(url) == total_rows(first), 40, "first half loaded")
        _wait(lambda: committed_total(kafka_brokers, group, kafka_topic, 3) == len(first), 20, "first half committed")
        private_clickhouse.stop()
        produce(kafka_brokers, kafka_topic, second)
        retries = writer.metrics.registry
        _wait(
            lambda: (retries.get_sample_value("dyncc_ingest_retries_total") or 0) >= 2 and loader.paused,
            30,
            "paused with retries",
        )
        time.sleep(1.0)
        assert loader.paused
        assert committed_total(kafka_brokers, group, kafka_topic, 3) == len(first)  # nothing committed while down
        private_clickhouse.start()
        _wait(
            lambda: count_rows(url) >= total_rows(first) + total_rows(second) and not loader.paused,
            60,
            "second half loaded",
        )
        _wait(
            lambda: committed_total(kafka_brokers, group, kafka_topic, 3) == len(first) + len(second),
            20,
            "second half committed",
        )
    finally:
        stop.set("test")
        thread.join(30)
        store.close()
        writer.close()
    assert result == [0]
    assert count_rows(url) == total_rows(first) + total_rows(second)
    assert dup_count(url) == 0


def test_two_loaders_share_partitions_and_load_every_row_once(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    create_topic(kafka_brokers, kafka_topic, partitions=4)
    store0 = open_store(clickhouse_db_url)
    apply_migrations(store0)
    store0.close()
    loaders, threads, stores = [], [], []
    stop = StopFlag()
    for _ in range(2):
        s = open_store(clickhouse_db_url)
        stores.append(s)
        cfg = KafkaConfig(brokers=kafka_brokers, topic=kafka_topic, group=f"g-{kafka_topic}", max_wait=0.3)
        loader = KafkaLoader(BatchWriter(s), cfg, stop)
        loaders.append(loader)
        t = threading.Thread(target=loader.run, daemon=True)
        t.start()
        threads.append(t)
    msgs = make_msgs(8000, seed=6, hosts=16)
    try:
        _wait(lambda: all(lo.assignment for lo in loaders), 40, "both loaders assigned")
        produce(kafka_brokers, kafka_topic, msgs)
        _wait(lambda: count_rows(clickhouse_db_url) >= total_rows(msgs), 60, "all rows")
    finally:
        stop.set("test")
        for t in threads:
            t.join(30)
        for lo in loaders:
            lo.writer.close()
        for s in stores:
            s.close()
    seen = [lo.partitions_seen for lo in loaders]
    assert all(seen), seen
    assert not (seen[0] & seen[1])  # no partition consumed by both (no rebalance after the produce)
    assert count_rows(clickhouse_db_url) == total_rows(msgs)
    assert dup_count(clickhouse_db_url) == 0


class _CommitLog:
    """The loader's consumer, recording each offset it commits and the rows loaded at that moment."""

    def __init__(self, consumer: object, store_url: str) -> None:
        self._consumer = consumer
        self._store_url = store_url
        self.commits: list[tuple[int, int]] = []

    def commit(self, offsets: list[object], asynchronous: bool) -> object:
        (tp,) = offsets  # one partition
        self.commits.append((tp.offset, count_rows(self._store_url)))  # type: ignore[attr-defined]
        return self._consumer.commit(offsets=offsets, asynchronous=asynchronous)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._consumer, name)


def test_earlier_insert_fails_while_a_later_one_lands_retried_in_order_once(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    """Two groups in flight: the first fails after the second landed -> nothing committed
    past the failure, both retried, the landed one found in the ledger, every row once."""
    from controller.store import StoreError

    create_topic(kafka_brokers, kafka_topic, partitions=1)
    msgs = make_msgs(6000, seed=8)
    produce(kafka_brokers, kafka_topic, msgs)
    store = open_store(clickhouse_db_url)
    apply_migrations(store)
    writer = BatchWriter(store)
    real_insert = writer.insert
    second_landed = threading.Event()
    calls: list[int] = []

    def insert(prep: object) -> object:
        calls.append(1)
        if len(calls) == 1:  # the oldest group: fail, but only after the next one landed
            second_landed.wait(20)
            raise StoreError("injected: insert failed")
        result = real_insert(prep)  # type: ignore[arg-type]
        if len(calls) == 2:
            second_landed.set()
        return result

    writer.insert = insert  # type: ignore[method-assign,assignment]
    rows = total_rows(msgs)
    cfg = KafkaConfig(
        brokers=kafka_brokers,
        topic=kafka_topic,
        group=f"g-{kafka_topic}",
        min_rows=1,
        max_rows=rows // 3,
        max_wait=0.3,
        inserters=2,
        backoff_initial=0.2,
        drain=True,
    )
    loader = KafkaLoader(writer, cfg, StopFlag())
    commits = _CommitLog(loader.consumer, clickhouse_db_url)
    loader.consumer = commits
    try:
        assert loader.run() == 0
    finally:
        writer.close()
        store.close()
    assert second_landed.is_set()
    registry = writer.metrics.registry
    assert (registry.get_sample_value("dyncc_ingest_retries_total") or 0) >= 1
    assert (registry.get_sample_value("dyncc_ingest_duplicate_batches_total") or 0) > 0  # the landed group
    assert count_rows(clickhouse_db_url) == rows
    assert dup_count(clickhouse_db_url) == 0
    # an offset is committed only once every row before it is in the table, in order
    offsets = [o for o, _ in commits.commits]
    assert offsets == sorted(offsets) and offsets[-1] == len(msgs)
    for offset, loaded in commits.commits:
        assert loaded >= total_rows(msgs[:offset]), (offset, loaded)
