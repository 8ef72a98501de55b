"""Ingest into the ClickHouse cluster (2 shards x 2 replicas) from the real Kafka broker.

Every row lands exactly once, on the shard its (pop, prefix) belongs to, with each shard's
ledger matching the rows it holds: after a drain, with a replica stopped mid-stream, with
the loader SIGKILLed between its insert and its commit (and at random points while
loading), and when a crash left a batch on one shard only.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition

from controller.ingest.columns import prepare
from controller.ingest.kafka import CRASH_ENV
from controller.ingest.shards import row_shards, take_rows
from controller.ingest.writer import BatchWriter
from controller.store import ClusterStore, StoreError, open_store
from controller.store.migrate import apply_migrations
from controller.store.topology import shard_database, shard_of
from schemas.tcpinfo_decode import decode_all, scan_batch
from tests.support.cluster_util import (
    LoaderProcess,
    cluster_node,
    expected_rows,
    ledger_mismatches,
    loaded_rows,
    misplaced,
    node_answers,
    node_name,
    query_node_url,
    shard_placement,
)
from tests.support.ingest_kafka import count_rows, create_topic, make_msgs, produce, total_rows

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]

Messages = list[tuple[str, bytes]]


@pytest.fixture
def cluster(cluster_db_url: str) -> Iterator[ClusterStore]:
    """The test database on the cluster with the schema applied (every node)."""
    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        apply_migrations(store)
        assert store.shard_weights() == (1, 1)  # the test cluster: 2 shards of weight 1
        yield store
    finally:
        store.close()


def _msgs(rows: int, seed: int, **kw: object) -> Messages:
    """Batches of 7 hosts in two PoPs, a few thousand client prefixes (so both shards get rows)."""
    return make_msgs(rows, seed=seed, hosts=4, pop="fra1", **kw) + make_msgs(
        rows // 2, seed=seed + 1000, hosts=3, pop="ams1", **kw
    )


def _ingest_args(brokers: str, topic: str, url: str, *extra: str) -> list[str]:
    return ["--kafka", brokers, "--topic", topic, "--group", f"g-{topic}", "--clickhouse", url, "--no-migrate", *extra]


def _ingest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "ingest", "--metrics-port", "0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _wait(cond: Callable[[], bool], timeout: float, what: str, loader: LoaderProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if loader is not None and not loader.alive():
            raise AssertionError(f"loader exited ({loader.proc.returncode}) waiting for {what}:\n{loader.log[-4000:]}")
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f":\n{loader.log[-4000:]}" if loader else ""))


def _loaded(url: str) -> int:
    """Rows in the Distributed tcpinfo; -1 while it cannot be read."""
    try:
        return count_rows(url)
    except StoreError:
        return -1


def _committed(brokers: str, group: str, topic: str, partitions: int) -> int:
    """Sum of the group's committed offsets, read without joining the group."""
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in got)
    finally:
        consumer.close()


def _assert_every_row_once_on_its_shard(store: ClusterStore, url: str, msgs: Messages) -> None:
    want = expected_rows(msgs)
    assert max(want.values()) == 1  # the data itself has no repeated (host, run_id, sequence, cookie)
    got = loaded_rows(url)
    dups = {k: n for k, n in got.items() if n > 1}
    assert not dups, f"{len(dups)} rows more than once, e.g. {sorted(dups.items())[:3]}"
    assert sum(got.values()) == sum(want.values()) == total_rows(msgs)
    assert got == want, f"missing {len(want - got)} rows, unexpected {len(got - want)}"
    assert misplaced(store) == []
    assert all(shard_placement(store)), "a shard holds no rows"
    assert ledger_mismatches(store) == []


def test_drain_loads_every_row_once_each_on_its_shard(
    kafka_brokers: str, kafka_topic: str, cluster_db_url: str, cluster: ClusterStore
) -> None:
    create_topic(kafka_brokers, kafka_topic)
    msgs = _msgs(8000, seed=11)
    produce(kafka_brokers, kafka_topic, msgs)
    done = _ingest(*_ingest_args(kafka_brokers, kafka_topic, cluster_db_url, "--drain"))
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_every_row_once_on_its_shard(cluster, cluster_db_url, msgs)
    placement = shard_placement(cluster)
    rows = [sum(n for n, _, _ in pairs.values()) for pairs in placement]
    assert sum(rows) == total_rows(msgs) and min(rows) > sum(rows) // 4, rows  # both shards hold a fair share
    assert {pop for pairs in placement for pop, _ in pairs} == {"fra1", "ams1"}
    for index, pairs in enumerate(placement):
        # the server's halfMD5(concat(pop, '/', prefix)) % 2 on that shard is the shard; so is Python's shard_of
        for (pop, prefix), (_, _, server_shard) in pairs.items():
            assert server_shard == index == shard_of(pop, prefix, cluster.shard_weights()), (pop, prefix)


@pytest.mark.slow
def test_replica_stopped_mid_stream_loader_fails_over_then_the_replica_catches_up(
    kafka_brokers: str, kafka_topic: str, cluster_db_url: str, cluster: ClusterStore, tmp_path: Path
) -> None:
    """Shard 1's first replica (the one the loader writes to) is stopped while a stream is loaded.

    The loader's query node is shard 2's last replica: a store URL names one query node, so
    stopping that node is a different failure (the loader's look-ups on it wait for it).
    """
    shards = cluster.topology().shards
    victim, peer = shards[0].replicas[0], shards[0].replicas[1]
    url = query_node_url(cluster_db_url, shards[-1].replicas[-1])
    partitions = 3
    create_topic(kafka_brokers, kafka_topic, partitions=partitions)
    msgs = _msgs(24000, seed=21)
    want = total_rows(msgs)
    chunks = [msgs[i : i + 12] for i in range(0, len(msgs), 12)]
    produced = threading.Event()

    def stream() -> None:  # about 8 s of traffic
        for chunk in chunks:
            produce(kafka_brokers, kafka_topic, chunk)
            time.sleep(8 / len(chunks))
        produced.set()

    args = ("--max-rows", "3000", "--min-rows", "500", "--max-wait", "200ms", "--backoff-max", "2s")
    loader = LoaderProcess(tmp_path / "loader.log", *_ingest_args(kafka_brokers, kafka_topic, url, *args))
    producer = threading.Thread(target=stream, daemon=True)
    stopped = False
    try:
        producer.start()
        _wait(lambda: _loaded(url) >= want // 5, 60, "a fifth of the stream loaded", loader)
        cluster_node("stop-node", node_name(cluster, victim))
        stopped = True
        at_stop = _loaded(url)
        assert not node_answers(cluster, victim)
        # the loader keeps going on the other replica: the whole stream loaded and committed
        _wait(produced.is_set, 60, "the stream produced")
        group = f"g-{kafka_topic}"
        _wait(
            lambda: _committed(kafka_brokers, group, kafka_topic, partitions) == len(msgs), 60, "all committed", loader
        )
        assert _loaded(url) > at_stop  # rows kept arriving on the peer while the replica was down
        assert re.search(r"shard 1 .*now using replica", loader.log), loader.log[-3000:]
        assert not node_answers(cluster, victim)
        cluster_node("start-node", node_name(cluster, victim))
        stopped = False
    finally:
        if stopped:
            cluster_node("start-node", node_name(cluster, victim))
        producer.join(60)
        rc = loader.stop()
    assert rc == 0, loader.log[-3000:]
    # the restarted replica catches up with its peer
    db = shard_database(cluster.database)
    counts = {}
    for replica in (victim, peer):
        node = cluster.node_store(replica, db)
        try:
            for table in ("tcpinfo", "ingest_batches", "tcpinfo_5m"):
                node.execute(f"SYSTEM SYNC REPLICA {table}")
            counts[replica] = [
                node.query_rows(f"SELECT count() FROM {table}")[0][0] for table in ("tcpinfo", "ingest_batches")
            ]
        finally:
            node.close()
    assert counts[victim] == counts[peer], counts
    assert counts[victim][0] == sum(n for n, _, _ in shard_placement(cluster)[0].values())
    _assert_every_row_once_on_its_shard(cluster, cluster_db_url, msgs)


def test_loader_sigkilled_between_insert_and_commit_and_while_loading_no_duplicates(
    kafka_brokers: str, kafka_topic: str, cluster_db_url: str, cluster: ClusterStore, tmp_path: Path
) -> None:
    create_topic(kafka_brokers, kafka_topic, partitions=2)
    msgs = _msgs(16000, seed=31)
    produce(kafka_brokers, kafka_topic, msgs)
    args = _ingest_args(
        kafka_brokers, kafka_topic, cluster_db_url, "--drain", "--max-rows", "2000", "--min-rows", "500"
    )
    crashed = _ingest(*args, env={CRASH_ENV: "1"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert "SIGKILL after the insert, before the commit" in crashed.stderr
    # the flush's rows landed on both shards, its offsets were not committed
    assert all(sum(n for n, _, _ in pairs.values()) for pairs in shard_placement(cluster))
    logs = []
    for attempt in range(2):  # SIGKILLed from outside as soon as more rows landed
        before = _loaded(cluster_db_url)
        loader = LoaderProcess(tmp_path / f"killed{attempt}.log", *args)
        try:
            _wait(lambda: _loaded(cluster_db_url) > before or not loader.alive(), 60, "more rows")  # noqa: B023
        finally:
            rc = loader.kill()
        logs.append(loader.log)
        assert rc in (-signal.SIGKILL, 0), loader.log[-3000:]
    done = _ingest(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    logs.append(done.stderr)
    _assert_every_row_once_on_its_shard(cluster, cluster_db_url, msgs)
    # the restarted loaders met batches loaded before a kill and did not load them again
    assert sum(int(n) for log in logs for n in re.findall(r"(\d+) already loaded", log)) > 0


def test_batch_on_one_shard_only_is_completed_on_the_other(cluster_db_url: str, cluster: ClusterStore) -> None:
    """The state a crash between the two shards' inserts leaves: some batches have their rows
    on one shard and not the other.  Writing every message again completes them, once."""
    msgs = _msgs(6000, seed=41)
    scanned = [scan_batch(m) for _, m in msgs]
    weights = cluster.shard_weights()
    shards = cluster.shard_stores()
    # batches 0, 3, 6...: their shard-1 rows only; 1, 4, 7...: their shard-2 rows only; the rest: nothing
    preloaded = 0
    skipped_whole = 0
    for shard, picked in ((0, scanned[0::3]), (1, scanned[1::3])):
        group, bad = decode_all(picked)
        assert not bad
        columns, _ = prepare(group)
        on_shard = row_shards(columns, weights) == shard
        n = int(on_shard.sum())
        shards[shard].bulk_insert("tcpinfo", take_rows(columns, on_shard), n)
        preloaded += n
        # batches with every row on that shard are complete already
        per_batch = np.split(on_shard, np.cumsum([b.rows for b in picked])[:-1])
        skipped_whole += sum(1 for m in per_batch if m.all())
    assert 0 < preloaded < total_rows(msgs)
    assert ledger_mismatches(cluster) == []

    writer = BatchWriter(cluster)
    try:
        result = writer.write(m for _, m in msgs)
        assert result.rows == total_rows(msgs) - preloaded
        assert result.duplicates == skipped_whole
        assert result.batches == len(msgs) - skipped_whole
        assert not result.dead_letters and not result.gaps
        _assert_every_row_once_on_its_shard(cluster, cluster_db_url, msgs)
        again = writer.write(m for _, m in msgs)  # everything is loaded now
        assert (again.rows, again.batches, again.duplicates) == (0, 0, len(msgs))
    finally:
        writer.close()
    _assert_every_row_once_on_its_shard(cluster, cluster_db_url, msgs)
