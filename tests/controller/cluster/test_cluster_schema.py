"""`dyncc schema apply --cluster` on the real cluster (2 shards x 2 replicas): every node gets the
tables, twice is idempotent, migrations are recorded once; the plan itself is tested pure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from controller.store import ClusterStore, open_store
from controller.store.cluster_schema import plan_statement, sharded_tables
from controller.store.migrate import apply_migrations
from controller.store.sql import migrations
from controller.store.topology import SHARDING_KEY, shard_database
from tests.support.cluster_util import cluster_node, node_tables

ROOT = Path(__file__).resolve().parents[3]
SHARDED = frozenset(
    {
        "tcpinfo",
        "tcpinfo_5m",
        "tcpinfo_5m_nal",
        "ingest_batches",
        "http_requests",
        "http_log_ledger",
        "scoring_cache",
        "scoring_state",
    }
)


def test_sharded_tables_are_the_telemetry_its_rollup_the_requests_the_ledgers_and_the_scoring_state() -> None:
    assert sharded_tables(m.text for m in migrations()) == SHARDED
    tcpinfo = next(m.text for m in migrations() if m.version == 1)
    assert tcpinfo.count(f"{{{{sharded({SHARDING_KEY})}}}}") == 2  # the loader routes by the same key
    requests = next(m.text for m in migrations() if m.version == 8)
    assert requests.count(f"{{{{sharded({SHARDING_KEY})}}}}") == 1  # http_requests: the access-log loader's


def test_plan_of_a_sharded_table_a_replicated_table_and_a_view() -> None:
    sharded = plan_statement(
        "CREATE TABLE IF NOT EXISTS tcpinfo (pop String, prefix String)\nENGINE = MergeTree()\n"
        "ORDER BY pop\n{{sharded(halfMD5(prefix))}}",
        database="d",
        cluster="c",
        sharded=SHARDED,
    )
    assert [(s.where, s.database) for s in sharded] == [("every_node", "d_shard"), ("every_node", "d")]
    assert "ReplicatedMergeTree('/clickhouse/tables/{shard}/d/tcpinfo', '{replica}')" in sharded[0].sql
    assert sharded[1].sql.endswith("ENGINE = Distributed(c, d_shard, tcpinfo, halfMD5(prefix))")
    plain = plan_statement(
        "CREATE TABLE IF NOT EXISTS selections (x UInt8) ENGINE = ReplacingMergeTree() ORDER BY x",
        database="d",
        cluster="c",
        sharded=SHARDED,
    )
    assert [(s.where, s.database) for s in plain] == [("every_node", "d")]
    assert "ReplicatedReplacingMergeTree('/clickhouse/tables/all/d/selections', '{replica}')" in plain[0].sql
    view = plan_statement(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS v TO tcpinfo_5m AS SELECT pop FROM tcpinfo",
        database="d",
        cluster="c",
        sharded=SHARDED,
    )
    assert [(s.where, s.database) for s in view] == [("every_node", "d_shard")]
    mutation = plan_statement("ALTER TABLE selections UPDATE x = 1 WHERE 1", database="d", cluster="c", sharded=SHARDED)
    assert [(s.where, s.database) for s in mutation] == [("once", "d")]
    column = plan_statement("ALTER TABLE tcpinfo ADD COLUMN y UInt8", database="d", cluster="c", sharded=SHARDED)
    assert [(s.where, s.database) for s in column] == [("each_shard", "d_shard"), ("every_node", "d")]


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE MATERIALIZED VIEW IF NOT EXISTS v TO tcpinfo_5m AS SELECT pop FROM selections",
        "CREATE MATERIALIZED VIEW IF NOT EXISTS v TO selections AS SELECT pop FROM tcpinfo",
        "CREATE TABLE IF NOT EXISTS tcpinfo (x UInt8) ENGINE = MergeTree() ORDER BY x",
        "CREATE TABLE IF NOT EXISTS t (x UInt8) ENGINE = ReplicatedMergeTree('/a', 'b') ORDER BY x",
        "OPTIMIZE TABLE selections FINAL",
    ],
)
def test_plan_refuses_what_a_cluster_cannot_run_as_written(statement: str) -> None:
    with pytest.raises(ValueError):
        plan_statement(statement, database="d", cluster="c", sharded=SHARDED)


def test_schema_apply_twice_every_node_has_every_table(cluster_db_url: str) -> None:
    cluster = cluster_db_url.split("cluster=")[1].split("&")[0]
    plain_url = cluster_db_url.split("?")[0]
    cmd = [sys.executable, "-m", "dyncc.cli", "schema", "apply", "--clickhouse", plain_url, "--cluster", cluster]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    count = len(migrations())
    assert f"applied {count}" in first.stdout and "4 nodes" in first.stdout, first.stdout
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "applied 0" in second.stdout and f"already there {count}" in second.stdout, second.stdout

    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        tables = node_tables(store)
        assert len(tables) == 4
        reference = next(iter(tables.values()))
        assert all(t == reference for t in tables.values())  # the same tables everywhere
        engines = {(d, n): e for d, n, e in reference}
        db, shard_db = store.database, shard_database(store.database)
        for name in SHARDED:
            assert engines[(db, name)] == "Distributed"
            assert engines[(shard_db, name)].startswith("Replicated")
        assert engines[(shard_db, "tcpinfo_5m_mv")] == "MaterializedView"
        assert engines[(shard_db, "ingest_batches_mv")] == "MaterializedView"
        assert engines[(shard_db, "http_log_ledger_mv")] == "MaterializedView"
        replicated = (
            "selections",
            "round_outcomes",
            "round_settings",
            "config_versions",
            "schema_migrations",
            "scoring_versions",
            "scoring_state_keys",
        )
        for name in (*replicated, "http_log_progress"):
            assert engines[(db, name)].startswith("Replicated")
        # recorded once for the cluster, visible on every node
        for replica in store.topology().nodes():
            node = store.node_store(replica, db)
            try:
                node.execute("SYSTEM SYNC REPLICA schema_migrations")
                rows = node.query_rows("SELECT version FROM schema_migrations ORDER BY version")
                versions = [int(r[0]) for r in rows]
            finally:
                node.close()
            assert versions == [m.version for m in migrations()]
        assert apply_migrations(store).applied == []
    finally:
        store.close()


def test_schema_apply_refuses_a_cluster_the_server_does_not_know(cluster_db_url: str) -> None:
    plain_url = cluster_db_url.split("?")[0]
    cmd = [sys.executable, "-m", "dyncc.cli", "schema", "apply", "--clickhouse", plain_url, "--cluster", "nosuch"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "nosuch" in done.stderr and "Traceback" not in done.stderr


def test_a_replaced_replica_gets_its_tables_and_data_back(cluster_db_url: str) -> None:
    """A node that lost its databases (a new or rebuilt replica) is given every table by apply
    and the data by replication: the replicated-to-all state and its shard's telemetry."""
    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        apply_migrations(store)
        db, shard_db = store.database, shard_database(store.database)
        store.execute("INSERT INTO round_outcomes (round_id, pop, status, prefixes) SELECT 'r1', 'p1', 'published', 3")
        store.execute(  # through the Distributed table: rows go to their shards
            "INSERT INTO tcpinfo (time, pop, host, prefix, run_id, sequence) "
            "SELECT toDateTime('2026-11-01 00:00:00'), 'p1', 'h1', "
            "concat('2001:db8:', toString(number), '::/56'), 1, 1 "
            "FROM system.numbers LIMIT 40"
        )
        shard2 = store.topology().shards[1]
        victim, peer = shard2.replicas[1], shard2.replicas[0]
        node = store.node_store(victim, "default")
        try:
            for database in (db, shard_db):
                node._admin.execute(f"DROP DATABASE IF EXISTS {database}")
        finally:
            node.close()
        assert apply_migrations(store).applied == []  # a component's start: the query node only
        node = store.node_store(victim, "default")
        try:
            assert int(node.query_rows("SELECT count() FROM system.databases WHERE name = %(d)s", {"d": db})[0][0]) == 0
        finally:
            node.close()
        assert apply_migrations(store, converge=True).applied == []  # dyncc schema apply
        counts = {}
        for replica in (victim, peer):
            local = store.node_store(replica, shard_db)
            try:
                local.execute("SYSTEM SYNC REPLICA tcpinfo")
                counts[str(replica)] = int(local.query_rows("SELECT count() FROM tcpinfo")[0][0])
            finally:
                local.close()
            state = store.node_store(replica, db)
            try:
                state.execute("SYSTEM SYNC REPLICA round_outcomes")
                assert state.query_rows("SELECT round_id, prefixes FROM round_outcomes") == [("r1", 3)]
            finally:
                state.close()
        assert counts[str(victim)] == counts[str(peer)] > 0
        assert int(store.query_rows("SELECT count() FROM tcpinfo")[0][0]) == 40
    finally:
        store.close()


def test_the_query_node_fails_over_to_alt_hosts(cluster_db_url: str) -> None:
    """The controller's node is down: alt_hosts in the URL names the nodes tried next."""
    store = open_store(cluster_db_url)
    try:
        apply_migrations(store)
    finally:
        store.close()
    first = cluster_db_url.split("@")[1].split("/")[0]
    down = cluster_db_url.replace(first, "127.0.0.1:1") + f"&alt_hosts={first}"
    moved = open_store(down)
    try:
        assert int(moved.query_rows("SELECT count() FROM schema_migrations")[0][0]) == len(migrations())
    finally:
        moved.close()


@pytest.mark.parametrize("alt", ["nohostport", "h:0", "h:x", ":19000"])
def test_bad_alt_hosts_are_refused(alt: str) -> None:
    from controller.store import StoreError, parse_store_url

    with pytest.raises(StoreError, match="alt_hosts"):
        parse_store_url(f"clickhouse://127.0.0.1:19000/d?alt_hosts={alt}")


def test_a_component_starts_while_a_replica_is_down_but_schema_apply_names_it(cluster_db_url: str) -> None:
    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        apply_migrations(store)
        victim = store.topology().shards[1].replicas[1]  # s2r2
        cluster_node("stop-node", "s2r2")
        try:
            assert apply_migrations(store).applied == []  # what ingest / rollout / the lab do at start
            plain_url = cluster_db_url.split("?")[0]
            cmd = [sys.executable, "-m", "dyncc.cli", "schema", "apply", "--clickhouse", plain_url]
            done = subprocess.run([*cmd, "--cluster", store.cluster], capture_output=True, text=True, timeout=120)
            assert done.returncode == 2 and "Traceback" not in done.stderr
            assert str(victim) in done.stderr and done.stderr.count("\n") == 1, done.stderr
        finally:
            cluster_node("start-node", "s2r2")
    finally:
        store.close()
