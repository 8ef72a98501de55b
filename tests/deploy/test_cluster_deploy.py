"""deploy/cluster.sh's cluster: four real ClickHouse servers, 2 shards x 2 replicas, one ZooKeeper.

Proves the shape every node sees (system.clusters, macros, ZooKeeper), that a ReplicatedMergeTree
row written on one replica of a shard reaches the other, that a cluster-wide query survives one
stopped replica, and that `cluster.sh stop-node` / `start-node` really stop and restart a server.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from clickhouse_driver import Client
from clickhouse_driver.errors import Error as DriverError

from tests.deploy.conftest import ClusterNode, ClusterTarget, cluster_rows, connect

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "cluster.sh"


@contextlib.contextmanager
def node_client(target: ClusterTarget, node: ClusterNode) -> Iterator[Client]:
    client = connect(target, node.host, node.port)
    try:
        yield client
    finally:
        client.disconnect()


def macros(target: ClusterTarget, node: ClusterNode) -> dict[str, str]:
    with node_client(target, node) as client:
        return {str(k): str(v) for k, v in client.execute("SELECT macro, substitution FROM system.macros")}


def answers(target: ClusterTarget, node: ClusterNode) -> bool:
    try:
        with node_client(target, node) as client:
            return bool(client.execute("SELECT 1") == [(1,)])
    except (DriverError, OSError, EOFError):
        return False


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=180)


def test_every_node_sees_two_shards_of_two_replicas_and_zookeeper(
    cluster_target: ClusterTarget, cluster_nodes: list[ClusterNode]
) -> None:
    assert [(n.shard, n.replica) for n in cluster_nodes] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert len({(n.host, n.port) for n in cluster_nodes}) == 4
    for node in cluster_nodes:
        with node_client(cluster_target, node) as client:
            assert client.execute("SELECT 1") == [(1,)]
            assert cluster_rows(client, cluster_target.cluster) == cluster_nodes
            # system.zookeeper answers only with a live ZooKeeper session.
            names = {r[0] for r in client.execute("SELECT name FROM system.zookeeper WHERE path = '/'")}
            assert "clickhouse" in names
            # One replica per shard answers a cluster-wide query.
            rows = client.execute(f"SELECT count() FROM cluster('{cluster_target.cluster}', system.one)")
            assert rows == [(2,)]


def test_macros_name_each_node_after_its_place_in_the_cluster(
    cluster_target: ClusterTarget, cluster_nodes: list[ClusterNode]
) -> None:
    seen = [macros(cluster_target, node) for node in cluster_nodes]
    assert len({m["replica"] for m in seen}) == 4
    for node, m in zip(cluster_nodes, seen, strict=True):
        assert int(m["shard"]) == node.shard
        assert m["cluster"] == cluster_target.cluster
    assert [m["replica"] for m in seen] == ["s1r1", "s1r2", "s2r1", "s2r2"]


def test_replicated_row_reaches_the_other_replica_of_its_shard(
    cluster_target: ClusterTarget, cluster_nodes: list[ClusterNode]
) -> None:
    database = f"t_{uuid.uuid4().hex[:10]}"
    first, second = (n for n in cluster_nodes if n.shard == 1)
    try:
        for node in (first, second):
            with node_client(cluster_target, node) as client:
                client.execute(f"CREATE DATABASE {database}")
                client.execute(
                    f"CREATE TABLE {database}.events (id UInt64, what String) "
                    f"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{{cluster}}/{{shard}}/{database}/events', "
                    "'{replica}') ORDER BY id"
                )
        with node_client(cluster_target, first) as client:
            client.execute(f"INSERT INTO {database}.events (id, what) VALUES", [(7, "from-first")])
        with node_client(cluster_target, second) as client:
            client.execute(f"SYSTEM SYNC REPLICA {database}.events")
            assert client.execute(f"SELECT id, what FROM {database}.events") == [(7, "from-first")]
            replicas = client.execute(
                f"SELECT total_replicas, active_replicas FROM system.replicas WHERE database = '{database}'"
            )
            assert replicas == [(2, 2)]
    finally:
        for node in cluster_nodes:
            with node_client(cluster_target, node) as client:
                client.execute(f"DROP DATABASE IF EXISTS {database}")


def test_stop_node_and_start_node_restart_one_replica(
    cluster_target: ClusterTarget, cluster_nodes: list[ClusterNode]
) -> None:
    by_name = {macros(cluster_target, node)["replica"]: node for node in cluster_nodes}
    victim = by_name["s2r2"]
    entry = by_name["s1r1"]
    try:
        stopped = run_script("stop-node", "s2r2")
        assert stopped.returncode == 0, stopped.stderr
        assert not answers(cluster_target, victim)
        # The other replica of shard 02 serves the cluster-wide query alone.
        with node_client(cluster_target, entry) as client:
            rows = client.execute(f"SELECT count() FROM cluster('{cluster_target.cluster}', system.one)")
            assert rows == [(2,)]
        status = run_script("status")
        assert status.returncode != 0
        assert "s2r2: stopped" in status.stdout
        started = run_script("start-node", "s2r2")
        assert started.returncode == 0, started.stderr
        assert answers(cluster_target, victim)
    finally:
        if not answers(cluster_target, victim):
            run_script("start-node", "s2r2")
    assert run_script("status").returncode == 0
