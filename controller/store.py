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
server version (which picks the DDL features, see controller/sql_template.py).

Failures raise StoreError with a one-line reason, classified the same way on
both back ends (controller/store_errors.py): StoreUnavailable (connection,
timeout, overload: retry later), StoreContentError (the data was refused:
retrying it unchanged fails again), plain StoreError otherwise.
chDB is imported lazily (its library is large and slow to load cold).
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from controller import sql_params
from controller.sql_template import Version, parse_version
from controller.store_errors import StoreContentError, StoreError, StoreUnavailable, classify, error_code

if TYPE_CHECKING:
    import pandas as pd

Column = np.ndarray | Sequence[Any]
#: column name -> (ClickHouse type, values): a table sent along with a query (query_rows_with)
DataTable = Mapping[str, tuple[str, Column]]

__all__ = [
    "ChdbStore",
    "ClickHouseStore",
    "Column",
    "DataTable",
    "Store",
    "StoreContentError",
    "StoreError",
    "StoreURL",
    "StoreUnavailable",
    "open_store",
    "parse_store_url",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: where a query_rows_with() statement reads its data table
DATA = "{{data}}"
_DATA_TYPES = ("String", "UInt8", "UInt16", "UInt32", "UInt64", "Int32", "Int64")
#: a reason longer than this is cut (a refused statement can be quoted back at length)
MAX_REASON = 400


@dataclass(frozen=True)
class StoreURL:
    scheme: str
    host: str
    port: int
    user: str
    password: str
    database: str
    path: str
    options: dict[str, str]

    def redacted(self) -> str:
        if self.scheme == "chdb":
            return f"chdb://{self.path}?database={self.database}"
        auth = f"{self.user}@" if self.user else ""
        return f"clickhouse://{auth}{self.host}:{self.port}/{self.database}"


def parse_store_url(url: str) -> StoreURL:
    """Parse and validate a store URL; raise StoreError with the reason."""
    parts = urllib.parse.urlsplit(url)
    options = dict(urllib.parse.parse_qsl(parts.query))
    if parts.scheme == "clickhouse":
        if not parts.hostname:
            raise StoreError(f"store URL {url!r} has no host (clickhouse://user:pass@host:port/db)")
        try:
            port = parts.port or 9000
        except ValueError as exc:
            raise StoreError(f"store URL {url!r}: bad port") from exc
        database = parts.path.lstrip("/") or "default"
        if not _IDENT.match(database):
            raise StoreError(f"store URL {url!r}: bad database name {database!r}")
        return StoreURL(
            "clickhouse",
            parts.hostname,
            port,
            urllib.parse.unquote(parts.username or "default"),
            urllib.parse.unquote(parts.password or ""),
            database,
            "",
            options,
        )
    if parts.scheme == "chdb":
        path = urllib.parse.unquote(parts.netloc + parts.path)
        if not path:
            raise StoreError(f"store URL {url!r} has no directory (chdb:///path/dir)")
        database = options.get("database", "dyncc")
        if not _IDENT.match(database):
            raise StoreError(f"store URL {url!r}: bad database name {database!r}")
        return StoreURL("chdb", "", 0, "", "", database, path, options)
    raise StoreError(
        f"unsupported store URL scheme {parts.scheme + '://' if parts.scheme else url!r}: "
        "use clickhouse://user:pass@host:port/db or chdb:///path/dir"
    )


def check_identifier(name: str) -> str:
    if not _IDENT.match(name):
        raise StoreError(f"bad identifier {name!r}")
    return name


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

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _row_count(columns: Mapping[str, Column]) -> int:
    lengths = {name: len(col) for name, col in columns.items()}
    if not lengths:
        raise StoreError("insert with no columns")
    if len(set(lengths.values())) != 1:
        raise StoreError(f"insert columns of unequal length: {lengths}")
    return next(iter(lengths.values()))


def _data_columns(data: DataTable) -> tuple[list[tuple[str, str]], list[list[Any]]]:
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


def _one_line(text: str) -> str:
    """The first non-empty line of `text`, at most MAX_REASON characters."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 3] + "..."


def clickhouse_error(exc: BaseException, url: StoreURL) -> StoreError:
    """The classified StoreError for an exception from clickhouse-driver (or the socket under it)."""
    from clickhouse_driver import errors as ch_errors

    where = f"ClickHouse {url.host}:{url.port}"
    if isinstance(exc, ch_errors.ServerException):
        code = int(exc.code) if exc.code is not None else None
        message = str(exc.message or "")
        reason = _one_line(message.removeprefix("DB::Exception: ")) or repr(exc)
        return classify(code, message)(f"ClickHouse error {code}: {reason}")
    if isinstance(exc, ch_errors.NetworkError | ch_errors.SocketTimeoutError | OSError | EOFError):
        text = _one_line(str(getattr(exc, "message", None) or exc)) or type(exc).__name__
        return StoreUnavailable(f"{where} unreachable: {text}")
    return StoreError(f"ClickHouse client error: {_one_line(str(exc)) or type(exc).__name__}")


def chdb_error(exc: BaseException, what: str = "chDB error") -> StoreError:
    """The classified StoreError for an exception from chDB ("Code: N. DB::Exception: ...")."""
    text = str(exc)
    reason = _one_line(text) or type(exc).__name__
    return classify(error_code(text), text)(f"{what}: {reason}")


def _as_fixed_bytes(col: np.ndarray) -> np.ndarray:
    """uint8 (rows, N) -> 'S<N>' view; other arrays unchanged."""
    if col.ndim == 2 and col.dtype == np.uint8:
        return np.ascontiguousarray(col).view(f"S{col.shape[1]}").reshape(-1)
    return col


class ClickHouseStore(Store):
    """ClickHouse server over the native protocol (clickhouse-driver)."""

    def __init__(self, url: StoreURL) -> None:
        from clickhouse_driver import Client

        # The driver logs every failed connect with a traceback; StoreError carries the reason.
        logging.getLogger("clickhouse_driver").setLevel(logging.CRITICAL)
        self.url = url
        self._lock = threading.Lock()
        common: dict[str, Any] = {
            "host": url.host,
            "port": url.port,
            "user": url.user,
            "password": url.password,
            "connect_timeout": float(url.options.get("connect_timeout", 5)),
            "send_receive_timeout": float(url.options.get("timeout", 300)),
            "settings": {"use_numpy": True},
        }
        self._client = Client(database=url.database, **common)
        self._admin = Client(database="default", **common)
        self._version: Version | None = None

    def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from clickhouse_driver import errors as ch_errors

        with self._lock:
            try:
                return fn(*args, **kwargs)
            except (ch_errors.Error, OSError, EOFError) as exc:
                raise clickhouse_error(exc, self.url) from exc

    def version(self) -> Version:
        if self._version is None:
            rows = self._run(self._admin.execute, "SELECT version()")
            self._version = parse_version(str(rows[0][0]))
        return self._version

    def ensure_database(self) -> None:
        self._run(self._admin.execute, f"CREATE DATABASE IF NOT EXISTS {check_identifier(self.database)}")

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._run(self._client.execute, sql_params.render(sql, params))

    def query_rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        rows = self._run(self._client.execute, sql_params.render(sql, params), settings={"use_numpy": False})
        return [tuple(r) for r in rows]

    def query_rows_with(
        self, sql: str, data: DataTable, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        structure, columns = _data_columns(data)
        table = {"name": "_dyncc_data", "structure": structure, "data": list(zip(*columns, strict=True))}
        rendered = sql_params.render(sql.replace(DATA, "_dyncc_data"), params)
        rows = self._run(self._client.execute, rendered, external_tables=[table], settings={"use_numpy": False})
        return [tuple(r) for r in rows]

    def query_df(self, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
        import pandas as pd

        rendered = sql_params.render(sql, params)
        rows, types = self._run(
            self._client.execute,
            rendered,
            with_column_types=True,
            columnar=True,
            settings={"use_numpy": True},
        )
        names = [name for name, _ in types]
        if not rows:
            return pd.DataFrame({name: [] for name in names})
        return pd.DataFrame({name: col for name, col in zip(names, rows, strict=True)})

    def insert_columns(self, table: str, columns: Mapping[str, Column]) -> int:
        rows = _row_count(columns)
        if rows == 0:
            return 0
        names = ", ".join(check_identifier(c) for c in columns)
        data = [
            _as_fixed_bytes(col) if isinstance(col, np.ndarray) else np.asarray(col, dtype=object)
            for col in columns.values()
        ]
        self._run(
            self._client.execute,
            f"INSERT INTO {check_identifier(table)} ({names}) VALUES",
            data,
            columnar=True,
            types_check=False,
        )
        return rows

    def close(self) -> None:
        self._client.disconnect()
        self._admin.disconnect()


class ChdbStore(Store):
    """chDB: ClickHouse inside this process.  One directory per process (a chDB limit)."""

    _session: Any = None
    _session_path: str | None = None
    _class_lock = threading.Lock()

    def __init__(self, url: StoreURL) -> None:
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

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._query(sql_params.render(sql, params))

    def query_df(self, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
        import pandas as pd

        result = self._query(sql_params.render(sql, params), "DataFrame")
        return result if isinstance(result, pd.DataFrame) else pd.DataFrame(result)

    def query_rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        df = self.query_df(sql, params)
        return [tuple(row) for row in df.itertuples(index=False, name=None)]

    def query_rows_with(
        self, sql: str, data: DataTable, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        import pandas as pd
        import pyarrow as pa

        structure, columns = _data_columns(data)
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
        rendered = sql_params.render(sql.replace(DATA, "Python(_dyncc_data)"), params)
        with self._lock:
            try:
                ChdbStore._session.query(f"USE {self.database}")
                result = ChdbStore._session.query(rendered, "DataFrame")
            except Exception as exc:
                raise chdb_error(exc) from exc
        df = result if isinstance(result, pd.DataFrame) else pd.DataFrame(result)
        return [tuple(row) for row in df.itertuples(index=False, name=None)]

    def insert_columns(self, table: str, columns: Mapping[str, Column]) -> int:
        import pyarrow as pa

        rows = _row_count(columns)
        if rows == 0:
            return 0
        arrays = {}
        for name, col in columns.items():
            check_identifier(name)
            if isinstance(col, np.ndarray) and (col.dtype.kind == "S" or col.ndim == 2):
                fixed = _as_fixed_bytes(col)
                width = fixed.dtype.itemsize
                buf = pa.py_buffer(np.ascontiguousarray(fixed).tobytes())
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
        return rows


def open_store(url: str) -> Store:
    """Open the store named by `url` (see the module docstring)."""
    parsed = parse_store_url(url)
    if parsed.scheme == "clickhouse":
        return ClickHouseStore(parsed)
    return ChdbStore(parsed)
