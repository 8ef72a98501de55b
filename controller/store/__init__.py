"""The store: one interface for every dyncc component, chosen by URL
(`clickhouse://…` a ClickHouse server, `chdb:///dir` in-process chDB); the
URL options, operations and error classes are described in base.py.

Modules: url (StoreURL), base (the Store interface), clickhouse and chdb (the back ends),
cluster (a sharded, replicated ClickHouse cluster: `clickhouse://…/db?cluster=NAME`),
topology and cluster_schema (its shape and its schema, pure), native (the Native-protocol
insert), sql (the .sql files and their templates), migrate, pops (known POPs), errors
(ClickHouse error codes -> the store errors), outcomes (the publish-outcome vocabulary and
the round_outcomes writer), cli (`dyncc schema`).  This package re-exports the public API.
"""

from __future__ import annotations

import os

from controller.store.base import Store
from controller.store.chdb import ChdbStore
from controller.store.clickhouse import ClickHouseStore
from controller.store.cluster import ClusterStore
from controller.store.url import parse_store_url
from dyncc_common.errors import StoreContentError, StoreError, StoreUnavailable

# The API other packages import from here (tests/contract/test_architecture.py: each name is
# imported by a test); everything else is imported from its module.
__all__ = [
    "ClickHouseStore",
    "ClusterStore",
    "Store",
    "StoreContentError",
    "StoreError",
    "StoreUnavailable",
    "open_store",
    "parse_store_url",
]


def open_store(url: str, *, existing: bool = False) -> Store:
    """Open the store named by `url` (see the module docstring).

    chDB creates a directory and a database that do not exist (what `dyncc schema apply`
    wants); a command that only reads a store passes `existing=True`: nothing is created, and
    a missing directory or database (on a server too) is a StoreError naming it.
    """
    parsed = parse_store_url(url)
    store: Store
    if parsed.scheme == "clickhouse":
        store = ClusterStore(parsed) if parsed.cluster else ClickHouseStore(parsed)
    else:
        if existing and not os.path.isdir(parsed.path):
            raise StoreError(
                f"no chDB store at {parsed.path}: the directory does not exist (a new store is made by "
                f"'dyncc schema apply --clickhouse chdb://{parsed.path}')"
            )
        store = ChdbStore(parsed, create=not existing)
    if existing:
        try:
            found = store.database_exists()
        except BaseException:
            store.close()
            raise
        if not found:
            store.close()
            where = f"in the chDB store at {parsed.path}" if parsed.scheme == "chdb" else "on the server"
            raise StoreError(
                f"no database {parsed.database} {where}: run 'dyncc schema apply' first "
                f"(with --clickhouse {parsed.redacted()}; it creates the database)"
            )
    return store
