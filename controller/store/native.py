"""Fast columnar INSERT into a ClickHouse server: numpy columns serialized straight to Native blocks.

clickhouse-driver's numpy insert still walks every String value in Python and
copies each numeric column three times; for the ~95-column tcpinfo table that
costs more than the server's own work.  NativeInsertClient is a
clickhouse_driver.Client whose INSERT data may be
  * a NativeBlock: a data packet serialized beforehand (serialize_block: numpy
    little-endian integers, FixedString bytes, Strings from a small table of
    distinct values) for the column types we expect; it is checked against the
    server's sample block and written to the socket in one piece;
  * NativeColumns: the same, serialized for the server's actual column types,
    with the driver's column writers for types we do not handle (e.g.
    LowCardinality on newer servers).  Query sending, the sample
block, errors, end-of-insert and reconnects stay the driver's.  Columns whose
server type is not one of ours (e.g. LowCardinality on newer servers) are
written by the driver's own column writers.

One INSERT sends one data block, or, for a NativeStream (BlockColumns: the
blocks made one at a time while the INSERT is open), several blocks in a row, each
serialized as it is made and freed once sent.  Either way the server writes the
rows of one INSERT as one part per partition (it squashes the blocks of one INSERT
up to min_insert_block_size_rows, about a million rows, before writing), and the
ledger materialized view sees whole batches: each block holds whole batches (see
docs/ingest.md).

The clients never set clickhouse-driver's use_numpy: the driver then imports pandas
(and with it pyarrow), tens of MB that a loader never uses (docs/performance.md,
"Loader memory").  What the Native path does not serialize itself goes through the
driver's plain column writers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from clickhouse_driver import Client
from clickhouse_driver import defines as ch_defines
from clickhouse_driver.block import BlockInfo, ColumnOrientedBlock
from clickhouse_driver.columns.service import write_column
from clickhouse_driver.protocol import ClientPacketTypes
from clickhouse_driver.varint import write_varint
from clickhouse_driver.writer import write_binary_str, write_binary_uint8

from controller.store.columns import BlockColumns, StrColumn, numpy_dtype
from controller.store.url import StoreURL
from dyncc_common.errors import DynccError
from schemas.tcpinfo_encode import encode_varint


def string_payload(col: StrColumn) -> np.ndarray:
    """Native String column (varint length + UTF-8 bytes per row) as a uint8 array.

    Vectorized over rows: the distinct values are laid out once as a padded
    (values, width) byte matrix; rows are gathered by code and, when the
    values differ in length, the padding is masked out.
    """
    entries = [encode_varint(len(e)) + e for e in (v.encode() for v in col.values)] or [b""]
    lens = np.fromiter(map(len, entries), dtype=np.int64, count=len(entries))
    width = int(lens.max())
    table = np.zeros((len(entries), width), dtype=np.uint8)
    for i, e in enumerate(entries):
        table[i, : len(e)] = np.frombuffer(e, dtype=np.uint8)
    codes = np.asarray(col.codes)
    gathered = table.take(codes, axis=0)
    if bool((lens == width).all()):
        return gathered.reshape(-1)
    keep = np.arange(width) < lens[:, None]
    return gathered[keep.take(codes, axis=0)]


def column_payload(ch_type: str, col: np.ndarray | StrColumn) -> np.ndarray | None:
    """The Native payload of one column for `ch_type` as a contiguous array (its bytes, in order),
    or None when this module does not handle the type."""
    if isinstance(col, StrColumn):
        return string_payload(col) if ch_type == "String" else None
    if ch_type == "FixedString(16)":
        arr = np.ascontiguousarray(col)
        if arr.dtype == np.uint8 and arr.ndim == 2 and arr.shape[1] == 16:
            return arr
        if arr.dtype.kind == "S" and arr.dtype.itemsize == 16:
            return arr
        return None
    dtype = numpy_dtype(ch_type)
    if dtype is None or col.ndim != 1 or col.dtype.kind not in "ui":
        return None
    return np.ascontiguousarray(col, dtype=dtype)


def serialize_column(ch_type: str, col: np.ndarray | StrColumn) -> bytes | None:
    """Native bytes of one column for `ch_type`, or None when this module does not handle the type."""
    payload = column_payload(ch_type, col)
    return None if payload is None else payload.tobytes()


def _driver_items(col: np.ndarray | StrColumn) -> Any:
    if isinstance(col, StrColumn):
        return col.to_objects()
    if col.ndim == 2:
        return np.ascontiguousarray(col).view(f"S{col.shape[1]}").reshape(-1)
    return col


class NativeColumns:
    """INSERT data for NativeInsertClient: named columns of equal length."""

    def __init__(self, columns: Mapping[str, np.ndarray | StrColumn], rows: int) -> None:
        self.columns = dict(columns)
        self.rows = rows


class NativeStream:
    """INSERT data for NativeInsertClient: the blocks of BlockColumns, sent as they are made.

    `preserialize`: serialize each block for the column types it declares (BlockColumns.types)
    when they are the server's; else (or without types) per the server's sample block.
    """

    def __init__(self, columns: BlockColumns, preserialize: bool = True) -> None:
        self.columns = columns
        self.preserialize = preserialize


class SchemaMismatch(DynccError):
    """The server table does not have the columns we send."""


class NativeBlock:
    """One complete, pre-serialized Native data packet and the column types it was written for.

    Built on the caller's thread (serialize_block) so the inserting thread only
    writes bytes to the socket (the GIL is released while it sends).  The packet
    is kept as its parts (headers and the columns' own buffers) in order: the
    socket sends each where it lies, with no copy into one packet first.
    """

    def __init__(self, parts: list[memoryview], types: dict[str, str], rows: int) -> None:
        self.parts = parts
        self.types = types
        self.rows = rows


def serialize_block(
    columns: Mapping[str, np.ndarray | StrColumn], rows: int, types: Mapping[str, str], revision: int
) -> NativeBlock | None:
    """The Native data packet for `columns` as `types`; None if a type is not one we serialize."""
    import io

    buf = io.BytesIO()
    write_varint(ClientPacketTypes.DATA, buf)
    if revision >= ch_defines.DBMS_MIN_REVISION_WITH_TEMPORARY_TABLES:
        write_binary_str("", buf)
    if revision >= ch_defines.DBMS_MIN_REVISION_WITH_BLOCK_INFO:
        BlockInfo().write(buf)
    write_varint(len(columns), buf)
    write_varint(rows, buf)
    pieces: list[np.ndarray | bytes] = [buf.getvalue()]
    for name, col in columns.items():
        if len(col) != rows:
            raise ValueError(f"column {name} has {len(col)} rows, block has {rows}")
        payload = column_payload(types[name], col)
        if payload is None:
            return None
        head = io.BytesIO()
        write_binary_str(name, head)
        write_binary_str(types[name], head)
        if revision >= ch_defines.DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION:
            write_binary_uint8(0, head)
        pieces.append(head.getvalue())
        pieces.append(payload)
    # No copy: joining a group's parts into one bytes object, and the driver's buffered writer
    # copying it again, was a visible share of the loader's time (docs/performance.md).
    parts = [
        np.ascontiguousarray(p).reshape(-1).view(np.uint8).data if isinstance(p, np.ndarray) else memoryview(p)
        for p in pieces
    ]
    return NativeBlock(parts, {name: types[name] for name in columns}, rows)


class NativeInsertClient(Client):
    """clickhouse_driver.Client that sends NativeColumns as one pre-serialized block."""

    def revision(self) -> int:
        """The protocol revision agreed with the server (connects if needed)."""
        if self.connection.server_info is None:
            self.execute("SELECT 1")
        return int(self.connection.server_info.used_revision)

    def send_data(self, sample_block: Any, data: Any, types_check: bool = False, columnar: bool = False) -> int:
        if isinstance(data, list) and len(data) == 1 and isinstance(data[0], NativeBlock):
            block: NativeBlock = data[0]
            if dict(sample_block.columns_with_types) != block.types or self.connection.compression:
                raise SchemaMismatch("the table's columns or types differ from the pre-serialized block")
            self._send_block(block)
            self.receive_profile_events()
            self.connection.send_data(ColumnOrientedBlock())  # empty block: end of data
            self.receive_profile_events()
            return block.rows
        if isinstance(data, list) and len(data) == 1 and isinstance(data[0], NativeStream):
            return self._send_stream(sample_block, data[0])
        if not (isinstance(data, list) and len(data) == 1 and isinstance(data[0], NativeColumns)):
            return int(super().send_data(sample_block, data, types_check=types_check, columnar=columnar))
        native: NativeColumns = data[0]
        server_types = self._check_columns(sample_block, list(native.columns))
        self._write_columns(native.columns, native.rows, server_types)
        self.receive_profile_events()
        self.connection.send_data(ColumnOrientedBlock())  # empty block: end of data
        self.receive_profile_events()
        return native.rows

    def _send_block(self, block: NativeBlock) -> None:
        """A pre-serialized Data packet, each part straight from its buffer (no copy)."""
        self.connection.fout.flush()
        sock = self.connection.socket
        for part in block.parts:
            sock.sendall(part)

    def _check_columns(self, sample_block: Any, names: list[str]) -> dict[str, str]:
        """The server's column types, when it expects exactly the columns `names` (else SchemaMismatch)."""
        server_types = dict(sample_block.columns_with_types)
        missing = [name for name in names if name not in server_types]
        if missing or len(server_types) != len(names):
            raise SchemaMismatch(f"insert columns {missing or 'count'} do not match the table's columns")
        if self.connection.compression:
            raise SchemaMismatch("native fast insert needs an uncompressed connection")
        return server_types

    def _send_stream(self, sample_block: Any, stream: NativeStream) -> int:
        """The blocks of `stream`, one Data packet each, made, sent and let go one after another.

        Everything is checked against the sample block before the first block is made: a
        SchemaMismatch leaves nothing sent.  An error while the blocks are made or sent
        leaves the INSERT unfinished: the driver drops the connection, and the server
        writes nothing of an INSERT it did not receive to its end (below the squashing
        threshold; beyond it, what it wrote is whole blocks, i.e. whole batches with their
        ledger rows).
        """
        columns = stream.columns
        server_types = self._check_columns(sample_block, columns.names)
        types = columns.types
        preserialized = stream.preserialize and types is not None and types == server_types
        revision = int(self.connection.server_info.used_revision)
        sent = 0
        for block_columns, rows in columns.blocks():
            if not rows:
                continue
            block = serialize_block(block_columns, rows, server_types, revision) if preserialized else None
            if block is not None:
                self._send_block(block)
                del block
            else:
                self._write_columns(block_columns, rows, server_types)
            del block_columns  # before the next block is made
            self.receive_profile_events()
            sent += rows
        self.connection.send_data(ColumnOrientedBlock())  # empty block: end of data
        self.receive_profile_events()
        return sent

    def _write_columns(self, columns: Mapping[str, Any], rows: int, server_types: Mapping[str, str]) -> None:
        """One Data packet of `columns`, each serialized for the server's type (the driver's plain
        column writers for types this module does not handle)."""
        conn = self.connection
        fout = conn.fout
        revision = conn.server_info.used_revision
        write_varint(ClientPacketTypes.DATA, fout)
        if revision >= ch_defines.DBMS_MIN_REVISION_WITH_TEMPORARY_TABLES:
            write_binary_str("", fout)
        if revision >= ch_defines.DBMS_MIN_REVISION_WITH_BLOCK_INFO:
            BlockInfo().write(fout)
        write_varint(len(columns), fout)
        write_varint(rows, fout)
        for name, col in columns.items():
            if len(col) != rows:
                raise SchemaMismatch(f"column {name} has {len(col)} rows, block has {rows}")
            ch_type = server_types[name]
            write_binary_str(name, fout)
            write_binary_str(ch_type, fout)
            if revision >= ch_defines.DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION:
                write_binary_uint8(0, fout)
            payload = serialize_column(ch_type, col)
            if payload is None:
                write_column(conn.context, name, ch_type, _driver_items(col), fout, types_check=False)
            else:
                fout.write(payload)
        fout.flush()


def native_client(url: StoreURL, server_settings: Mapping[str, Any] | None = None) -> NativeInsertClient:
    """A NativeInsertClient for a clickhouse:// store URL (same options as controller.store: timeouts,
    alt_hosts, TLS) with the store's server settings (a cluster's insert_distributed_sync among them).

    Without the driver's use_numpy (it would import pandas): the data goes as NativeBlock,
    NativeColumns or NativeStream, whose numpy columns this module serializes itself."""
    import logging

    logging.getLogger("clickhouse_driver").setLevel(logging.CRITICAL)
    return NativeInsertClient(
        database=url.database,
        settings={k: v for k, v in (server_settings or {}).items() if k != "use_numpy"},
        **url.connect_args(),
    )
