"""Ingest into the ClickHouse cluster (2 shards x 2 replicas), from the real Kafka broker.

Every row lands exactly once, on the shard its (pop, prefix) belongs to, with each shard's
ledger matching the rows it holds: after a drain; with a replica (also the query node)
stopped mid-stream; with the loader SIGKILLed between its insert and its commit and at
random points while loading; with the loader SIGKILLed while one shard refuses its rows;
and when a crash left batches on one shard only (BatchWriter, no Kafka).  Also: a bulk
insert into a Distributed table returns only once every shard has its rows.
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

from controller.ingest.columns import prepare
from controller.ingest.kafka import CRASH_ENV
from controller.ingest.shards import row_shards, take_rows
from controller.ingest.writer import BatchWriter
from controller.store import ClusterStore, Store, StoreError, open_store
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
    shard_placement,
    shard_table_renamed,
    with_alt_hosts,
)
from tests.support.ingest_kafka import count_rows, create_topic, make_msgs, produce, total_rows
from tests.support.kafka import committed_total

pytestmark = pytest.mark.clickhouse

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
        [sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", "0", *args],
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


def _rows(shard: Store, table: str = "tcpinfo") -> int:
    return int(shard.query_rows(f"SELECT count() FROM {table}")[0][0])


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


@pytest.mark.kafka
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


@pytest.mark.kafka
@pytest.mark.slow
def test_replica_stopped_mid_stream_loader_fails_over_then_the_replica_catches_up(
    kafka_brokers: str, kafka_topic: str, cluster_db_url: str, cluster: ClusterStore, tmp_path: Path
) -> None:
    """s1r1 is stopped while a stream is loaded: the first replica of shard 1, which the loader
    writes to, and the loader's query node, whose URL names shard 2's last replica in alt_hosts
    (docs/cluster.md).  The second PoP's hosts first appear while s1r1 is down: the loader asks
    the query node for their runs' last sequence, which the alternative host answers."""
    shards = cluster.topology().shards
    victim, peer = shards[0].replicas[0], shards[0].replicas[1]
    assert (victim.host, victim.port) == (cluster.url.host, cluster.url.port)  # also the query node
    url = with_alt_hosts(cluster_db_url, shards[-1].replicas[-1])
    partitions = 3
    create_topic(kafka_brokers, kafka_topic, partitions=partitions)
    first = make_msgs(24000, seed=21, hosts=4, pop="fra1")
    second = make_msgs(12000, seed=22, hosts=3, pop="ams1")
    chunks = [first[i : i + 8] for i in range(0, len(first), 8)]

    def stream() -> None:  # about 6 s of traffic
        for chunk in chunks:
            produce(kafka_brokers, kafka_topic, chunk)
            time.sleep(6 / len(chunks))

    args = ("--max-rows", "3000", "--min-rows", "500", "--max-wait", "200ms", "--backoff-max", "2s")
    loader = LoaderProcess(tmp_path / "loader.log", *_ingest_args(kafka_brokers, kafka_topic, url, *args))
    producer = threading.Thread(target=stream, daemon=True)
    stopped = False
    try:
        producer.start()
        _wait(lambda: _loaded(url) >= total_rows(first) // 4, 60, "a quarter of the stream loaded", loader)
        cluster_node("stop-node", node_name(cluster, victim))  # returns once the server is gone
        stopped = True
        assert not node_answers(cluster, victim)
        at_stop = _loaded(url)
        producer.join(60)
        produce(kafka_brokers, kafka_topic, second)
        # the loader keeps going on the other replica: every message loaded and committed
        group, everything = f"g-{kafka_topic}", len(first) + len(second)
        _wait(
            lambda: committed_total(kafka_brokers, group, kafka_topic, partitions) == everything,
            60,
            "all committed",
            loader,
        )
        assert _loaded(url) > at_stop  # rows kept arriving while the replica was down
        assert re.search(r"shard 1 .*now using replica", loader.log), loader.log[-3000:]
        cluster_node("start-node", node_name(cluster, victim))
        stopped = False
    finally:
        try:
            if stopped:
                cluster_node("start-node", node_name(cluster, victim))
        finally:  # the loader stops even when the replica does not start again
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
    on_shard2 = sum(n for n, _, _ in shard_placement(cluster)[1].values())
    assert counts[victim] == counts[peer], counts
    assert counts[victim][0] == total_rows(first + second) - on_shard2
    _assert_every_row_once_on_its_shard(cluster, cluster_db_url, first + second)


@pytest.mark.kafka
@pytest.mark.slow
def test_loader_sigkilled_between_insert_and_commit_and_while_loading_no_duplicates(
    kafka_brokers: str, kafka_topic: str, cluster_db_url: str, cluster: ClusterStore, tmp_path: Path
) -> None:
    create_topic(kafka_brokers, kafka_topic, partitions=2)
    msgs = _msgs(16000, seed=31)
    produce(kafka_brokers, kafka_topic, msgs)
    drain = _ingest_args(kafka_brokers, kafka_topic, cluster_db_url, "--drain")
    crashed = _ingest(*drain, "--max-rows", "2000", "--min-rows", "500", env={CRASH_ENV: "1"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert "SIGKILL after the insert, before the commit" in crashed.stderr
    # the flush's rows landed on both shards, its offsets were not committed
    assert all(sum(n for n, _, _ in pairs.values()) for pairs in shard_placement(cluster))
    # The restarted loaders wait for more rows before they flush, so their groups differ from
    # the crashed loader's (its first group is what its first poll returned): they do not send
    # its blocks again, which the replicated tables would drop by checksum.  Only the ledgers
    # keep the batches from being loaded twice.
    logs = []
    for attempt, limits in enumerate((("16000", "8000"), ("10000", "5000"))):  # SIGKILLed once more rows landed
        before = _loaded(cluster_db_url)
        loader = LoaderProcess(
            tmp_path / f"killed{attempt}.log", *drain, "--max-rows", limits[0], "--min-rows", limits[1]
        )
        try:
            _wait(lambda: _loaded(cluster_db_url) > before or not loader.alive(), 60, "more rows")  # noqa: B023
        finally:
            rc = loader.kill()
        logs.append(loader.log)
        assert rc in (-signal.SIGKILL, 0), loader.log[-3000:]
    done = _ingest(*drain)  # the default limits: one group of everything left
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


@pytest.mark.kafka
def test_loader_killed_while_one_shard_refuses_its_rows_restarted_loads_only_the_missing_shard(
    kafka_brokers: str, kafka_topic: str, cluster_db_url: str, cluster: ClusterStore, tmp_path: Path
) -> None:
    """Shard 2's tcpinfo is renamed away on both its replicas: the loader's shard-1 insert lands,
    its shard-2 insert fails, and it is SIGKILLed while retrying (a crash between the two shards'
    inserts, through Kafka).  With the table back, a restarted loader loads the rows shard 2
    misses and nothing twice on shard 1."""
    create_topic(kafka_brokers, kafka_topic, partitions=1)
    msgs = _msgs(6000, seed=61)
    produce(kafka_brokers, kafka_topic, msgs)
    shard1, shard2 = cluster.shard_stores()
    drain = _ingest_args(kafka_brokers, kafka_topic, cluster_db_url, "--drain", "--backoff-max", "1s")
    with shard_table_renamed(cluster, 1, "tcpinfo", "tcpinfo_away"):
        loader = LoaderProcess(tmp_path / "refused.log", *drain)
        try:
            _wait(lambda: _rows(shard1) > 0 and loader.log.count("store unavailable") >= 2, 60, "retrying", loader)
        finally:
            loader.kill()
        assert _rows(shard2, "tcpinfo_away") == 0
        on_shard1 = _rows(shard1)
    done = _ingest(*drain)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = re.search(r"loaded (\d+) rows in", done.stderr)
    assert loaded and int(loaded.group(1)) == total_rows(msgs) - on_shard1, done.stderr[-3000:]
    _assert_every_row_once_on_its_shard(cluster, cluster_db_url, msgs)


def test_bulk_insert_into_the_distributed_table_waits_for_every_shard_and_uses_alt_hosts(
    cluster_db_url: str, cluster: ClusterStore
) -> None:
    """ClusterStore.bulk_insert (the Native insert) into the query node's Distributed tcpinfo
    returns once every shard has its rows (insert_distributed_sync, as the store's other
    statements) and reaches the query node through alt_hosts as they do.  The writer on a
    one-shard cluster and bench/cluster_ingest.py's `distributed` strategy insert this way."""
    group, bad = decode_all([scan_batch(m) for _, m in _msgs(3000, seed=51)])
    assert not bad
    columns, rows = prepare(group)
    want = np.bincount(row_shards(columns, cluster.shard_weights()), minlength=2).tolist()
    first = cluster.topology().shards[0].replicas[0]
    assert str(first) in cluster_db_url
    down = open_store(cluster_db_url.replace(str(first), "127.0.0.1:1") + f"&alt_hosts={first}")
    try:
        down.bulk_insert("tcpinfo", columns, rows)
        assert [_rows(shard) for shard in cluster.shard_stores()] == want  # no rows still on their way
        # shard 2 cannot take rows: an asynchronous insert would return and keep them queued
        with shard_table_renamed(cluster, 1, "tcpinfo", "tcpinfo_away"), pytest.raises(StoreError, match="tcpinfo"):
            down.bulk_insert("tcpinfo", columns, rows)
    finally:
        down.close()
    assert [_rows(shard) for shard in cluster.shard_stores()] == want
