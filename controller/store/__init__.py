"""The store: one interface for every dyncc component, chosen by URL
(`clickhouse://…` a ClickHouse server, `chdb:///dir` in-process chDB); the
URL options, operations and error classes are described in base.py.

Modules: url (StoreURL), base (the Store interface), clickhouse and chdb (the back ends),
cluster (a sharded, replicated ClickHouse cluster: `clickhouse://…/db?cluster=NAME`),
topology and cluster_schema (its shape and its schema, pure), native (the Native-protocol
insert), sql (the .sql files and their templates), migrate, pops (known POPs), cli
(`dyncc schema`).  This package re-exports the public API.
"""

from __future__ import annotations

from controller.store.base import DATA, Column, DataTable, Store
from controller.store.chdb import ChdbStore
from controller.store.clickhouse import ClickHouseStore
from controller.store.cluster import ClusterStore
from controller.store.url import StoreURL, check_identifier, parse_store_url
from dyncc_common.errors import StoreContentError, StoreError, StoreUnavailable

__all__ = [
    "DATA",
    "ChdbStore",
    "ClickHouseStore",
    "ClusterStore",
    "Column",
    "DataTable",
    "Store",
    "StoreContentError",
    "StoreError",
    "StoreURL",
    "StoreUnavailable",
    "check_identifier",
    "open_store",
    "parse_store_url",
]


def open_store(url: str) -> Store:
    """Open the store named by `url` (see the module docstring)."""
    parsed = parse_store_url(url)
    if parsed.scheme == "clickhouse":
        return ClusterStore(parsed) if parsed.options.get("cluster") else ClickHouseStore(parsed)
    return ChdbStore(parsed)
