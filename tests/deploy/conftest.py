"""The real ClickHouse cluster of deploy/cluster.sh, named by DYNCC_TEST_CLUSTER.

DYNCC_TEST_CLUSTER=clickhouse://default:@127.0.0.1:19101/default?cluster=dyncc names one node
(the entry point) and the cluster; the other nodes are the ones the entry node's system.clusters
lists.  `make test` starts the cluster and sets the variable; tests using these fixtures are
skipped only when it is unset (a set variable with no cluster behind it fails them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from clickhouse_driver import Client


@dataclass(frozen=True)
class ClusterTarget:
    """Where the cluster is entered, with which credentials, and its name in remote_servers."""

    host: str
    port: int
    user: str
    password: str
    cluster: str


@dataclass(frozen=True)
class ClusterNode:
    """One row of system.clusters: a server of the cluster."""

    shard: int
    replica: int
    host: str
    port: int


def parse_cluster_url(url: str) -> ClusterTarget:
    """clickhouse://user:password@host:port/database?cluster=NAME -> ClusterTarget."""
    parts = urlsplit(url)
    if parts.scheme != "clickhouse" or not parts.hostname:
        raise ValueError(f"not a clickhouse:// URL with a host: {url!r}")
    cluster = parse_qs(parts.query).get("cluster", [""])[0]
    if not cluster:
        raise ValueError(f"no ?cluster= in {url!r}")
    return ClusterTarget(
        host=parts.hostname,
        port=parts.port or 9000,
        user=unquote(parts.username or "default"),
        password=unquote(parts.password or ""),
        cluster=cluster,
    )


def connect(target: ClusterTarget, host: str, port: int) -> Client:
    return Client(
        host=host,
        port=port,
        user=target.user,
        password=target.password,
        database="default",
        connect_timeout=5,
        send_receive_timeout=60,
    )


def cluster_rows(client: Client, cluster: str) -> list[ClusterNode]:
    rows = client.execute(
        "SELECT shard_num, replica_num, host_name, port FROM system.clusters WHERE cluster = %(c)s"
        " ORDER BY shard_num, replica_num",
        {"c": cluster},
    )
    return [ClusterNode(int(s), int(r), str(h), int(p)) for s, r, h, p in rows]


@pytest.fixture(scope="session")
def cluster_target() -> ClusterTarget:
    url = os.environ.get("DYNCC_TEST_CLUSTER")
    if not url:
        pytest.skip("DYNCC_TEST_CLUSTER is not set (start the cluster: bash deploy/cluster.sh up)")
    return parse_cluster_url(url)


@pytest.fixture
def cluster_nodes(cluster_target: ClusterTarget) -> list[ClusterNode]:
    """The servers of the cluster as the entry node's system.clusters lists them."""
    client = connect(cluster_target, cluster_target.host, cluster_target.port)
    try:
        return cluster_rows(client, cluster_target.cluster)
    finally:
        client.disconnect()
