"""One store interface for every dyncc component, chosen by URL.

    clickhouse://user:pass@host:port/db   ClickHouse server, native protocol
                                          (clickhouse-driver, numpy columnar inserts)
    chdb:///path/dir[?database=dyncc]     chDB, in-process ClickHouse (embedded default)

Options (query string): connect_timeout=5, timeout=300 (ClickHouse only);
ttl=off creates tables without retention TTLs (for historic replays and tests
with fixed dates; retention applies on servers >= 19.6 and chDB only).

Operations: execute SQL (DDL or DML), insert columns, query to a DataFrame or
to rows, query rows with a table of data sent along (query_rows_with: the
statement names it {{data}}; an external table on the server, chDB's Python()
table function on chDB, so the statement does not grow with the data), and the
server version (which picks the DDL features, see controller/store/sql.py).

Failures raise StoreError with a one-line reason, classified the same way on
both back ends (dyncc_common/errors.py): StoreUnavailable (connection,
timeout, overload: retry later), StoreContentError (the data was refused:
retrying it unchanged fails again), plain StoreError otherwise.
chDB is imported lazily (its library is large and slow to load cold).

Modules: url (StoreURL), base (the Store interface), clickhouse and chdb (the back ends),
native (the Native-protocol insert), sql (the .sql files and their templates), migrate,
pops (known POPs), cli (`dyncc schema`).  This package re-exports the public API.
"""

from __future__ import annotations

from controller.store.base import DATA, Column, DataTable, Store
from controller.store.chdb import ChdbStore
from controller.store.clickhouse import ClickHouseStore
from controller.store.url import StoreURL, check_identifier, parse_store_url
from dyncc_common.errors import StoreContentError, StoreError, StoreUnavailable

__all__ = [
    "DATA",
    "ChdbStore",
    "ClickHouseStore",
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
        return ClickHouseStore(parsed)
    return ChdbStore(parsed)
