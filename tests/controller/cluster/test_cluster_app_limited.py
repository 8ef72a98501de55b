"""Migration 009 (tcpinfo_5m_nal, the rollup without app-limited samples) on the cluster.

The plan is tested pure: the table is sharded like tcpinfo_5m (a replicated table per shard in
the shard database plus a Distributed table on every node), its view runs on every node in the
shard database.  On the real cluster (2 shards x 2 replicas, `make cluster-up`): the default
scoring and include_app_limited give the pandas reference's scores, and a rebuilt replica gets
the table and its view back from `dyncc schema apply` (CREATE ... IF NOT EXISTS only).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import numpy as np
import pandas as pd

from controller.scoring.query import refresh, score_prefixes, window_for
from controller.scoring.settings import ScoringSettings
from controller.store import ClusterStore, open_store
from controller.store.cluster_schema import plan_statement, sharded_tables
from controller.store.migrate import apply_migrations
from controller.store.sql import migrations, split_statements
from controller.store.topology import SHARDING_KEY, shard_database
from tests.support import scoring_synth as synth
from tests.support.cluster_util import node_tables, sync_replicas
from tests.support.scoring_reference import reference_scores

NOW = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
CFG = ScoringSettings(holdout_fraction=0.0)
PATTERNS = {f"198.51.{i}.0/24": synth.NORMAL for i in range(12)} | {
    f"2001:db8:{i}::/56": synth.Pattern(bad=(i % 2 == 0,), app_limited=i) for i in range(1, 9)
}  # spread over both shards


def load(store: ClusterStore) -> pd.DataFrame:
    window = window_for(NOW, CFG)
    samples = synth.samples_frame("pop1", PATTERNS, int(window.start.timestamp()), window.buckets)
    synth.insert_samples(store, samples)
    return samples


def _m009() -> str:
    return next(m.text for m in migrations() if m.version == 9)


def test_009_is_planned_like_the_rollup_it_accompanies() -> None:
    sharded = sharded_tables(m.text for m in migrations())
    assert {"tcpinfo", "tcpinfo_5m", "tcpinfo_5m_nal"} <= sharded
    assert _m009().count(f"{{{{sharded({SHARDING_KEY})}}}}") == 1  # the loader routes by the same key
    statements = split_statements(_m009())
    assert len(statements) == 2
    table = plan_statement(statements[0], database="d", cluster="c", sharded=sharded)
    assert [(s.where, s.database) for s in table] == [("every_node", "d_shard"), ("every_node", "d")]
    assert "ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/d/tcpinfo_5m_nal', '{replica}')" in table[0].sql
    assert table[1].sql.endswith(f"ENGINE = Distributed(c, d_shard, tcpinfo_5m_nal, {SHARDING_KEY})")
    view = plan_statement(statements[1], database="d", cluster="c", sharded=sharded)
    assert [(s.where, s.database) for s in view] == [("every_node", "d_shard")]
    assert all(s.sql.lstrip().upper().startswith("CREATE ") for s in table + view)  # re-run by converge


def _engines(store: ClusterStore) -> dict[str, dict[tuple[str, str], str]]:
    return {node: {(d, n): e for d, n, e in tables} for node, tables in node_tables(store).items()}


def test_default_and_included_scores_on_the_cluster(cluster_db_url: str) -> None:
    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        apply_migrations(store)
        engines = _engines(store)
        db, shard_db = store.database, shard_database(store.database)
        for tables in engines.values():
            assert tables[(db, "tcpinfo_5m_nal")] == "Distributed"
            assert tables[(shard_db, "tcpinfo_5m_nal")] == "ReplicatedAggregatingMergeTree"
            assert tables[(shard_db, "tcpinfo_5m_nal_mv")] == "MaterializedView"
        samples = load(store)
        sync_replicas(cluster_db_url)
        window = window_for(NOW, CFG)
        included = replace(CFG, include_app_limited=True)
        for version, (cfg, data) in enumerate(
            ((CFG, synth.app_limited_left_out(samples)), (included, samples)), start=1
        ):
            keys = refresh(store, cfg, window, "pop1", version)
            got = score_prefixes(store, cfg, window, "pop1", keys)
            pd.testing.assert_frame_equal(got, reference_scores(data, cfg, window), check_exact=False, rtol=1e-9)
    finally:
        store.close()


def test_a_rebuilt_replica_gets_the_rollup_and_its_view(cluster_db_url: str) -> None:
    # Migrations up to 009 only: on 18.16 a replica rebuilt after an ALTER TABLE ... ADD COLUMN of a
    # replicated table (010 on selections) cannot be given that table again by converge (its CREATE
    # has the old columns: "Table structure in ZooKeeper is too different from local table structure").
    upto_009 = [m for m in migrations() if m.version <= 9]
    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        apply_migrations(store, upto_009)
        before = _engines(store)
        shard2 = store.topology().shards[1]
        victim = shard2.replicas[1]
        node = store.node_store(victim, "default")
        try:
            for database in (store.database, shard_database(store.database)):
                node._admin.execute(f"DROP DATABASE IF EXISTS {database}")
        finally:
            node.close()
        assert apply_migrations(store, upto_009, converge=True).applied == []  # dyncc schema apply
        assert _engines(store) == before
        samples = load(store)  # rows reach both shards; the rebuilt node's view fills its shard
        sync_replicas(cluster_db_url)
        local = store.node_store(victim, shard_database(store.database))
        try:
            rows = local.query_rows("SELECT toUInt64(countMerge(samples)) FROM tcpinfo_5m_nal")
            held = int(rows[0][0])
        finally:
            local.close()
        total = int(store.query_rows("SELECT toUInt64(countMerge(samples)) FROM tcpinfo_5m_nal")[0][0])
        assert total == len(samples) and 0 < held < total
        assert int(np.sum(samples["app_limited"].to_numpy())) > 0
    finally:
        store.close()
