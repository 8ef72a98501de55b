"""TcpInfoBatch codec: numpy columns <-> serialized protobuf (pure, no I/O).

The one encoder and the one decoder of the telemetry wire format
(schemas/tcpinfo.proto); the collector, ingest and the lab all use them.

Encoding writes the packed column fields straight from numpy arrays with a
vectorized varint encoder and appends them to the protobuf-serialized header;
protobuf allows fields in any order, so `header + body` is one valid
TcpInfoBatch.

Decoding is vectorized and accepts every valid protobuf encoding:

  * scan_batch() locates the column payloads of one message.  The layout this
    encoder writes (header, then every column once, packed, in field order) is
    recognized by a quick check; any other order, unknown fields or repeated
    header fields go through a field-by-field scan; encodings the scan does
    not handle (unpacked or split column fields, groups) are parsed by the
    protobuf runtime, which is the authority on the format.
  * decode_group() / decode_all() decode the columns of many scanned messages
    at once, column-major, with a few numpy passes per column, and check per
    message that each column holds exactly row_count values, cc_index <
    len(cc_names) and client_prefix_len <= 128; a bad message is named by its
    index so the rest still decode (ingest dead-letters the bad one).
  * decode_batch() is the one-message API: scan + decode, BatchDecodeError
    with a one-line reason for anything the contract forbids.

Column names are the proto field names (== ClickHouse `tcpinfo` columns).
decode_batch returns integer columns as the proto type (uint32 / uint64);
decode_group returns the smallest of uint8 / uint32 / uint64 the encoded
widths allow (callers cast).  Address columns (src_addr, dst_addr,
client_prefix) are uint8 arrays of shape (rows, 16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from schemas.tcpinfo_pb2 import TcpInfoBatch

SCHEMA_VERSION = 1
FIRST_COLUMN_FIELD = 32
DEFAULT_MAX_ROWS = 4096
DEFAULT_MAX_BYTES = 900_000
MAX_VARINT_BYTES = 10
MAX_PREFIX_LEN = 128

__all__ = [
    "ADDRESS_COLUMNS",
    "COLUMNS",
    "COLUMN_DTYPES",
    "SCHEMA_VERSION",
    "BatchDecodeError",
    "BatchHeader",
    "DecodedBatch",
    "GroupColumns",
    "ScannedBatch",
    "decode_all",
    "decode_batch",
    "decode_group",
    "decode_varints",
    "empty_columns",
    "encode_batches",
    "encode_header",
    "encode_varints",
    "scan_batch",
    "split_bodies",
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
_COL_INDEX: dict[int, int] = {num: i for i, (_, num, _) in enumerate(_SPEC)}
_IS_ADDR: tuple[bool, ...] = tuple(name in ADDRESS_COLUMNS for name in COLUMNS)


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


def _varint_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Packed varints of a column as (payload uint8, row end offsets or None, fixed width).

    Row i's varint takes bytes k = 0.. while value >> 7k != 0; a (rows, maxlen)
    byte matrix is filled column by column and the absent bytes masked out.
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
        return v.astype(np.uint8).reshape(-1), None, 1
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


def encode_varints(values: np.ndarray) -> bytes:
    """Packed protobuf varints for an array of non-negative integers (vectorized)."""
    return _varint_rows(values)[0].tobytes()


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


def split_bodies(
    columns: Mapping[str, np.ndarray],
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[tuple[int, bytes]]:
    """Encode the columns as bodies of at most max_rows rows and max_bytes bytes.

    Missing columns are written as zeros.  Each column is varint-encoded once
    for all rows and then sliced per batch; rows are spread evenly over the
    batches (a single row is never split, so a row larger than max_bytes makes
    a one-row batch).  Returns (row_count, body) pairs in row order; a body is
    the column fields only (concatenate after encode_header()).
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
    for (name, _, _), tag in zip(_SPEC, _TAGS, strict=True):
        col = columns.get(name)
        if name in ADDRESS_COLUMNS:
            payload = (
                np.zeros(16 * total, dtype=np.uint8)
                if col is None
                else np.ascontiguousarray(col).view(np.uint8).reshape(-1)
            )
            encoded.append((tag, payload, None, 16))
            fixed += 16
            continue
        if col is None:
            payload, ends, width = np.zeros(total, dtype=np.uint8), None, 1
        else:
            payload, ends, width = _varint_rows(col)
        encoded.append((tag, payload, ends, width))
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
            parts.append(encode_varint(b - a))
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


# ---------------------------------------------------------------- scanning

Span = tuple[int, int]


@dataclass(slots=True)
class ScannedBatch:
    """One message with its header parsed and its column payloads located (not yet decoded).

    `spans[i]` is the (start, end) of column i's packed payload in `data` (None:
    absent).  When the protobuf runtime had to parse the message, `spans` is
    None and `columns` holds its columns instead.
    """

    data: bytes
    header: TcpInfoBatch
    spans: list[Span | None] | None
    columns: dict[str, np.ndarray] | None = None

    @property
    def rows(self) -> int:
        return int(self.header.row_count)

    @property
    def identity(self) -> tuple[str, int, int]:
        """(host, run_id, sequence): the batch identity used for deduplication."""
        h = self.header
        return (h.host, int(h.run_id), int(h.sequence))


class _Unusual(Exception):
    """An encoding the field scan does not handle; the protobuf runtime parses it."""


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    n = len(data)
    while True:
        if pos >= n or shift >= 64:
            raise _Unusual
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _check_header(h: TcpInfoBatch) -> None:
    if h.schema_version != SCHEMA_VERSION:
        raise BatchDecodeError(
            f"schema_version {h.schema_version} not supported (this reader knows {SCHEMA_VERSION})"
        )
    if h.batch_count and h.batch_index >= h.batch_count:
        raise BatchDecodeError(f"batch_index {h.batch_index} >= batch_count {h.batch_count}")


def _parse_header(data: bytes) -> TcpInfoBatch:
    header = TcpInfoBatch()
    try:
        header.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BatchDecodeError(f"not a TcpInfoBatch: {exc}") from exc
    return header


def _count_values(data: bytes, span: Span | None) -> int:
    if span is None:
        return 0
    return int(np.count_nonzero(np.frombuffer(data, np.uint8, span[1] - span[0], span[0]) < 0x80))


def _check_spans(data: bytes, rows: int, spans: list[Span | None]) -> None:
    """Cheap per-column size checks (the exact value count is checked while decoding)."""
    max_varint = MAX_VARINT_BYTES * rows
    for i, span in enumerate(spans):
        nbytes = 0 if span is None else span[1] - span[0]
        name = COLUMNS[i]
        if _IS_ADDR[i]:
            if nbytes != 16 * rows:
                raise BatchDecodeError(
                    f"column {name} has {nbytes} bytes, expected 16 * row_count = {16 * rows}"
                )
        elif nbytes < rows or nbytes > max_varint:
            raise BatchDecodeError(
                f"column {name} has {_count_values(data, span)} values, row_count is {rows}"
            )


def _canonical(data: bytes) -> tuple[TcpInfoBatch, list[Span | None]] | None:
    """This encoder's layout: header fields, then every column once, packed, in field order.

    Returns (header, spans), or None when the message is laid out differently.
    The header ends where the first column's tag starts: the first candidate
    position whose prefix parses as a message is it (a cut inside a field never
    parses).
    """
    n = len(data)
    first = _TAGS[0]
    pos = data.find(first)
    while pos >= 0:
        header = TcpInfoBatch()
        try:
            header.ParseFromString(data[:pos])
            break
        except (DecodeError, RuntimeError, ValueError):
            pos = data.find(first, pos + 1)
    else:
        return None
    if any(fd.number >= FIRST_COLUMN_FIELD for fd, _ in header.ListFields()):
        return None  # a column field before the body: the general scan decides
    spans: list[Span | None] = []
    append = spans.append
    for tag in _TAGS:
        if pos + 3 > n or not data.startswith(tag, pos):
            return None
        pos += 2
        b = data[pos]
        if b < 0x80:
            length = b
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                length = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                try:
                    length, pos = _read_varint(data, pos)
                except _Unusual:
                    return None
        end = pos + length
        if end > n:
            return None
        append((pos, end))
        pos = end
    if pos != n:
        return None
    return header, spans


def _scan_fields(data: bytes) -> tuple[bytes, list[Span | None]]:
    """(header field bytes, column spans) for any field order; _Unusual for what it can't handle."""
    n = len(data)
    pos = 0
    spans: list[Span | None] = [None] * len(COLUMNS)
    header_parts: list[Span] = []
    col_index = _COL_INDEX
    while pos < n:
        start = pos
        tag, pos = _read_varint(data, pos)
        wire = tag & 7
        if wire == 2:
            length, pos = _read_varint(data, pos)
            end = pos + length
        elif wire == 0:
            _, end = _read_varint(data, pos)
        elif wire == 1:
            end = pos + 8
        elif wire == 5:
            end = pos + 4
        else:
            raise _Unusual  # groups (deprecated but valid): the runtime skips them
        if end > n:
            raise _Unusual
        col = col_index.get(tag >> 3)
        if col is None:
            if header_parts and header_parts[-1][1] == start:
                header_parts[-1] = (header_parts[-1][0], end)
            else:
                header_parts.append((start, end))
        else:
            if wire != 2 or spans[col] is not None:
                raise _Unusual  # unpacked or split column: merge semantics are the runtime's
            spans[col] = (pos, end)
        pos = end
    header = b"".join(data[s:e] for s, e in header_parts)
    return header, spans


def _runtime_scan(data: bytes) -> ScannedBatch:
    """Any valid encoding, parsed by the protobuf runtime (slow: ~70 ns a value)."""
    msg = _parse_header(data)
    _check_header(msg)
    rows = msg.row_count
    columns: dict[str, np.ndarray] = {}
    for name, _, dt in _SPEC:
        value: Any = getattr(msg, name)
        if name in ADDRESS_COLUMNS:
            if len(value) != 16 * rows:
                raise BatchDecodeError(
                    f"column {name} has {len(value)} bytes, expected 16 * row_count = {16 * rows}"
                )
            columns[name] = np.frombuffer(value, dtype=np.uint8).reshape(rows, 16)
        else:
            if len(value) != rows:
                raise BatchDecodeError(f"column {name} has {len(value)} values, row_count is {rows}")
            columns[name] = np.array(value, dtype=dt)
        msg.ClearField(name)
    return ScannedBatch(data, msg, None, columns)


def scan_batch(data: bytes) -> ScannedBatch:
    """Parse the header and locate the columns of one message; raises BatchDecodeError."""
    data = bytes(data)
    fast = _canonical(data)
    if fast is not None:
        header, spans = fast
    else:
        try:
            header_bytes, spans = _scan_fields(data)
        except _Unusual:
            return _runtime_scan(data)
        header = _parse_header(header_bytes)
    _check_header(header)
    _check_spans(data, int(header.row_count), spans)
    return ScannedBatch(data, header, spans)


# ---------------------------------------------------------------- column decoding

_U = np.uint64
_LENMASK = np.array([0] + [(1 << (8 * min(n, 8))) - 1 for n in range(1, 11)], dtype=np.uint64)
_M7 = _U(0x7F7F7F7F7F7F7F7F)
_PAIRS = (
    (_U(0x007F007F007F007F), _U(0x7F007F007F007F00), _U(1)),
    (_U(0x00003FFF00003FFF), _U(0x3FFF00003FFF0000), _U(2)),
    (_U(0x000000000FFFFFFF), _U(0x0FFFFFFF00000000), _U(4)),
)
_LENMASK_32 = np.array([0] + [(1 << (8 * min(n, 4))) - 1 for n in range(1, 11)], dtype=np.uint32)
_M7_32 = np.uint32(0x7F7F7F7F)
_PAIRS_32 = (
    (np.uint32(0x007F007F), np.uint32(0x7F007F00), np.uint32(1)),
    (np.uint32(0x00003FFF), np.uint32(0x3FFF0000), np.uint32(2)),
)
PAD = 16  # zero bytes a decode buffer carries after its data
_CHUNK_VALUES = 1 << 16  # varints decoded per numpy pass (larger arrays fall out of the CPU cache)
_ZEROS = bytes(PAD)


def _compact(x: np.ndarray, m7: Any = _M7, pairs: tuple[tuple[Any, Any, Any], ...] = _PAIRS) -> np.ndarray:
    """Drop the continuation bit of each byte of x and pack the 7-bit groups (little-endian).

    For uint64 windows (up to 8 varint bytes) by default; uint32 with _M7_32, _PAIRS_32.
    """
    x &= m7
    for keep, move, shift in pairs:
        t = x & move
        t >>= shift
        x &= keep
        x |= t
    return x


def _windows(padded: np.ndarray, dtype: str = "<u8") -> np.ndarray:
    """Little-endian integer view starting at every byte of `padded` (which ends with >= 8 spare bytes)."""
    return np.ndarray(shape=(padded.size - 8,), dtype=dtype, buffer=padded, strides=(1,))


def _decode_known(padded: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Values of the varints at `starts` with `lengths` (any shape; uint32 when all are <= 4 bytes)."""
    # ndarray.take is about twice as fast as fancy indexing on these strided views
    if int(lengths.max(initial=0)) <= 4:
        x32 = _windows(padded, "<u4").take(starts)
        x32 &= _LENMASK_32.take(lengths)
        return _compact(x32, _M7_32, _PAIRS_32)
    win = _windows(padded)
    x = win.take(starts)
    x &= _LENMASK.take(lengths)
    x = _compact(x)
    long = lengths > 8
    if long.any():
        hi = win.take(starts[long] + 8) & _LENMASK.take(lengths[long] - 8)
        x[long] |= _compact(hi) << _U(56)
    return x


def decode_varints(buf: np.ndarray, count: int) -> np.ndarray:
    """Decode exactly `count` packed varints from uint8 `buf` (validated by the caller) as uint64."""
    if buf.size == count:
        return buf.astype(np.uint64)
    padded = np.zeros(buf.size + PAD, dtype=np.uint8)
    padded[: buf.size] = buf
    ends = np.flatnonzero(buf < 0x80)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    return _decode_known(padded, starts, ends - starts + 1).astype(np.uint64)


class GroupDecodeError(Exception):
    """Some messages of a group failed column validation: {index in group: reason}."""

    def __init__(self, bad: dict[int, str]) -> None:
        super().__init__(f"{len(bad)} bad batches")
        self.bad = bad


@dataclass
class GroupColumns:
    """Decoded columns of a group of batches, rows in batch order."""

    batches: list[ScannedBatch]
    rows: np.ndarray  # rows per batch (int64)
    columns: dict[str, np.ndarray]


_VARINT_COLS: tuple[int, ...] = tuple(i for i, a in enumerate(_IS_ADDR) if not a)
_ADDR_COLS: tuple[int, ...] = tuple(i for i, a in enumerate(_IS_ADDR) if a)


def _join(datas: list[memoryview], spans: np.ndarray, cols: list[int], pad: bool = False) -> np.ndarray:
    """The payloads of columns `cols` of every batch, column-major (column by column, batches in order)."""
    seg = spans[:, cols, :].transpose(1, 0, 2).reshape(-1, 2).tolist()
    pieces: list[Any] = [d[s:e] for d, (s, e) in zip(datas * len(cols), seg, strict=True)]  # views: one copy
    if pad:
        pieces.append(_ZEROS)
    return np.frombuffer(b"".join(pieces), dtype=np.uint8)


def _decode_spans(batches: list[ScannedBatch], which: list[int], bad: dict[int, str]) -> dict[str, np.ndarray]:
    """Columns of the located (span) batches `which`; reasons for bad ones go to `bad`.

    Payloads are joined column-major, so column c's values end up contiguous.
    Varint columns whose every segment is exactly row_count bytes of one-byte
    varints are those bytes (no decoding); the other ("wide") varint columns
    are joined into one buffer, validated at once (each segment holds exactly
    its batch's rows, varints <= 10 bytes) and decoded in two passes (columns
    of <= 4-byte varints in uint32, longer ones in uint64).  Every column holds
    `total` values, so value j of the k-th wide column is at k * total + j.
    """
    datas = [memoryview(batches[i].data) for i in which]
    rows = np.array([batches[i].rows for i in which], dtype=np.int64)
    total = int(rows.sum())
    spans = np.array([batches[i].spans for i in which], dtype=np.int64)  # (B, columns, 2)
    columns: dict[str, np.ndarray] = {}
    for col in _ADDR_COLS:
        columns[COLUMNS[col]] = _join(datas, spans, [col]).reshape(total, 16)
    var = np.array(_VARINT_COLS)
    seg_len = spans[:, var, 1] - spans[:, var, 0]  # (B, varint columns)
    narrow = var[(seg_len == rows[:, None]).all(axis=0)].tolist()
    if narrow:
        one = _join(datas, spans, narrow).reshape(len(narrow), total)
        ok = np.asarray((one < 0x80).all(axis=1)).tolist()
        for col, good, values in zip(narrow, ok, one, strict=True):
            if good:
                columns[COLUMNS[col]] = values
    wide = [c for c in _VARINT_COLS if COLUMNS[c] not in columns]
    step = max(1, _CHUNK_VALUES // max(total, 1))  # columns per pass: keep the arrays cache-sized
    for i in range(0, len(wide), step):
        if not _decode_wide(datas, spans, rows, wide[i : i + step], columns, bad, which):
            break
    return columns


def _decode_wide(
    datas: list[memoryview],
    spans: np.ndarray,
    rows: np.ndarray,
    wide: list[int],
    out: dict[str, np.ndarray],
    bad: dict[int, str],
    which: list[int],
) -> bool:
    """Validate and decode varint columns `wide` of every batch into `out`.

    False (and a reason per bad batch, by its index in `which`, in `bad`) if some batch is bad.
    """
    setbad = bad.setdefault
    nb = len(datas)
    nw = len(wide)
    total = int(rows.sum())
    padded = _join(datas, spans, wide, pad=True)
    buf = padded[: padded.size - PAD]
    term = buf < 0x80
    ends = np.flatnonzero(term)
    seg_w = (spans[:, wide, 1] - spans[:, wide, 0]).T.reshape(-1)  # column-major, like the buffer
    seg_rows = np.tile(rows, nw)
    cum = np.cumsum(seg_w)
    counts = np.diff(np.searchsorted(ends, cum), prepend=0)
    closed = term[np.maximum(cum - 1, 0)] | (seg_w == 0)
    wrong = np.flatnonzero((counts != seg_rows) | ~closed).tolist()
    for k in wrong:
        name = COLUMNS[wide[k // nb]]
        if closed[k]:
            reason = f"column {name} has {int(counts[k])} values, row_count is {int(rows[k % nb])}"
        else:
            reason = f"column {name} ends inside a varint"
        setbad(which[k % nb], reason)
    if wrong:
        return False
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    too_long = np.flatnonzero(lengths > MAX_VARINT_BYTES)
    if too_long.size:
        for k in np.unique(np.searchsorted(cum, ends[too_long], side="right")).tolist():
            name = COLUMNS[wide[k // nb]]
            setbad(which[k % nb], f"column {name} has a varint longer than {MAX_VARINT_BYTES} bytes")
        return False
    starts2 = starts.reshape(nw, total)
    lengths2 = lengths.reshape(nw, total)
    widest = lengths2.max(axis=1)
    for cls in (widest <= 4, widest > 4):
        sel = np.flatnonzero(cls).tolist()
        if sel:
            values = _decode_known(padded, starts2[sel], lengths2[sel])
            for j, v in zip(sel, values, strict=True):
                out[COLUMNS[wide[j]]] = v
    return True


def decode_group(batches: Sequence[ScannedBatch]) -> GroupColumns:
    """Decode the columns of scanned batches (empty ones add no rows); GroupDecodeError names bad ones."""
    batches = list(batches)
    rows = np.array([b.rows for b in batches], dtype=np.int64)
    bad: dict[int, str] = {}
    nonempty = [i for i, b in enumerate(batches) if b.rows]
    located = [i for i in nonempty if batches[i].spans is not None]
    columns = _decode_spans(batches, located, bad) if located else {}
    if bad:
        raise GroupDecodeError(bad)
    if len(located) != len(nonempty):  # merge runtime-parsed batches in group order (rare)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}
        offsets = np.concatenate([[0], np.cumsum(rows[located])])
        k = lo = hi = 0
        for i in nonempty:
            parsed = batches[i].columns
            if parsed is None:
                lo, hi = int(offsets[k]), int(offsets[k + 1])
                k += 1
            for name in COLUMNS:
                parts[name].append(columns[name][lo:hi] if parsed is None else parsed[name])
        columns = {name: np.concatenate(parts[name]) for name in COLUMNS}
    if nonempty:
        nrows = rows[nonempty]
        starts = np.cumsum(nrows) - nrows
        cc_max = np.maximum.reduceat(columns["cc_index"], starts)
        plen_max = np.maximum.reduceat(columns["client_prefix_len"], starts)
        for j, i in enumerate(nonempty):
            names = len(batches[i].header.cc_names)
            if int(cc_max[j]) >= names:
                bad[i] = f"cc_index {int(cc_max[j])} outside cc_names ({names} names)"
            elif int(plen_max[j]) > MAX_PREFIX_LEN:
                bad[i] = f"client_prefix_len {int(plen_max[j])} > {MAX_PREFIX_LEN}"
    if bad:
        raise GroupDecodeError(bad)
    return GroupColumns(batches, rows, columns)


def decode_all(batches: Sequence[ScannedBatch]) -> tuple[GroupColumns, dict[int, str]]:
    """decode_group, dropping bad batches: (columns of the good ones, {index: reason})."""
    remaining = list(range(len(batches)))
    bad_all: dict[int, str] = {}
    while True:
        try:
            group = decode_group([batches[i] for i in remaining])
        except GroupDecodeError as exc:
            for local, reason in exc.bad.items():
                bad_all[remaining[local]] = reason
            remaining = [g for k, g in enumerate(remaining) if k not in exc.bad]
            continue
        return group, bad_all


def decode_batch(data: bytes) -> DecodedBatch:
    """Parse and validate one serialized TcpInfoBatch; raises BatchDecodeError."""
    scanned = scan_batch(data)
    rows = scanned.rows
    if rows:
        try:
            group = decode_group([scanned])
        except GroupDecodeError as exc:
            raise BatchDecodeError(exc.bad[0]) from None
        columns = {name: group.columns[name].astype(COLUMN_DTYPES[name], copy=False) for name in COLUMNS}
    else:
        columns = empty_columns(0)
    h = scanned.header
    return DecodedBatch(
        schema_version=h.schema_version,
        collector_version=h.collector_version,
        host=h.host,
        pop=h.pop,
        netns=h.netns,
        sequence=h.sequence,
        run_id=h.run_id,
        poll_start_ns=h.poll_start_ns,
        poll_end_ns=h.poll_end_ns,
        sockets_seen=h.sockets_seen,
        sockets_exported=h.sockets_exported,
        sockets_filtered=h.sockets_filtered,
        parse_errors={e.kind: e.count for e in h.parse_errors},
        batch_index=h.batch_index,
        batch_count=h.batch_count,
        row_count=rows,
        cc_names=list(h.cc_names),
        client_prefix_len_v4=h.client_prefix_len_v4,
        client_prefix_len_v6=h.client_prefix_len_v6,
        columns=columns,
    )
