"""The store interface every dyncc component uses (the back ends: clickhouse.py, chdb.py).

    clickhouse://user:pass@host:port/db   ClickHouse server, native protocol
                                          (clickhouse-driver, numpy columnar inserts)
    chdb:///path/dir[?database=dyncc]     chDB, in-process ClickHouse (embedded default)

Options (query string): connect_timeout=5, timeout=300, alt_hosts=host:port,... (servers
tried in turn when the URL's does not answer), cluster=NAME (a ClickHouse cluster:
controller/store/cluster.py) (ClickHouse only);
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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.store.columns import StrColumn, plain_columns
from controller.store.sql import Version, query, splice
from controller.store.url import StoreURL, check_identifier
from dyncc_common.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd

Column = np.ndarray | Sequence[Any]
#: column name -> (ClickHouse type, values): a table sent along with a query (query_rows_with)
DataTable = Mapping[str, tuple[str, Column]]
#: a column of a bulk insert: a numpy array, or a String column as codes into distinct values
BulkColumn = np.ndarray | StrColumn

__all__ = ["DATA", "BulkColumn", "Column", "DataTable", "Store"]

#: where a query_rows_with() statement reads its data table
DATA = "{{data}}"
_DATA_TYPES = ("String", "UInt8", "UInt16", "UInt32", "UInt64", "Int32", "Int64")
#: a reason longer than this is cut (a refused statement can be quoted back at length)
MAX_REASON = 400


class Store(ABC):
    """The operations every component uses; see the module docstring."""

    url: StoreURL

    @property
    def database(self) -> str:
        return self.url.database

    @abstractmethod
    def version(self) -> Version: ...

    @abstractmethod
    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None: ...

    @abstractmethod
    def query_rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...

    @abstractmethod
    def query_df(self, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame: ...

    @abstractmethod
    def query_rows_with(
        self, sql: str, data: DataTable, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Rows of a SELECT that reads `data` (equal-length columns) where `sql` says {{data}}.

        Column types: String, UInt8/16/32/64, Int32/64.  The data travels as
        data, not as SQL text, so the statement is the same size for any number of rows.
        """

    @abstractmethod
    def insert_columns(self, table: str, columns: Mapping[str, Column]) -> int:
        """Insert equal-length columns (numpy arrays or lists) by name; returns rows inserted.

        FixedString(N) columns take a numpy 'S<N>' array or a uint8 array of shape (rows, N).
        """

    @abstractmethod
    def ensure_database(self) -> None:
        """CREATE DATABASE IF NOT EXISTS for the URL's database."""

    def database_exists(self) -> bool:
        """True if the URL's database exists (a read-only command's check: it never creates one)."""
        return bool(int(self.query_rows(query("store_database_exists"), {"database": self.database})[0][0]))

    def prepare_block(self, columns: Mapping[str, BulkColumn], rows: int, types: Mapping[str, str]) -> Any:
        """The rows serialized ahead of bulk_insert (on the calling thread), or None.

        `types` maps each column to its ClickHouse type as the table declares it.  A back
        end without a faster path returns None; bulk_insert then inserts the columns.
        """
        return None

    def bulk_insert(self, table: str, columns: Mapping[str, BulkColumn], rows: int, block: Any = None) -> None:
        """Insert equal-length columns (numpy arrays or StrColumn) as one block; StoreError on failure.

        `block` is prepare_block()'s result for the same columns, if any.  Safe to call from
        several threads at once (the ClickHouse back end keeps one connection per insert).
        """
        self.insert_columns(table, plain_columns(columns))

    def shard_stores(self) -> list[Store]:
        """One store per shard, each reading and writing only its shard's rows; [self] on one server.

        A cluster (controller/store/cluster.py) returns its shards in order; rows go to
        shard shards_for_keys(...)[i] of controller/store/topology.py with shard_weights().
        """
        return [self]

    def shard_weights(self) -> tuple[int, ...]:
        """The weight of each shard of shard_stores(), in the same order."""
        return (1,)

    def sync_replicas(self, table: str) -> None:  # noqa: B027 - optional hook
        """A shard store: wait until the shard's other answering replicas have the rows written
        to `table` through it, so a Distributed read, whichever replica it picks, sees them (a
        replica that does not answer is skipped: no read goes to it).  One server: nothing."""

    def check_shards(self) -> None:  # noqa: B027 - optional hook
        """Raise StoreUnavailable naming every part of the data no server answers for (a cluster's
        shards); one server: nothing to check."""

    def table_exists(self, table: str) -> bool:
        """True if `table` (a checked identifier) exists in the URL's database."""
        sql = splice(query("store_table_exists"), {"table": check_identifier(table)})
        return bool(int(self.query_rows(sql)[0][0]))

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def row_count(columns: Mapping[str, Column]) -> int:
    lengths = {name: len(col) for name, col in columns.items()}
    if not lengths:
        raise StoreError("insert with no columns")
    if len(set(lengths.values())) != 1:
        raise StoreError(f"insert columns of unequal length: {lengths}")
    return next(iter(lengths.values()))


def data_columns(data: DataTable) -> tuple[list[tuple[str, str]], list[list[Any]]]:
    """(structure, columns as Python lists) of a query's data table; StoreError if malformed."""
    if not data:
        raise StoreError("a data table needs at least one column")
    structure = []
    columns = []
    for name, (ch_type, values) in data.items():
        check_identifier(name)
        if ch_type not in _DATA_TYPES:
            raise StoreError(f"data column {name}: type {ch_type!r} not supported")
        structure.append((name, ch_type))
        columns.append(values.tolist() if isinstance(values, np.ndarray) else list(values))
    if len({len(c) for c in columns}) != 1:
        raise StoreError("data columns of unequal length")
    return structure, columns


def one_line(text: str) -> str:
    """The first non-empty line of `text`, at most MAX_REASON characters."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 3] + "..."
