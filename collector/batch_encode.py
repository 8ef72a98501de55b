"""TcpInfoBatch encoder: numpy columns -> serialized protobuf (pure, no I/O, no protobuf runtime).

The encoding half of the telemetry wire format (schemas/tcpinfo.proto,
schema_version 2); collector.batch_codec re-exports it next to the decoder.
It does not import the protobuf runtime or the generated module, so a
one-shot collector starts faster: the column table below and the header
encoder are checked against schemas/tcpinfo_pb2 by tests/test_collector_codec.py.

Columns are packed fixed32 / fixed64 (and 16-byte addresses), so encoding a
column is one numpy tobytes(); the packed column fields follow the header
(protobuf allows fields in any order, so `header + body` is one valid
TcpInfoBatch, and in field-number order it is byte for byte what the
protobuf runtime writes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

SCHEMA_VERSION = 2
FIRST_COLUMN_FIELD = 32
DEFAULT_MAX_ROWS = 4096
DEFAULT_MAX_BYTES = 900_000

#: (column, field number, wire kind) in field-number order, as in schemas/tcpinfo.proto.
COLUMN_TABLE: tuple[tuple[str, int, str], ...] = (
    ("src_addr", 32, "bytes16"),
    ("dst_addr", 33, "bytes16"),
    ("client_prefix", 34, "bytes16"),
    ("family", 40, "fixed32"),
    ("src_port", 41, "fixed32"),
    ("dst_port", 42, "fixed32"),
    ("state", 43, "fixed32"),
    ("cc_index", 44, "fixed32"),
    ("client_prefix_len", 45, "fixed32"),
    ("tcp_info_len", 46, "fixed32"),
    ("has_bbr_info", 47, "fixed32"),
    ("uid", 48, "fixed32"),
    ("inode", 49, "fixed32"),
    ("ca_state", 50, "fixed32"),
    ("retransmits", 51, "fixed32"),
    ("probes", 52, "fixed32"),
    ("backoff", 53, "fixed32"),
    ("options", 54, "fixed32"),
    ("snd_wscale", 55, "fixed32"),
    ("rcv_wscale", 56, "fixed32"),
    ("app_limited", 57, "fixed32"),
    ("rto", 58, "fixed32"),
    ("ato", 59, "fixed32"),
    ("snd_mss", 60, "fixed32"),
    ("rcv_mss", 61, "fixed32"),
    ("unacked", 62, "fixed32"),
    ("sacked", 63, "fixed32"),
    ("lost", 64, "fixed32"),
    ("retrans", 65, "fixed32"),
    ("fackets", 66, "fixed32"),
    ("last_data_sent", 67, "fixed32"),
    ("last_ack_sent", 68, "fixed32"),
    ("last_data_recv", 69, "fixed32"),
    ("last_ack_recv", 70, "fixed32"),
    ("pmtu", 71, "fixed32"),
    ("rcv_ssthresh", 72, "fixed32"),
    ("rtt", 73, "fixed32"),
    ("rttvar", 74, "fixed32"),
    ("snd_ssthresh", 75, "fixed32"),
    ("snd_cwnd", 76, "fixed32"),
    ("advmss", 77, "fixed32"),
    ("reordering", 78, "fixed32"),
    ("rcv_rtt", 79, "fixed32"),
    ("rcv_space", 80, "fixed32"),
    ("total_retrans", 81, "fixed32"),
    ("segs_out", 82, "fixed32"),
    ("segs_in", 83, "fixed32"),
    ("notsent_bytes", 84, "fixed32"),
    ("min_rtt", 85, "fixed32"),
    ("data_segs_in", 86, "fixed32"),
    ("data_segs_out", 87, "fixed32"),
    ("delivered", 88, "fixed32"),
    ("delivered_ce", 89, "fixed32"),
    ("dsack_dups", 90, "fixed32"),
    ("reord_seen", 91, "fixed32"),
    ("rcv_ooopack", 92, "fixed32"),
    ("snd_wnd", 93, "fixed32"),
    ("rcv_wnd", 94, "fixed32"),
    ("rehash", 95, "fixed32"),
    ("total_rto", 96, "fixed32"),
    ("total_rto_recoveries", 97, "fixed32"),
    ("total_rto_time", 98, "fixed32"),
    ("bbr_min_rtt", 99, "fixed32"),
    ("bbr_pacing_gain", 100, "fixed32"),
    ("bbr_cwnd_gain", 101, "fixed32"),
    ("skmem_rmem_alloc", 102, "fixed32"),
    ("skmem_rcvbuf", 103, "fixed32"),
    ("skmem_wmem_alloc", 104, "fixed32"),
    ("skmem_sndbuf", 105, "fixed32"),
    ("skmem_fwd_alloc", 106, "fixed32"),
    ("skmem_wmem_queued", 107, "fixed32"),
    ("skmem_optmem", 108, "fixed32"),
    ("skmem_backlog", 109, "fixed32"),
    ("skmem_drops", 110, "fixed32"),
    ("cookie", 200, "fixed64"),
    ("pacing_rate", 201, "fixed64"),
    ("max_pacing_rate", 202, "fixed64"),
    ("bytes_acked", 203, "fixed64"),
    ("bytes_received", 204, "fixed64"),
    ("delivery_rate", 205, "fixed64"),
    ("busy_time", 206, "fixed64"),
    ("rwnd_limited", 207, "fixed64"),
    ("sndbuf_limited", 208, "fixed64"),
    ("bytes_sent", 209, "fixed64"),
    ("bytes_retrans", 210, "fixed64"),
    ("bbr_bw", 211, "fixed64"),
)
_KIND_DTYPES: dict[str, np.dtype] = {
    "bytes16": np.dtype(np.uint8),
    "fixed32": np.dtype("<u4"),
    "fixed64": np.dtype("<u8"),
}
_SPEC: list[tuple[str, int, np.dtype]] = [(name, num, _KIND_DTYPES[kind]) for name, num, kind in COLUMN_TABLE]
ADDRESS_COLUMNS: frozenset[str] = frozenset(name for name, _, kind in COLUMN_TABLE if kind == "bytes16")
#: Column names in field-number order.
COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in _SPEC)
#: Decoded dtype per column (uint8 for the (rows, 16) address columns).
COLUMN_DTYPES: dict[str, np.dtype] = {name: dt for name, _, dt in _SPEC}
_IS_ADDR: tuple[bool, ...] = tuple(name in ADDRESS_COLUMNS for name in COLUMNS)
#: Bytes per row of each column on the wire (4, 8, or 16 for addresses).
_WIDTHS: tuple[int, ...] = tuple(16 if a else dt.itemsize for a, (_, _, dt) in zip(_IS_ADDR, _SPEC, strict=True))
#: Bytes of one row over all columns.
ROW_BYTES = sum(_WIDTHS)


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


_TAGS: tuple[bytes, ...] = tuple(encode_varint((num << 3) | 2) for _, num, _ in _SPEC)
assert all(len(t) == 2 for t in _TAGS)  # the canonical-layout check relies on 2-byte tags


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
    (~15 ms of a one-shot collector's start): fields in number order, proto3
    defaults (0, "") omitted, repeated strings always written.
    tests/test_collector_codec.py checks the bytes against the runtime.
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


def split_bodies(
    columns: Mapping[str, np.ndarray],
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[tuple[int, bytes]]:
    """Encode the columns as bodies of at most max_rows rows and max_bytes bytes.

    Missing columns are written as zeros.  Every row takes ROW_BYTES bytes, so
    the rows are spread evenly over the fewest batches that respect both caps
    (a row larger than max_bytes still makes a one-row batch).  Returns
    (row_count, body) pairs in row order; a body is the column fields only
    (concatenate after encode_header()).
    """
    return [(n, b"".join(parts)) for n, parts in split_body_parts(columns, max_rows, max_bytes)]


def split_body_parts(
    columns: Mapping[str, np.ndarray],
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[tuple[int, BodyParts]]:
    """split_bodies() without the final copy: each body as its parts (field prefixes and
    memoryviews of the column data), for a caller that joins them with the header in one
    copy (`b"".join([header, *parts])`).  The views keep the column arrays alive; do not
    modify the columns while holding them."""
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
    payloads = [memoryview(_column_payload(name, columns.get(name), total, dt).data) for name, _, dt in _SPEC]
    overhead = len(_TAGS) * (2 + 3)  # tag + a length varint of up to 3 bytes (< 2 MiB a column)
    fit = max(1, (max_bytes - overhead) // ROW_BYTES)
    nbatches = -(-total // min(max_rows, fit))
    per = -(-total // nbatches)
    out: list[tuple[int, BodyParts]] = []
    heads: dict[int, list[bytes]] = {}  # rows -> tag + length prefix per column (batches share sizes)
    for start in range(0, total, per):
        stop = min(start + per, total)
        n = stop - start
        if n not in heads:
            heads[n] = [tag + encode_varint(n * width) for tag, width in zip(_TAGS, _WIDTHS, strict=True)]
        parts: BodyParts = []
        for head, width, payload in zip(heads[n], _WIDTHS, payloads, strict=True):
            parts.append(head)
            parts.append(payload[start * width : stop * width])
        out.append((n, parts))
    return out


def encode_batches(
    columns: Mapping[str, np.ndarray],
    header: BatchHeader,
    first_sequence: int,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[bytes]:
    """Serialized TcpInfoBatch messages for one poll, sequences first_sequence, +1, ...

    Only the last batch carries batch_count and the poll totals (as the
    collector sends them); a poll with no rows still yields that one (empty) batch.
    """
    bodies = split_bodies(columns, max_rows, max_bytes) or [(0, b"")]
    count = len(bodies)
    partial = replace(header, poll_end_ns=0, sockets_seen=0, sockets_exported=0, sockets_filtered=0, parse_errors={})
    return [
        encode_header(
            header if i == count - 1 else partial,
            sequence=first_sequence + i,
            batch_index=i,
            batch_count=count if i == count - 1 else 0,
            row_count=n,
        )
        + body
        for i, (n, body) in enumerate(bodies)
    ]
