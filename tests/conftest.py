"""Shared fixtures: the real ClickHouse server, chDB, the real Kafka broker.

The servers are started by `make test` (deploy/stack.sh) and named by
DYNCC_TEST_CLICKHOUSE (clickhouse://default:@127.0.0.1:19000/default) and
DYNCC_TEST_KAFKA (127.0.0.1:19092).  Every test gets its own database / topic
names so tests never see each other's data.
"""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.store import Store, open_store

CLICKHOUSE_URL = os.environ.get("DYNCC_TEST_CLICKHOUSE", "clickhouse://default:@127.0.0.1:19000/default")
KAFKA_BROKERS = os.environ.get("DYNCC_TEST_KAFKA", "127.0.0.1:19092")


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def clickhouse_url_for(database: str) -> str:
    base = CLICKHOUSE_URL.rsplit("/", 1)[0]
    return f"{base}/{database}"


@pytest.fixture(scope="session")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one chDB directory of this pytest process (chDB allows one per process)."""
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture
def chdb_url(chdb_dir: Path) -> str:
    """A fresh database inside the process's chDB directory.

    ttl=off: tests insert rows with fixed past dates, which chDB's retention TTL
    would delete at insert time (test_contract_schema checks the TTL path).
    """
    return f"chdb://{chdb_dir}?database={unique_name('t')}&ttl=off"


@pytest.fixture
def clickhouse_db_url() -> Iterator[str]:
    """A fresh database on the real ClickHouse server; dropped afterwards."""
    database = unique_name("t")
    url = clickhouse_url_for(database)
    yield url
    store = open_store(url)
    try:
        store.drop_database()  # type: ignore[attr-defined]
    finally:
        store.close()


#: the ClickHouse cluster of deploy/cluster.sh (`make test` starts it and sets this)
CLUSTER_URL = os.environ.get("DYNCC_TEST_CLUSTER", "")


def cluster_url_for(database: str) -> str:
    """The cluster's store URL for `database` (DYNCC_TEST_CLUSTER with its database replaced)."""
    parts = urllib.parse.urlsplit(CLUSTER_URL)
    query = dict(urllib.parse.parse_qsl(parts.query))
    query.setdefault("cluster", "dyncc")
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}", query=urllib.parse.urlencode(query)))


def drop_cluster_database(url: str) -> None:
    """Drop a test database and its shard database on every node of the cluster."""
    store = open_store(url)
    try:
        store.drop_database()  # type: ignore[attr-defined]
    finally:
        store.close()


@pytest.fixture
def cluster_db_url() -> Iterator[str]:
    """A fresh database on the real cluster (2 shards x 2 replicas); dropped on every node afterwards.

    Skipped only when DYNCC_TEST_CLUSTER is unset (`make test` sets it); a set variable with no
    cluster behind it fails the test.
    """
    if not CLUSTER_URL:
        pytest.skip('DYNCC_TEST_CLUSTER is not set (make cluster-up; eval "$(bash deploy/cluster.sh env)")')
    url = cluster_url_for(unique_name("t"))
    yield url
    drop_cluster_database(url)


@pytest.fixture(params=["clickhouse", "chdb"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Runs a test on both back ends: ClickHouse 18.16 and chDB."""
    if request.param == "clickhouse":
        return str(request.getfixturevalue("clickhouse_db_url"))
    return str(request.getfixturevalue("chdb_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An opened store with the schema applied, on both back ends."""
    from controller.store.migrate import apply_migrations

    opened = open_store(store_url)
    apply_migrations(opened)
    yield opened
    opened.close()


@pytest.fixture
def kafka_brokers() -> str:
    return KAFKA_BROKERS


@pytest.fixture
def kafka_topic() -> str:
    return unique_name("topic")
