"""The ClickHouse server back end of the store (clickhouse-driver, native protocol).

Errors are classified by their server code (controller/store/errors.py, classify); clickhouse-driver is
imported when a store is opened, not at module import.

Memory (docs/performance.md, "Loader memory"): the statements, row queries and bulk inserts
go over connections without the driver's use_numpy, which would import pandas and pyarrow
(~65 MB resident); only query_df and insert_columns (numpy columns through the driver) open a
numpy connection, when first used.  And the driver's table of every Date from 1900 to 2299
(~25 MB, built when it is imported) is filled on use instead (DATE_LUT_ENV)."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.store.base import DATA, BulkColumn, Column, DataTable, Store, data_columns, one_line, row_count
from controller.store.columns import BlockColumns, plain_columns
from controller.store.errors import classify
from controller.store.sql import Version, parse_version, query, render
from controller.store.url import StoreURL, check_identifier
from dyncc_common.errors import StoreError, StoreUnavailable

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("dyncc.store")

#: clickhouse-driver's switch (so spelled) for a Date table filled on use: set before it is imported
#: (a value without a usable range leaves the table empty at import; every Date converts the same)
DATE_LUT_ENV = "CLICKHOUSE_DRIVER_LASY_DATE_LUT"
os.environ.setdefault(DATE_LUT_ENV, "1970-01-01:1970-01-01")

#: how long a failed INSERT waits for the server to be done with it (await_insert_end), and how often it asks
INSERT_END_TIMEOUT = 30.0
INSERT_END_POLL = 0.05


def clickhouse_error(exc: BaseException, url: StoreURL) -> StoreError:
    """The classified StoreError for an exception from clickhouse-driver (or the socket under it)."""
    from clickhouse_driver import errors as ch_errors

    where = f"ClickHouse {url.host}:{url.port}"
    if isinstance(exc, ch_errors.ServerException):
        code = int(exc.code) if exc.code is not None else None
        message = str(exc.message or "")
        reason = one_line(message.removeprefix("DB::Exception: ")).removesuffix(" Stack trace:") or repr(exc)
        return classify(code, message)(f"ClickHouse error {code}: {reason}")
    if isinstance(exc, ch_errors.NetworkError | ch_errors.SocketTimeoutError | OSError | EOFError):
        text = one_line(str(getattr(exc, "message", None) or exc)) or type(exc).__name__
        tls = tls_error(text, url)
        if tls:  # configuration, not an outage: the same connect fails again
            return StoreError(f"{where}: {tls}")
        if not url.secure and ("reset by peer" in text or "Unexpected EOF" in text):
            text += " (if that port speaks TLS, add secure=1 to the store URL)"
        return StoreUnavailable(f"{where} unreachable: {text}")
    return StoreError(f"ClickHouse client error: {one_line(str(exc)) or type(exc).__name__}")


def tls_error(text: str, url: StoreURL) -> str:
    """The reason for a TLS handshake that cannot succeed as configured, or "" (`text`: the driver's error)."""
    if "CERTIFICATE_VERIFY_FAILED" in text:
        detail = text.partition("certificate verify failed:")[2].partition("(")[0].strip() or "not trusted"
        if "expired" in detail or "not yet valid" in detail:  # OpenSSL's reason: trusted, but out of date
            return f"TLS: the server's certificate is out of its validity period ({detail}): renew it on the server"
        given = url.ca_certs
        hint = f"did ca_certs={given} sign it?" if given else "give its CA with ca_certs=FILE"
        return f"TLS: the server's certificate is not trusted ({detail}): {hint}"
    if "WRONG_VERSION_NUMBER" in text or "UNKNOWN_PROTOCOL" in text or "record layer failure" in text:
        return "TLS handshake failed: the port does not speak TLS (use the server's tcp_port_secure, or drop secure=1)"
    return ""


def as_fixed_bytes(col: np.ndarray) -> np.ndarray:
    """uint8 (rows, N) -> 'S<N>' view; other arrays unchanged."""
    if col.ndim == 2 and col.dtype == np.uint8:
        return np.ascontiguousarray(col).view(f"S{col.shape[1]}").reshape(-1)
    return col


class ClickHouseStore(Store):
    """ClickHouse server over the native protocol (clickhouse-driver)."""

    def __init__(self, url: StoreURL, server_settings: Mapping[str, Any] | None = None) -> None:
        from clickhouse_driver import Client

        # The driver logs every failed connect with a traceback; StoreError carries the reason.
        logging.getLogger("clickhouse_driver").setLevel(logging.CRITICAL)
        self.url = url
        self._lock = threading.Lock()
        self._server_settings = dict(server_settings or {})  # the bulk-insert connections' too
        # address, credentials, timeouts, alt_hosts (tried in order when the URL's host does not answer), TLS
        settings = {k: v for k, v in (server_settings or {}).items() if k != "use_numpy"}
        self._common: dict[str, Any] = {**url.connect_args(), "settings": settings}
        self._client = Client(database=url.database, **self._common)
        self._admin = Client(database="default", **self._common)
        self._numpy_client: Any = None  # query_df and insert_columns: made when first used (pandas)
        self._version: Version | None = None
        # Native-protocol connections for bulk inserts, one per concurrent insert (a pipelining
        # writer has several in flight; a driver connection is not shared).
        self._idle: list[Any] = []
        self._connections: list[Any] = []
        self._pool_lock = threading.Lock()
        self._revision: int | None = None
        self._native = True  # False after a SchemaMismatch: the driver's insert from then on
        self._block_ok = True  # False after a pre-serialized block did not match the server

    def _numpy(self) -> Any:
        """The connection whose results and inserts are numpy columns (the driver imports pandas for it)."""
        if self._numpy_client is None:
            from clickhouse_driver import Client

            common = {**self._common, "settings": {"use_numpy": True, **self._common["settings"]}}
            self._numpy_client = Client(database=self.url.database, **common)
        return self._numpy_client

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

    def database_exists(self) -> bool:
        sql = render(query("store_database_exists"), {"database": self.database})
        return bool(int(self._run(self._admin.execute, sql)[0][0]))

    def drop_database(self) -> None:
        """DROP DATABASE IF EXISTS for the URL's database (tests and benchmarks clean up with it)."""
        self._run(self._admin.execute, f"DROP DATABASE IF EXISTS {check_identifier(self.database)}")

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._run(self._client.execute, render(sql, params))

    def query_rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        rows = self._run(self._client.execute, render(sql, params), settings={"use_numpy": False})
        return [tuple(r) for r in rows]

    def query_rows_with(
        self, sql: str, data: DataTable, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        structure, columns = data_columns(data)
        table = {"name": "_dyncc_data", "structure": structure, "data": list(zip(*columns, strict=True))}
        rendered = render(sql.replace(DATA, "_dyncc_data"), params)
        rows = self._run(self._client.execute, rendered, external_tables=[table], settings={"use_numpy": False})
        return [tuple(r) for r in rows]

    def query_df(self, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
        import pandas as pd

        rendered = render(sql, params)
        with self._lock:
            client = self._numpy()
        rows, types = self._run(
            client.execute,
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
        rows = row_count(columns)
        if rows == 0:
            return 0
        names = ", ".join(check_identifier(c) for c in columns)
        data = [
            as_fixed_bytes(col) if isinstance(col, np.ndarray) else np.asarray(col, dtype=object)
            for col in columns.values()
        ]
        with self._lock:
            client = self._numpy()
        self._run(
            client.execute,
            f"INSERT INTO {check_identifier(table)} ({names}) VALUES",
            data,
            columnar=True,
            types_check=False,
        )
        return rows

    # ------------------------------------------------------------ bulk insert (Native)

    def prepare_block(self, columns: Mapping[str, BulkColumn], rows: int, types: Mapping[str, str]) -> Any:
        """A NativeBlock of the rows for the server's protocol revision (probed once), or None."""
        if not self._native or not self._block_ok:
            return None
        from clickhouse_driver import errors as ch_errors

        # lazy: native imports clickhouse-driver (slow: docs/performance.md), kept off `import controller.store`
        from controller.store.native import serialize_block

        if self._revision is None:
            client = self._checkout()
            try:
                self._revision = client.revision()
            except (ch_errors.Error, OSError, EOFError):
                return None  # the insert itself reports the store being down
            finally:
                self._checkin(client)
        return serialize_block(columns, rows, types, self._revision)

    def bulk_insert(self, table: str, columns: Mapping[str, BulkColumn], rows: int, block: Any = None) -> None:
        """The pre-serialized block, else columns serialized per the server's types, else the driver's insert.

        BlockColumns go as one INSERT of their blocks, each made, serialized and sent in turn
        (NativeStream: one block in memory at a time).  A block or column layout the server
        does not expect (SchemaMismatch, found before anything is sent) falls back to the
        next path for good, with one warning.
        """
        if self._native:
            # lazy: native imports clickhouse-driver (slow: docs/performance.md), kept off `import controller.store`
            from controller.store.native import NativeColumns, NativeStream, SchemaMismatch

            if isinstance(columns, BlockColumns):
                data: Any = NativeStream(columns, preserialize=self._block_ok)
            else:
                if block is not None and self._block_ok:
                    try:
                        self._native_insert(table, block, list(columns))
                        return
                    except SchemaMismatch as exc:
                        log.warning("pre-serialized insert not possible (%s); serializing per server types", exc)
                        self._block_ok = False
                data = NativeColumns(columns, rows)
            try:
                self._native_insert(table, data, list(columns))
                return
            except SchemaMismatch as exc:
                log.warning("native insert not possible (%s); using the driver's insert from now on", exc)
                self._native = False
                self._close_pool()
        self.insert_columns(table, plain_columns(columns))

    def _native_insert(self, table: str, data: Any, columns: list[str]) -> None:
        """One INSERT of `data`; when it fails without the server's answer, returns only once
        the server is done with it (await_insert_end), so what it kept is visible to a retry."""
        from clickhouse_driver import errors as ch_errors

        # lazy: native imports clickhouse-driver (slow: docs/performance.md), kept off `import controller.store`
        from controller.store.native import SchemaMismatch

        names = ", ".join(check_identifier(c) for c in columns)
        query_id = f"dyncc-insert-{uuid.uuid4().hex}"
        client = self._checkout()
        try:
            client.execute(f"INSERT INTO {check_identifier(table)} ({names}) VALUES", [data], query_id=query_id)
        except SchemaMismatch:  # found before any data was sent
            raise
        except ch_errors.ServerException as exc:  # the server answered: the INSERT is over
            raise clickhouse_error(exc, self.url) from exc
        except Exception as exc:
            # The connection went away mid-INSERT (the network, or the blocks' source raised and the
            # driver dropped it): the server may still be writing what it received.
            self.await_insert_end(query_id)
            if isinstance(exc, ch_errors.Error | OSError | EOFError):
                raise clickhouse_error(exc, self.url) from exc
            raise
        finally:
            self._checkin(client)

    def await_insert_end(self, query_id: str, timeout: float = INSERT_END_TIMEOUT) -> bool:
        """Wait until the query `query_id` is no longer running on the server; False if it still
        was after `timeout` seconds or the server could not be asked (a restart ends it anyway).

        ClickHouse writes the blocks it kept of an INSERT whose client went away while the query
        is in system.processes; a retry that looked the ledger up before then would load them again.
        """
        deadline = time.monotonic() + timeout
        sql = query("store_insert_running")
        while True:
            try:
                running = bool(self.query_rows(sql, {"query_id": query_id}))
            except StoreError as exc:
                log.warning("could not ask whether the cut INSERT %s is over: %s", query_id, exc)
                return False
            if not running:
                return True
            if time.monotonic() >= deadline:
                log.warning("the cut INSERT %s was still running after %.0f s", query_id, timeout)
                return False
            time.sleep(INSERT_END_POLL)

    def _checkout(self) -> Any:
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        # lazy: native imports clickhouse-driver (slow: docs/performance.md), kept off `import controller.store`
        from controller.store.native import native_client

        client = native_client(self.url, self._server_settings)
        with self._pool_lock:
            self._connections.append(client)
        return client

    def _checkin(self, client: Any) -> None:
        with self._pool_lock:
            if client in self._connections:
                self._idle.append(client)

    def _close_pool(self) -> None:
        with self._pool_lock:
            connections, self._connections, self._idle = self._connections, [], []
        for client in connections:
            client.disconnect()

    def close(self) -> None:
        self._close_pool()
        self._client.disconnect()
        self._admin.disconnect()
        if self._numpy_client is not None:
            self._numpy_client.disconnect()
