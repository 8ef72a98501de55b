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


#: How `make test` schedules the suite (tests/run_suite.sh; the marks are set here): the tests
#: marked `serial` run last, one at a time: the lab and the namespace tests (timed on the CPU,
#: fixed namespace names).  Before them, side by side, three pytest runs: the tests of no group on
#: pytest-xdist workers, the `cluster_group` tests one after another (some stop a replica that
#: every other cluster test would see), and the `servers_group` tests one after another (private
#: brokers and servers on fixed ports).
SERIAL_MARKERS = frozenset({"netns"})
SERIAL_PATHS = ("tests/e2e/", "tests/deploy/test_lab_install.py", "tests/deploy/test_deb_install.py")
GROUPS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    # mark: (fixtures or parameters that put a test in the group, paths that do)
    "cluster_group": (
        frozenset({"cluster_db_url", "cluster_target", "cluster_nodes", "cluster"}),
        ("tests/controller/cluster/", "tests/deploy/test_cluster_deploy.py"),
    ),
    "servers_group": (
        frozenset(),
        (
            "tests/collector/telemetry/test_sinks.py",
            "tests/controller/ingest/test_kafka.py",
            "tests/controller/ingest/test_kafka_outages.py",
            "tests/controller/ingest/test_broker_outage.py",
            "tests/controller/ingest/test_access_log.py",
            "tests/deploy/test_alerts.py",
            "tests/controller/ingest/test_kafka_tls.py",
            "tests/controller/store/test_clickhouse_tls.py",
            "tests/dyncc/test_secrets.py",
        ),
    ),
}
REPO_ROOT = Path(__file__).resolve().parent.parent


def _path_of(item: pytest.Item) -> str:
    return Path(str(item.path)).resolve().relative_to(REPO_ROOT).as_posix()


def is_serial(item: pytest.Item) -> bool:
    """Whether `item` must run alone, after the others."""
    if _path_of(item).startswith(SERIAL_PATHS):
        return True
    return any(item.get_closest_marker(m) is not None for m in SERIAL_MARKERS)


def group_of(item: pytest.Item) -> str | None:
    """The mark of the group whose tests run one after another, if `item` is in one."""
    path = _path_of(item)
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        names.update(v for v in callspec.params.values() if isinstance(v, str))
    for group, (keys, paths) in GROUPS.items():
        if path.startswith(paths) or keys & names:
            return group
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_serial(item):
            item.add_marker(pytest.mark.serial)
        elif (group := group_of(item)) is not None:
            item.add_marker(getattr(pytest.mark, group))


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
