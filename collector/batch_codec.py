"""TcpInfoBatch codec: numpy columns <-> serialized protobuf (pure, no I/O).

Encoding writes the packed column fields straight from numpy arrays with a
vectorized varint encoder (much faster than filling repeated fields one value
at a time) and appends them to the protobuf-serialized header; protobuf allows
fields in any order, so `header + body` is one valid TcpInfoBatch.

Decoding parses with the protobuf runtime and validates what the contract
promises (schema_version, every column has row_count values, address columns
hold 16 bytes per row, cc_index within cc_names); anything else raises
BatchDecodeError with a one-line reason.

Column names are the proto field names (== ClickHouse `tcpinfo` columns).
Integer columns decode to the proto type (uint32 / uint64); address columns
(src_addr, dst_addr, client_prefix) decode to uint8 arrays of shape (rows, 16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from schemas.tcpinfo_pb2 import TcpInfoBatch

SCHEMA_VERSION = 1
FIRST_COLUMN_FIELD = 32
DEFAULT_MAX_ROWS = 4096
DEFAULT_MAX_BYTES = 900_000

__all__ = [
    "ADDRESS_COLUMNS",
    "COLUMNS",
    "COLUMN_DTYPES",
    "SCHEMA_VERSION",
    "BatchDecodeError",
    "BatchHeader",
    "DecodedBatch",
    "decode_batch",
    "empty_columns",
    "encode_batches",
    "encode_body",
    "encode_header",
]


class BatchDecodeError(ValueError):
    """A message that is not a valid schema-v1 TcpInfoBatch; str() is the reason."""


def _column_spec() -> tuple[list[tuple[str, int, np.dtype]], frozenset[str]]:
    spec: list[tuple[str, int, np.dtype]] = []
    addrs: set[str] = set()
    fields: list[Any] = list(TcpInfoBatch.DESCRIPTOR.fields)
    for fd in sorted(fields, key=lambda f: f.number):
        if fd.number < FIRST_COLUMN_FIELD:
            continue
        if fd.type == FieldDescriptor.TYPE_BYTES:
            spec.append((fd.name, fd.number, np.dtype(np.uint8)))
            addrs.add(fd.name)
        elif fd.type == FieldDescriptor.TYPE_UINT32:
            spec.append((fd.name, fd.number, np.dtype(np.uint32)))
        elif fd.type == FieldDescriptor.TYPE_UINT64:
            spec.append((fd.name, fd.number, np.dtype(np.uint64)))
        else:  # pragma: no cover - guarded by the contract
            raise TypeError(f"unsupported column type for {fd.name}")
    return spec, frozenset(addrs)


_SPEC, ADDRESS_COLUMNS = _column_spec()
#: Column names in field-number order.
COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in _SPEC)
#: Decoded dtype per column (uint8 for the (rows, 16) address columns).
COLUMN_DTYPES: dict[str, np.dtype] = {name: dt for name, _, dt in _SPEC}


@dataclass
class BatchHeader:
    """Per-poll header values shared by every batch of the poll."""

    host: str
    pop: str = ""
    netns: str = ""
    run_id: int = 0
    poll_start_ns: int = 0
    poll_end_ns: int = 0
    sockets_seen: int = 0
    sockets_exported: int = 0
    sockets_filtered: int = 0
    parse_errors: Mapping[str, int] = field(default_factory=dict)
    cc_names: Sequence[str] = ()
    client_prefix_len_v4: int = 24
    client_prefix_len_v6: int = 56
    collector_version: str = ""


@dataclass
class DecodedBatch:
    """A validated batch: the header fields and the numpy columns."""

    schema_version: int
    collector_version: str
    host: str
    pop: str
    netns: str
    sequence: int
    run_id: int
    poll_start_ns: int
    poll_end_ns: int
    sockets_seen: int
    sockets_exported: int
    sockets_filtered: int
    parse_errors: dict[str, int]
    batch_index: int
    batch_count: int
    row_count: int
    cc_names: list[str]
    client_prefix_len_v4: int
    client_prefix_len_v6: int
    columns: dict[str, np.ndarray]

    def cc(self) -> np.ndarray:
        """Congestion-control name per row (object array of str)."""
        table = np.array([*self.cc_names, ""], dtype=object)
        return table[self.columns["cc_index"]]


def empty_columns(rows: int = 0) -> dict[str, np.ndarray]:
    """Zero-filled columns of the decoded dtypes (addresses are (rows, 16) uint8)."""
    out: dict[str, np.ndarray] = {}
    for name, dt in COLUMN_DTYPES.items():
        out[name] = np.zeros((rows, 16) if name in ADDRESS_COLUMNS else rows, dtype=dt)
    return out


# ---------------------------------------------------------------- encoding


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_varints(values: np.ndarray) -> bytes:
    """Packed protobuf varints for an array of non-negative integers (vectorized).

    Row i's varint takes bytes k = 0.. while value >> 7k != 0; a (rows, maxlen)
    byte matrix is filled column by column and the absent bytes masked out.
    """
    v = np.asarray(values)
    if v.size == 0:
        return b""
    if v.dtype.kind == "b":
        v = v.astype(np.uint8)
    if v.dtype.kind == "i" and int(v.min()) < 0:
        raise ValueError("negative value in an unsigned column")
    vmax = int(v.max())
    if vmax < 0x80:
        return v.astype(np.uint8).tobytes()
    maxlen = (vmax.bit_length() + 6) // 7
    v = v.astype(np.uint32 if vmax < (1 << 32) else np.uint64, copy=False)
    n = v.size
    present = np.empty((n, maxlen), dtype=bool)
    present[:, 0] = True
    for k in range(1, maxlen):
        np.greater_equal(v, 1 << (7 * k), out=present[:, k])
    out = np.empty((n, maxlen), dtype=np.uint8)
    continued = present.view(np.uint8)
    rem = v
    for k in range(maxlen):
        col = out[:, k]
        np.bitwise_and(rem, 0x7F, out=col, casting="unsafe")
        if k < maxlen - 1:
            col |= continued[:, k + 1] << 7
            rem = rem >> 7
    if bool(present[:, maxlen - 1].all()):
        return out.tobytes()
    return out[present].tobytes()


_TAGS = {name: _varint((num << 3) | 2) for name, num, _ in _SPEC}


def _column_rows(name: str, col: np.ndarray) -> int:
    if name in ADDRESS_COLUMNS:
        if col.ndim == 2:
            if col.shape[1] != 16:
                raise ValueError(f"address column {name} must be (rows, 16)")
            return int(col.shape[0])
        if col.dtype.itemsize == 16 and col.dtype.kind in "SV":
            return int(col.shape[0])
        raise ValueError(f"address column {name} must be (rows, 16) uint8 or 16-byte records")
    if col.ndim != 1:
        raise ValueError(f"column {name} must be one-dimensional")
    return int(col.shape[0])


def encode_body(columns: Mapping[str, np.ndarray], start: int = 0, stop: int | None = None) -> bytes:
    """The column fields for rows [start, stop); missing columns are written as zeros.

    Returns the serialized fields only (concatenate after encode_header()).
    """
    rows: int | None = None
    for name, given in columns.items():
        if name not in COLUMN_DTYPES:
            raise ValueError(f"unknown column {name!r}")
        n = _column_rows(name, np.asarray(given))
        if rows is None:
            rows = n
        elif n != rows:
            raise ValueError(f"column {name} has {n} rows, expected {rows}")
    total = rows or 0
    stop = total if stop is None else min(stop, total)
    count = max(stop - start, 0)
    if count == 0:
        return b""
    parts: list[bytes] = []
    for name, _, _ in _SPEC:
        col: np.ndarray | None = columns.get(name)
        if name in ADDRESS_COLUMNS:
            payload = bytes(16 * count) if col is None else np.ascontiguousarray(col[start:stop]).tobytes()
        else:
            payload = bytes(count) if col is None else encode_varints(col[start:stop])
        parts.append(_TAGS[name])
        parts.append(_varint(len(payload)))
        parts.append(payload)
    return b"".join(parts)


def encode_header(
    header: BatchHeader, *, sequence: int, batch_index: int, batch_count: int, row_count: int
) -> bytes:
    msg = TcpInfoBatch(
        schema_version=SCHEMA_VERSION,
        collector_version=header.collector_version,
        host=header.host,
        pop=header.pop,
        netns=header.netns,
        sequence=sequence,
        run_id=header.run_id,
        poll_start_ns=header.poll_start_ns,
        poll_end_ns=header.poll_end_ns,
        sockets_seen=header.sockets_seen,
        sockets_exported=header.sockets_exported,
        sockets_filtered=header.sockets_filtered,
        batch_index=batch_index,
        batch_count=batch_count,
        row_count=row_count,
        cc_names=list(header.cc_names),
        client_prefix_len_v4=header.client_prefix_len_v4,
        client_prefix_len_v6=header.client_prefix_len_v6,
    )
    for kind, count in sorted(header.parse_errors.items()):
        if count:
            msg.parse_errors.add(kind=kind, count=count)
    return msg.SerializeToString()


def _varint_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Packed varints of a column as (payload uint8, row end offsets or None, fixed width).

    When every row takes the same number of bytes, ends is None and row i is
    payload[i*width:(i+1)*width]; otherwise row i ends at ends[i].
    """
    v = np.asarray(values)
    if v.dtype.kind == "b":
        v = v.astype(np.uint8)
    if v.dtype.kind == "i" and v.size and int(v.min()) < 0:
        raise ValueError("negative value in an unsigned column")
    vmax = int(v.max()) if v.size else 0
    if vmax < 0x80:
        return v.astype(np.uint8), None, 1
    maxlen = (vmax.bit_length() + 6) // 7
    v = v.astype(np.uint32 if vmax < (1 << 32) else np.uint64, copy=False)
    n = v.size
    present = np.empty((n, maxlen), dtype=bool)
    present[:, 0] = True
    for k in range(1, maxlen):
        np.greater_equal(v, 1 << (7 * k), out=present[:, k])
    out = np.empty((n, maxlen), dtype=np.uint8)
    continued = present.view(np.uint8)
    rem = v
    for k in range(maxlen):
        col = out[:, k]
        np.bitwise_and(rem, 0x7F, out=col, casting="unsafe")
        if k < maxlen - 1:
            col |= continued[:, k + 1] << 7
            rem = rem >> 7
    if bool(present[:, maxlen - 1].all()):
        return out.reshape(-1), None, maxlen
    lengths = np.ones(n, dtype=np.int64)
    for k in range(1, maxlen):
        lengths += continued[:, k]
    return out[present], np.cumsum(lengths), 0


def split_bodies(
    columns: Mapping[str, np.ndarray],
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[tuple[int, bytes]]:
    """Encode the columns as bodies of at most max_rows rows and max_bytes bytes.

    Each column is varint-encoded once for all rows and then sliced per batch;
    rows are spread evenly over the batches (a single row is never split, so a
    row larger than max_bytes makes a one-row batch).  Returns (row_count,
    body) pairs in row order.
    """
    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be positive")
    total: int | None = None
    for name, given in columns.items():
        if name not in COLUMN_DTYPES:
            raise ValueError(f"unknown column {name!r}")
        n = _column_rows(name, np.asarray(given))
        if total is None:
            total = n
        elif n != total:
            raise ValueError(f"column {name} has {n} rows, expected {total}")
    if not total:
        return []
    encoded: list[tuple[bytes, np.ndarray, np.ndarray | None, int]] = []
    row_bytes = np.zeros(total, dtype=np.int64)
    fixed = 0
    for name, _, _ in _SPEC:
        col = columns.get(name)
        if name in ADDRESS_COLUMNS:
            payload = (
                np.zeros(16 * total, dtype=np.uint8)
                if col is None
                else np.ascontiguousarray(col).view(np.uint8).reshape(-1)
            )
            encoded.append((_TAGS[name], payload, None, 16))
            fixed += 16
            continue
        if col is None:
            payload, ends, width = np.zeros(total, dtype=np.uint8), None, 1
        else:
            payload, ends, width = _varint_rows(col)
        encoded.append((_TAGS[name], payload, ends, width))
        if ends is None:
            fixed += width
        else:
            row_bytes[0] += ends[0]
            row_bytes[1:] += np.diff(ends)
    row_bytes += fixed
    cum = np.concatenate(([0], np.cumsum(row_bytes)))
    overhead = sum(len(tag) + 5 for tag, _, _, _ in encoded)
    nbatches = -(-total // max_rows)
    per = -(-total // nbatches)
    out: list[tuple[int, bytes]] = []
    start = 0
    while start < total:
        stop = min(start + per, total)
        if cum[stop] - cum[start] + overhead > max_bytes:
            limit = cum[start] + max_bytes - overhead
            stop = max(start + 1, int(np.searchsorted(cum, limit, side="right")) - 1)
        parts: list[bytes] = []
        for tag, payload, ends, width in encoded:
            if ends is None:
                a, b = start * width, stop * width
            else:
                a = int(ends[start - 1]) if start else 0
                b = int(ends[stop - 1])
            parts.append(tag)
            parts.append(_varint(b - a))
            parts.append(payload[a:b].tobytes())
        out.append((stop - start, b"".join(parts)))
        start = stop
    return out


def encode_batches(
    columns: Mapping[str, np.ndarray],
    header: BatchHeader,
    first_sequence: int,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[bytes]:
    """Serialized TcpInfoBatch messages for one poll, sequences first_sequence, +1, ...

    A poll with no rows still yields one (empty) batch so its counters reach the reader.
    """
    bodies = split_bodies(columns, max_rows, max_bytes) or [(0, b"")]
    count = len(bodies)
    return [
        encode_header(header, sequence=first_sequence + i, batch_index=i, batch_count=count, row_count=n)
        + body
        for i, (n, body) in enumerate(bodies)
    ]


# ---------------------------------------------------------------- decoding


def decode_batch(data: bytes) -> DecodedBatch:
    """Parse and validate one serialized TcpInfoBatch; raises BatchDecodeError."""
    msg = TcpInfoBatch()
    try:
        msg.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BatchDecodeError(f"not a TcpInfoBatch: {exc}") from exc
    if msg.schema_version != SCHEMA_VERSION:
        raise BatchDecodeError(
            f"schema_version {msg.schema_version} not supported (this reader knows {SCHEMA_VERSION})"
        )
    rows = msg.row_count
    columns: dict[str, np.ndarray] = {}
    for name, _, dt in _SPEC:
        if name in ADDRESS_COLUMNS:
            value: Any = getattr(msg, name)
            if len(value) != 16 * rows:
                raise BatchDecodeError(
                    f"column {name} has {len(value)} bytes, expected 16 * row_count = {16 * rows}"
                )
            columns[name] = np.frombuffer(value, dtype=np.uint8).reshape(rows, 16)
        else:
            value = getattr(msg, name)
            if len(value) != rows:
                raise BatchDecodeError(f"column {name} has {len(value)} values, row_count is {rows}")
            columns[name] = np.array(value, dtype=dt)
    cc_names = list(msg.cc_names)
    if rows and int(columns["cc_index"].max()) >= len(cc_names):
        raise BatchDecodeError(
            f"cc_index {int(columns['cc_index'].max())} outside cc_names ({len(cc_names)} names)"
        )
    if msg.batch_count and msg.batch_index >= msg.batch_count:
        raise BatchDecodeError(f"batch_index {msg.batch_index} >= batch_count {msg.batch_count}")
    return DecodedBatch(
        schema_version=msg.schema_version,
        collector_version=msg.collector_version,
        host=msg.host,
        pop=msg.pop,
        netns=msg.netns,
        sequence=msg.sequence,
        run_id=msg.run_id,
        poll_start_ns=msg.poll_start_ns,
        poll_end_ns=msg.poll_end_ns,
        sockets_seen=msg.sockets_seen,
        sockets_exported=msg.sockets_exported,
        sockets_filtered=msg.sockets_filtered,
        parse_errors={e.kind: e.count for e in msg.parse_errors},
        batch_index=msg.batch_index,
        batch_count=msg.batch_count,
        row_count=rows,
        cc_names=cc_names,
        client_prefix_len_v4=msg.client_prefix_len_v4,
        client_prefix_len_v6=msg.client_prefix_len_v6,
        columns=columns,
    )
