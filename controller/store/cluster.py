"""A ClickHouse cluster as a store: clickhouse://user:pass@host:port/db?cluster=NAME.

ClusterStore talks to the URL's node (the query node) like ClickHouseStore does: there the
code's table names are Distributed tables over the sharded tables (telemetry, its rollup,
the ingest ledger) or tables replicated to every node (controller state, ingest
bookkeeping), so every query, report and explain runs unchanged (cluster_schema.py says
which is which).  Distributed reads prefer each shard's first replica (load_balancing =
in_order), the one the loader writes to, and fail when a shard has no replica answering
(skip_unavailable_shards stays 0): a read never silently misses a shard.  An insert into a
Distributed table returns once every shard has its rows (insert_distributed_sync).

On top of the Store interface:
  topology()       the cluster's shards and replicas, from the query node's system.clusters;
  shard_stores()   one store per shard (ShardStore: its replicas in order, with fail-over)
                   whose default database is the shard database, so a query there reads
                   that shard's own rows; the loader inserts each shard's rows through it;
  node_store()     one node, for schema changes (controller/store/migrate.py);
  check_shards()   StoreUnavailable naming every shard with no replica answering.
A failed query on the query node is re-checked the same way, so its error names the
missing shard instead of a bare connection failure.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from controller.store.base import BulkColumn, Column, DataTable, Store
from controller.store.clickhouse import ClickHouseStore
from controller.store.sql import Version, query, render
from controller.store.topology import Replica, Shard, Topology, shard_database, topology_from_rows
from controller.store.url import StoreURL, check_identifier
from dyncc_common.errors import StoreContentError, StoreError, StoreUnavailable

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ClusterStore", "ShardStore"]

log = logging.getLogger("dyncc.store")
T = TypeVar("T")
#: settings of every query on the query node (see the module docstring)
READ_SETTINGS = {"load_balancing": "in_order", "skip_unavailable_shards": 0, "insert_distributed_sync": 1}
#: seconds to wait for a replica's answer when checking which shards answer
PROBE_TIMEOUT = 3.0


class ClusterStore(ClickHouseStore):
    """The query node of a cluster, plus its shards (see the module docstring)."""

    def __init__(self, url: StoreURL) -> None:
        super().__init__(url, server_settings=READ_SETTINGS)
        self.cluster = str(url.cluster)
        self._topology: Topology | None = None
        self._shards: list[ShardStore] | None = None

    def topology(self) -> Topology:
        if self._topology is None:
            sql = render(query("store_cluster_topology"), {"cluster": self.cluster})
            # the admin connection: the URL's database may not exist yet (schema apply creates it)
            rows = super()._run(self._admin.execute, sql, settings={"use_numpy": False})
            try:
                self._topology = topology_from_rows(self.cluster, rows)
            except ValueError as exc:
                raise StoreError(f"{exc} ({self.url.redacted()})") from exc
        return self._topology

    def node_url(self, replica: Replica, database: str) -> StoreURL:
        # one node exactly: a schema step must not land on an alternative host
        return dataclasses.replace(
            self.url, host=replica.host, port=replica.port, database=database, cluster=None, alt_hosts=""
        )

    def node_store(self, replica: Replica, database: str) -> ClickHouseStore:
        """A plain store on one node with `database` as default (the caller closes it)."""
        return ClickHouseStore(self.node_url(replica, database))

    def shard_stores(self) -> list[Store]:
        if self._shards is None:
            db = shard_database(self.database)
            self._shards = [
                ShardStore(self.cluster, shard, [self.node_url(r, db) for r in shard.replicas])
                for shard in self.topology().shards
            ]
        return list(self._shards)

    def drop_database(self) -> None:
        """Drop the URL's database and its shard database on every node."""
        for replica in self.topology().nodes():
            for database in (self.database, shard_database(self.database)):
                node = self.node_store(replica, database)
                try:
                    node.drop_database()
                finally:
                    node.close()

    def shard_weights(self) -> tuple[int, ...]:
        return self.topology().weights

    def missing_shards(self) -> list[tuple[Shard, str]]:
        """Shards none of whose replicas answers, with the last reason."""
        missing = []
        for shard in self.topology().shards:
            reason = ""
            for replica in shard.replicas:
                url = self.node_url(replica, "default")
                probe = dataclasses.replace(url, connect_timeout=PROBE_TIMEOUT)
                store = ClickHouseStore(probe)
                try:
                    store.version()
                    reason = ""
                    break
                except StoreError as exc:
                    reason = str(exc)
                finally:
                    store.close()
            if reason:
                missing.append((shard, reason))
        return missing

    def check_shards(self) -> None:
        missing = self.missing_shards()
        if missing:
            raise StoreUnavailable(_missing_message(self.cluster, missing))

    def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._run(fn, *args, **kwargs)
        except StoreContentError:
            raise
        except StoreError as exc:
            try:  # also when this was the first query (the topology is read here then)
                missing = self.missing_shards()
            except StoreError:
                raise exc from None
            if missing:
                raise StoreUnavailable(f"{_missing_message(self.cluster, missing)} [{exc}]") from exc
            raise

    def close(self) -> None:
        for shard in self._shards or []:
            shard.close()
        self._shards = None
        super().close()


def _missing_message(cluster: str, missing: list[tuple[Shard, str]]) -> str:
    parts = "; ".join(f"{shard.describe()}: {reason}" for shard, reason in missing)
    return f"cluster {cluster}: no replica answers for {parts}"


class ShardStore(Store):
    """One shard: its replicas in order; an operation goes to the current replica and, when it
    is unreachable, to the next (which stays current).  Replicated tables deduplicate a
    block inserted again, so retrying an insert on another replica cannot load it twice."""

    def __init__(self, cluster: str, shard: Shard, urls: list[StoreURL]) -> None:
        self.cluster = cluster
        self.shard = shard
        self.url = urls[0]
        self._urls = urls
        self._stores: dict[int, ClickHouseStore] = {}
        self._current = 0

    def _store(self, index: int) -> ClickHouseStore:
        if index not in self._stores:
            self._stores[index] = ClickHouseStore(self._urls[index])
        return self._stores[index]

    def _call(self, op: Callable[[ClickHouseStore], T]) -> T:
        reasons = []
        for step in range(len(self._urls)):
            index = (self._current + step) % len(self._urls)
            try:
                result = op(self._store(index))
            except StoreUnavailable as exc:
                reasons.append(str(exc))
                continue
            if index != self._current:
                log.warning(
                    "cluster %s %s: now using replica %s:%d",
                    self.cluster,
                    self.shard.describe(),
                    self._urls[index].host,
                    self._urls[index].port,
                )
                self._current = index
            return result
        raise StoreUnavailable(
            f"cluster {self.cluster}: no replica answers for {self.shard.describe()}: {' | '.join(reasons)}"
        )

    def version(self) -> Version:
        return self._call(lambda s: s.version())

    def sync_replicas(self, table: str) -> None:
        """SYSTEM SYNC REPLICA on the shard's other replicas: the query node's Distributed reads
        prefer the first replica, but one with recent errors goes after the others, while this
        store keeps writing to its current one; a read right after a write must not miss it."""
        check_identifier(table)
        for index in range(len(self._urls)):
            if index == self._current:
                continue
            try:
                self._store(index).execute(f"SYSTEM SYNC REPLICA {table}")
            except StoreUnavailable as exc:
                log.debug("cluster %s %s: replica %d not synced: %s", self.cluster, self.shard.describe(), index, exc)

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._call(lambda s: s.execute(sql, params))

    def query_rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return self._call(lambda s: s.query_rows(sql, params))

    def query_df(self, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
        return self._call(lambda s: s.query_df(sql, params))

    def query_rows_with(
        self, sql: str, data: DataTable, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        return self._call(lambda s: s.query_rows_with(sql, data, params))

    def insert_columns(self, table: str, columns: Mapping[str, Column]) -> int:
        return self._call(lambda s: s.insert_columns(table, columns))

    def bulk_insert(self, table: str, columns: Mapping[str, BulkColumn], rows: int, block: Any = None) -> None:
        self._call(lambda s: s.bulk_insert(table, columns, rows, block))

    def ensure_database(self) -> None:
        self._call(lambda s: s.ensure_database())

    def database_exists(self) -> bool:
        return bool(self._call(lambda s: s.database_exists()))

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
