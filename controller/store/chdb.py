"""The embedded chDB back end of the store (ClickHouse in-process; one directory per process).

chDB, pandas and pyarrow are imported lazily (chDB's library is large and slow to load cold);
errors are classified from chDB's "Code: N." messages like the server's codes."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.store.base import (
    DATA,
    BulkColumn,
    Column,
    DataTable,
    Store,
    data_columns,
    one_line,
    row_count,
)
from controller.store.clickhouse import as_fixed_bytes
from controller.store.columns import StrColumn
from controller.store.errors import classify, error_code
from controller.store.sql import Version, parse_version, query, render
from controller.store.url import StoreURL, check_identifier
from dyncc_common.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd


def chdb_error(exc: BaseException, what: str = "chDB error") -> StoreError:
    """The classified StoreError for an exception from chDB ("Code: N. DB::Exception: ...")."""
    text = str(exc)
    reason = one_line(text) or type(exc).__name__
    return classify(error_code(text), text)(f"{what}: {reason}")


class ChdbStore(Store):
    """chDB: ClickHouse inside this process.  One directory per process (a chDB limit)."""

    _session: Any = None
    _session_path: str | None = None
    _class_lock = threading.Lock()

    def __init__(self, url: StoreURL, *, create: bool = True) -> None:
        """create=False: the URL's database is not created (a read-only command; see database_exists)."""
        self.url = url
        self._lock = ChdbStore._class_lock
        with self._lock:
            if ChdbStore._session is None:
                try:
                    from chdb import session as chdb_session

                    ChdbStore._session = chdb_session.Session(url.path)
                except Exception as exc:  # chdb raises plain Exceptions
                    raise chdb_error(exc, f"cannot open chDB at {url.path}") from exc
                ChdbStore._session_path = url.path
            elif ChdbStore._session_path != url.path:
                raise StoreError(
                    f"chDB is already open at {ChdbStore._session_path} in this process; cannot also open {url.path}"
                )
        self._version: Version | None = None
        if create:
            self.ensure_database()

    def _query(self, sql: str, fmt: str = "CSV") -> Any:
        with self._lock:
            try:
                ChdbStore._session.query(f"USE {self.database}")
                return ChdbStore._session.query(sql, fmt)
            except Exception as exc:
                raise chdb_error(exc) from exc

    def version(self) -> Version:
        if self._version is None:
            df = self._query("SELECT version() AS v", "DataFrame")
            self._version = parse_version(str(df["v"].iloc[0]))
        return self._version

    def ensure_database(self) -> None:
        with self._lock:
            try:
                ChdbStore._session.query(f"CREATE DATABASE IF NOT EXISTS {check_identifier(self.database)}")
            except Exception as exc:
                raise chdb_error(exc) from exc

    def database_exists(self) -> bool:
        sql = render(query("store_database_exists"), {"database": self.database})
        with self._lock:  # no USE first: the database may not exist
            try:
                text = str(ChdbStore._session.query(sql, "CSV"))
            except Exception as exc:
                raise chdb_error(exc) from exc
        return text.strip() not in ("", "0")

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._query(render(sql, params))

    def query_df(self, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
        import pandas as pd

        result = self._query(render(sql, params), "DataFrame")
        return result if isinstance(result, pd.DataFrame) else pd.DataFrame(result)

    def query_rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        df = self.query_df(sql, params)
        return [tuple(row) for row in df.itertuples(index=False, name=None)]

    def query_rows_with(
        self, sql: str, data: DataTable, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        import pandas as pd
        import pyarrow as pa

        structure, columns = data_columns(data)
        arrow = {
            "String": pa.string(),
            "UInt8": pa.uint8(),
            "UInt16": pa.uint16(),
            "UInt32": pa.uint32(),
            "UInt64": pa.uint64(),
            "Int32": pa.int32(),
            "Int64": pa.int64(),
        }
        _dyncc_data = pa.table(  # read by name by chDB's Python() table function
            {
                name: pa.array(values, type=arrow[ch_type])
                for (name, ch_type), values in zip(structure, columns, strict=True)
            }
        )
        rendered = render(sql.replace(DATA, "Python(_dyncc_data)"), params)
        with self._lock:
            try:
                ChdbStore._session.query(f"USE {self.database}")
                result = ChdbStore._session.query(rendered, "DataFrame")
            except Exception as exc:
                raise chdb_error(exc) from exc
        df = result if isinstance(result, pd.DataFrame) else pd.DataFrame(result)
        return [tuple(row) for row in df.itertuples(index=False, name=None)]

    def insert_columns(self, table: str, columns: Mapping[str, Column]) -> int:
        rows = row_count(columns)
        if rows == 0:
            return 0
        self._insert_arrow(table, columns, rows)
        return rows

    def bulk_insert(self, table: str, columns: Mapping[str, BulkColumn], rows: int, block: Any = None) -> None:
        """One INSERT of the columns as an Arrow table; a StrColumn goes as a dictionary array
        (codes and distinct values: no Python object per row), numbers without a copy."""
        if rows:
            self._insert_arrow(table, columns, rows)

    def _insert_arrow(self, table: str, columns: Mapping[str, Column | StrColumn], rows: int) -> None:
        import pyarrow as pa

        arrays = {}
        for name, col in columns.items():
            check_identifier(name)
            if isinstance(col, StrColumn):
                codes = pa.array(np.ascontiguousarray(col.codes, dtype=np.int32))
                arrays[name] = pa.DictionaryArray.from_arrays(codes, pa.array(col.values or [""], pa.string()))
            elif isinstance(col, np.ndarray) and (col.dtype.kind == "S" or col.ndim == 2):
                fixed = np.ascontiguousarray(as_fixed_bytes(col))
                width = fixed.dtype.itemsize
                buf = pa.py_buffer(fixed.view(np.uint8).reshape(-1))
                arrays[name] = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), rows, [None, buf])
            else:
                arr = pa.array(col)
                if pa.types.is_list(arr.type) and pa.types.is_null(arr.type.value_type):
                    arr = arr.cast(pa.list_(pa.string()))  # all-empty Array(String) column
                arrays[name] = arr
        _dyncc_insert = pa.table(arrays)  # read by name by chDB's Python() table function
        names = ", ".join(columns)
        with self._lock:
            try:
                ChdbStore._session.query(f"USE {self.database}")
                ChdbStore._session.query(
                    f"INSERT INTO {check_identifier(table)} ({names}) SELECT * FROM Python(_dyncc_insert)"
                )
            except Exception as exc:
                raise chdb_error(exc, f"chDB insert into {table}") from exc
