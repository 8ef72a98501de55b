"""TcpInfoBatch encoder: numpy columns -> serialized protobuf (pure, no I/O, no protobuf runtime).

The encoding half of the telemetry wire format (schemas/tcpinfo.proto,
schema_version 2); the decoder is schemas.tcpinfo_decode, the column table
schemas.tcpinfo_columns.
It does not import the protobuf runtime or the generated module, so a
one-shot collector starts faster: the column table and the header
encoder are checked against schemas/tcpinfo_pb2 by tests/contract/test_tcpinfo_decode.py.

Columns are packed fixed32 / fixed64 (and 16-byte addresses), so encoding a
column is one numpy tobytes(); the packed column fields follow the header
(protobuf allows fields in any order, so `header + body` is one valid
TcpInfoBatch, and in field-number order it is byte for byte what the
protobuf runtime writes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from schemas.tcpinfo_columns import (
    ADDRESS_COLUMNS,
    COLUMN_DTYPES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    ROW_BYTES,
    SCHEMA_VERSION,
    SPEC,
    WIDTHS,
)


@dataclass
class BatchHeader:
    """Header values of a poll's batches.

    poll_end_ns, sockets_* and parse_errors are poll totals: the contract puts
    them (and batch_count) on the poll's last batch only (schemas/tcpinfo.proto).
    """

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


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128 varint (protobuf lengths/tags; also ClickHouse Native string lengths)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


TAGS: tuple[bytes, ...] = tuple(encode_varint((num << 3) | 2) for _, num, _ in SPEC)
assert all(len(t) == 2 for t in TAGS)  # the canonical-layout check relies on 2-byte tags


def _column_payload(name: str, col: np.ndarray | None, total: int, dtype: np.dtype) -> np.ndarray:
    """The column's wire bytes for all rows as a flat uint8 array (zeros when absent)."""
    if col is None:
        return np.zeros(total * (16 if name in ADDRESS_COLUMNS else dtype.itemsize), dtype=np.uint8)
    if name in ADDRESS_COLUMNS:
        return np.ascontiguousarray(col).view(np.uint8).reshape(-1)
    v = np.asarray(col)
    if v.dtype.kind == "b":
        v = v.astype(np.uint8)
    if v.dtype.kind not in "ui":
        raise ValueError(f"column {name} must be integers, not {v.dtype}")
    if v.size and v.dtype.kind == "i" and int(v.min()) < 0:
        raise ValueError(f"negative value in unsigned column {name}")
    if v.size and v.dtype.itemsize > dtype.itemsize and int(v.max()) >> (8 * dtype.itemsize):
        raise ValueError(f"value {int(v.max())} does not fit column {name} ({dtype.itemsize * 8} bits)")
    return np.ascontiguousarray(v, dtype=dtype).view(np.uint8).reshape(-1)


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


def _key(number: int, wire: int) -> bytes:
    return encode_varint((number << 3) | wire)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + encode_varint(len(payload)) + payload


def encode_header(header: BatchHeader, *, sequence: int, batch_index: int, batch_count: int, row_count: int) -> bytes:
    """The header fields (1..31) of a TcpInfoBatch, serialized as the protobuf runtime would.

    Written by hand so that a collector never loads the protobuf runtime
    (docs/performance.md, start-up): fields in number order, proto3
    defaults (0, "") omitted, repeated strings always written.
    tests/contract/test_tcpinfo_decode.py checks the bytes against the runtime.
    """
    ints = (
        (1, SCHEMA_VERSION),
        (6, sequence),
        (7, header.run_id),
        (8, header.poll_start_ns),
        (9, header.poll_end_ns),
        (10, header.sockets_seen),
        (11, header.sockets_exported),
        (12, header.sockets_filtered),
        (14, batch_index),
        (15, batch_count),
        (16, row_count),
        (18, header.client_prefix_len_v4),
        (19, header.client_prefix_len_v6),
    )
    strings = ((2, header.collector_version), (3, header.host), (4, header.pop), (5, header.netns))
    fields: list[tuple[int, bytes]] = []
    for number, value in ints:
        if value < 0:
            raise ValueError(f"header field {number} is negative: {value}")
        if value:
            fields.append((number, _key(number, 0) + encode_varint(int(value))))
    for number, text in strings:
        if text:
            fields.append((number, _len_field(number, text.encode())))
    errors = b"".join(
        _len_field(13, (_len_field(1, kind.encode()) if kind else b"") + _key(2, 0) + encode_varint(int(count)))
        for kind, count in sorted(header.parse_errors.items())
        if count
    )
    if errors:
        fields.append((13, errors))
    names = b"".join(_len_field(17, name.encode()) for name in header.cc_names)
    if names:
        fields.append((17, names))
    return b"".join(data for _, data in sorted(fields, key=lambda f: f[0]))


BodyParts = list["bytes | memoryview"]


def split_body_parts(
    columns: Mapping[str, np.ndarray],
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[tuple[int, BodyParts]]:
    """Encode the columns as bodies of at most max_rows rows and max_bytes bytes, each body as
    its parts (field prefixes and memoryviews of the column data), for a caller that joins them
    with the header in one copy (`b"".join([header, *parts])`).

    Missing columns are written as zeros.  Every row takes ROW_BYTES bytes, so the rows are
    spread evenly over the fewest batches that respect both caps (a row larger than max_bytes
    still makes a one-row batch).  Returns (row_count, parts) pairs in row order; a body is the
    column fields only.  The views keep the column arrays alive; do not modify the columns
    while holding them."""
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
    payloads = [memoryview(_column_payload(name, columns.get(name), total, dt).data) for name, _, dt in SPEC]
    overhead = len(TAGS) * (2 + 3)  # tag + a length varint of up to 3 bytes (< 2 MiB a column)
    fit = max(1, (max_bytes - overhead) // ROW_BYTES)
    nbatches = -(-total // min(max_rows, fit))
    per = -(-total // nbatches)
    out: list[tuple[int, BodyParts]] = []
    heads: dict[int, list[bytes]] = {}  # rows -> tag + length prefix per column (batches share sizes)
    for start in range(0, total, per):
        stop = min(start + per, total)
        n = stop - start
        if n not in heads:
            heads[n] = [tag + encode_varint(n * width) for tag, width in zip(TAGS, WIDTHS, strict=True)]
        parts: BodyParts = []
        for head, width, payload in zip(heads[n], WIDTHS, payloads, strict=True):
            parts.append(head)
            parts.append(payload[start * width : stop * width])
        out.append((n, parts))
    return out
