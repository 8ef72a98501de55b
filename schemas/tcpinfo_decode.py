"""TcpInfoBatch decoder: serialized protobuf -> numpy columns (pure, no I/O).

The one decoder of the telemetry wire format (schemas/tcpinfo.proto, schema_version
2); the encoder is schemas.tcpinfo_encode and the column table schemas.tcpinfo_columns.
Ingest and the lab use it.

Columns are packed fixed32 / fixed64 (and 16-byte addresses), so encoding a
column is one numpy tobytes() and decoding one np.frombuffer(); the packed
column fields are appended to the protobuf-serialized header (protobuf allows
fields in any order, so `header + body` is one valid TcpInfoBatch).

Decoding accepts every valid protobuf encoding:

  * scan_batch() locates the column payloads of one message.  The layout this
    encoder writes (header, then every column once, packed, in field order) is
    recognized by a quick check; any other order, unknown fields or repeated
    header fields go through a field-by-field scan; encodings the scan does
    not handle (unpacked or split column fields, groups) are parsed by the
    protobuf runtime, which is the authority on the format.  Each column must
    hold exactly row_count values (its payload is width * row_count bytes).
  * decode_group() / decode_all() decode the columns of many scanned messages
    at once, column-major (one join and one frombuffer per column width), and
    check per message that cc_index < len(cc_names) and client_prefix_len <=
    128; a bad message is named by its index so the rest still decode (ingest
    dead-letters the bad one).
  * decode_batch() is the one-message API: scan + decode, BatchDecodeError
    with a one-line reason for anything the contract forbids.
  * Header strings have length limits (HEADER_LIMITS, in UTF-8 bytes; at most
    MAX_CC_NAMES congestion-control names of MAX_CC_NAME_BYTES each; the
    contract's, schemas/wire.py, which the collector checks at start): every
    scan checks them, so a batch over a limit is refused with its reason
    before ingest looks it up or stores anything (see schemas/tcpinfo.proto).

Column names are the proto field names (== ClickHouse `tcpinfo` columns).
Integer columns decode as uint32 / uint64 (the proto types); address columns
(src_addr, dst_addr, client_prefix) are uint8 arrays of shape (rows, 16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from dyncc_common.errors import DynccError
from schemas.tcpinfo_columns import (
    ADDRESS_COLUMNS,
    COLUMN_DTYPES,
    COLUMNS,
    FIRST_COLUMN_FIELD,
    IS_ADDR,
    SCHEMA_VERSION,
    SPEC,
    WIDTHS,
)
from schemas.tcpinfo_encode import (
    TAGS,
    encode_varint,
)
from schemas.tcpinfo_pb2 import TcpInfoBatch
from schemas.wire import HEADER_LIMITS, MAX_CC_NAME_BYTES, MAX_CC_NAMES

MAX_PREFIX_LEN = 128

__all__ = [
    "HEADER_LIMITS",
    "MAX_CC_NAMES",
    "MAX_CC_NAME_BYTES",
    "BatchDecodeError",
    "DecodedBatch",
    "GroupColumns",
    "ScannedBatch",
    "decode_all",
    "decode_batch",
    "decode_group",
    "empty_columns",
    "header_field_error",
    "scan_batch",
]


class BatchDecodeError(DynccError, ValueError):
    """A message that is not a valid schema-v2 TcpInfoBatch; str() is the reason."""


_COL_INDEX: dict[int, int] = {num: i for i, (_, num, _) in enumerate(SPEC)}


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


# ---------------------------------------------------------------- scanning

Span = tuple[int, int]


@dataclass(slots=True)
class ScannedBatch:
    """One message with its header parsed and its column payloads located (not yet decoded).

    `spans` is a (columns, 2) int64 array: row i is the [start, end) of column
    i's packed payload in `data` ((0, 0): absent).  When the protobuf runtime
    had to parse the message, `spans` is None and `columns` holds its columns
    instead.
    """

    data: bytes
    header: TcpInfoBatch
    spans: np.ndarray | None
    columns: dict[str, np.ndarray] | None = None

    @property
    def rows(self) -> int:
        return int(self.header.row_count)

    @property
    def identity(self) -> tuple[str, int, int]:
        """(host, run_id, sequence): the batch identity used for deduplication."""
        h = self.header
        return (h.host, int(h.run_id), int(h.sequence))


class _Unusual(DynccError):
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


def _utf8_over(value: str, limit: int) -> int:
    """The UTF-8 length of `value` if it is over `limit` bytes, else 0."""
    n = len(value)
    if n * 4 <= limit:  # at most 4 bytes a character
        return 0
    size = len(value.encode("utf-8", "surrogatepass"))
    return size if size > limit else 0


def header_field_error(name: str, value: str) -> str | None:
    """Why header string `name` (host, pop, netns) cannot be `value`, or None when it is within its limit."""
    size = _utf8_over(value, HEADER_LIMITS[name])
    if size:
        return f"{name} is {size} bytes, over the {HEADER_LIMITS[name]}-byte limit"
    return None


def _check_header(h: TcpInfoBatch) -> None:
    if h.schema_version != SCHEMA_VERSION:
        raise BatchDecodeError(f"schema_version {h.schema_version} not supported (this reader knows {SCHEMA_VERSION})")
    if h.batch_count and h.batch_index >= h.batch_count:
        raise BatchDecodeError(f"batch_index {h.batch_index} >= batch_count {h.batch_count}")
    for name in HEADER_LIMITS:
        reason = header_field_error(name, getattr(h, name))
        if reason:
            raise BatchDecodeError(reason)
    names = h.cc_names
    if len(names) > MAX_CC_NAMES:
        raise BatchDecodeError(f"{len(names)} cc_names, over the limit of {MAX_CC_NAMES}")
    for cc in names:
        size = _utf8_over(cc, MAX_CC_NAME_BYTES)
        if size:
            raise BatchDecodeError(f"a cc_names entry is {size} bytes, over the {MAX_CC_NAME_BYTES}-byte limit")


def _parse_header(data: bytes) -> TcpInfoBatch:
    header = TcpInfoBatch()
    try:
        header.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BatchDecodeError(f"not a TcpInfoBatch: {exc}") from exc
    return header


_WIDTH_ARR = np.array(WIDTHS, dtype=np.int64)


def _check_spans(rows: int, spans: np.ndarray) -> None:
    """Every column holds exactly row_count values: width * row_count bytes."""
    nbytes = spans[:, 1] - spans[:, 0]
    wrong = np.flatnonzero(nbytes != _WIDTH_ARR * rows)
    if not wrong.size:
        return
    i = int(wrong[0])
    name, width, got = COLUMNS[i], WIDTHS[i], int(nbytes[i])
    if IS_ADDR[i]:
        raise BatchDecodeError(f"column {name} has {got} bytes, expected 16 * row_count = {16 * rows}")
    if got % width:
        raise BatchDecodeError(f"column {name} has {got} bytes, not a multiple of {width}")
    raise BatchDecodeError(f"column {name} has {got // width} values, row_count is {rows}")


@dataclass(frozen=True)
class _Layout:
    """Where this encoder puts the columns of a `rows`-row batch, relative to the body start."""

    body_bytes: int
    check_at: np.ndarray  # positions of the tag and length bytes
    check_bytes: np.ndarray  # their expected values
    spans: np.ndarray  # (columns, 2) payload [start, end)


_LAYOUTS: dict[int, _Layout] = {}


def _layout(rows: int) -> _Layout:
    got = _LAYOUTS.get(rows)
    if got is not None:
        return got
    at: list[int] = []
    expect: list[int] = []
    spans = np.empty((len(TAGS), 2), dtype=np.int64)
    pos = 0
    for i, (tag, width) in enumerate(zip(TAGS, WIDTHS, strict=True)):
        frame = tag + encode_varint(rows * width)
        at.extend(range(pos, pos + len(frame)))
        expect.extend(frame)
        pos += len(frame)
        spans[i] = (pos, pos + rows * width)
        pos += rows * width
    layout = _Layout(pos, np.array(at, dtype=np.int64), np.array(expect, dtype=np.uint8), spans)
    if len(_LAYOUTS) >= 4096:  # bounded: batch sizes are few in practice
        _LAYOUTS.clear()
    _LAYOUTS[rows] = layout
    return layout


def _canonical(data: bytes) -> tuple[TcpInfoBatch, np.ndarray] | None:
    """This encoder's layout: header fields, then every column once, packed, in field order.

    Returns (header, spans), or None when the message is laid out differently.
    The header ends where the first column's tag starts: the first candidate
    position whose prefix parses as a message is it (a cut inside a field never
    parses).  With fixed-width columns the rest of the message is determined by
    row_count, so it is checked against the expected layout in one numpy
    comparison of the tag and length bytes.
    """
    first = TAGS[0]
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
    rows = header.row_count
    if not rows or rows > len(data):
        return None
    layout = _layout(rows)
    if len(data) - pos != layout.body_bytes:
        return None
    body = np.frombuffer(data, dtype=np.uint8, offset=pos)
    if not np.array_equal(body.take(layout.check_at), layout.check_bytes):
        return None
    return header, layout.spans + pos


def _scan_fields(data: bytes) -> tuple[bytes, np.ndarray]:
    """(header field bytes, column spans) for any field order; _Unusual for what it can't handle."""
    n = len(data)
    pos = 0
    spans = np.zeros((len(COLUMNS), 2), dtype=np.int64)
    present = [False] * len(COLUMNS)
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
            if wire != 2 or present[col]:
                raise _Unusual  # unpacked or split column: merge semantics are the runtime's
            present[col] = True
            spans[col] = (pos, end)
        pos = end
    header = b"".join(data[s:e] for s, e in header_parts)
    return header, spans


def _runtime_scan(data: bytes) -> ScannedBatch:
    """Any valid encoding, parsed by the protobuf runtime (the slow path: docs/performance.md)."""
    msg = _parse_header(data)
    _check_header(msg)
    rows = msg.row_count
    columns: dict[str, np.ndarray] = {}
    for name, _, dt in SPEC:
        value: Any = getattr(msg, name)
        if name in ADDRESS_COLUMNS:
            if len(value) != 16 * rows:
                raise BatchDecodeError(f"column {name} has {len(value)} bytes, expected 16 * row_count = {16 * rows}")
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
    if fast is not None:  # the layout for row_count: every column's size is right by construction
        header, spans = fast
        _check_header(header)
        return ScannedBatch(data, header, spans)
    try:
        header_bytes, spans = _scan_fields(data)
    except _Unusual:
        return _runtime_scan(data)
    header = _parse_header(header_bytes)
    _check_header(header)
    _check_spans(int(header.row_count), spans)
    return ScannedBatch(data, header, spans)


# ---------------------------------------------------------------- column decoding


class GroupDecodeError(DynccError):
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


def _runs(cols: list[int]) -> list[tuple[int, int]]:
    """[k0, k1) ranges of `cols` (column indexes) that are consecutive in field order."""
    runs: list[tuple[int, int]] = []
    for k, c in enumerate(cols):
        if runs and cols[runs[-1][1] - 1] == c - 1:
            runs[-1] = (runs[-1][0], k + 1)
        else:
            runs.append((k, k + 1))
    return runs


def _width_groups() -> list[tuple[np.dtype, int, list[int], list[tuple[int, int]]]]:
    """(decoded dtype, bytes a row, column indexes, runs) per wire width; addresses are uint8 (rows, 16)."""
    out: list[tuple[np.dtype, int, list[int], list[tuple[int, int]]]] = []
    for dt in (np.dtype("<u4"), np.dtype("<u8")):
        cols = [i for i, (_, _, d) in enumerate(SPEC) if d == dt and not IS_ADDR[i]]
        out.append((dt, dt.itemsize, cols, _runs(cols)))
    addrs = [i for i, a in enumerate(IS_ADDR) if a]
    out.append((np.dtype(np.uint8), 16, addrs, _runs(addrs)))
    return out


_WIDTH_GROUPS = _width_groups()


def _decode_spans(batches: list[ScannedBatch], which: list[int]) -> dict[str, np.ndarray]:
    """Columns of the located (span) batches `which` (their sizes were checked by scan_batch).

    Each width's columns are copied into one (columns, total rows) array.  In
    a message, a run of columns that are consecutive in field order and equally
    spaced (this encoder's layout: same width, same frame size) is copied as
    one strided view; anything else column by column.
    """
    rows = [batches[i].rows for i in which]
    total = sum(rows)
    spans = np.stack([batches[i].spans for i in which])  # type: ignore[misc]  # (B, columns, 2)
    columns: dict[str, np.ndarray] = {}
    for dt, width, cols, runs in _WIDTH_GROUPS:
        # copy in units of the column's integer type (addresses: two uint64 a row): strided
        # copies of 8-bit units are several times slower
        unit = np.dtype("<u8") if width == 16 else dt
        per_row = width // unit.itemsize
        out = np.empty((len(cols), total * per_row), dtype=unit)
        starts = spans[:, cols, 0]  # (B, K)
        # per batch and run: the spacing of its columns, or -1 when they are not equally spaced
        steps = []
        for k0, k1 in runs:
            if k1 - k0 == 1:
                steps.append(np.zeros(len(which), dtype=np.int64))
                continue
            d = np.diff(starts[:, k0:k1], axis=1)
            steps.append(np.where((d == d[:, :1]).all(axis=1), d[:, 0], -1))
        step_rows = np.stack(steps, axis=1).tolist()  # (B, runs)
        start_rows = starts.tolist()
        offset = 0
        usize = unit.itemsize
        for b, i in enumerate(which):
            data = memoryview(batches[i].data)
            n = rows[b] * per_row
            dst = slice(offset, offset + n)
            st = start_rows[b]
            for (k0, k1), step in zip(runs, step_rows[b], strict=True):
                if step >= 0:
                    out[k0:k1, dst] = np.ndarray((k1 - k0, n), unit, data, st[k0], (step, usize))
                else:
                    for k in range(k0, k1):
                        out[k, dst] = np.ndarray((n,), unit, data, st[k])
            offset += n
        block = out.view(np.uint8).reshape(len(cols), total, 16) if width == 16 else out
        for k, col in enumerate(cols):
            columns[COLUMNS[col]] = block[k]
    return columns


def decode_group(batches: Sequence[ScannedBatch]) -> GroupColumns:
    """Decode the columns of scanned batches (empty ones add no rows); GroupDecodeError names bad ones."""
    batches = list(batches)
    rows = np.array([b.rows for b in batches], dtype=np.int64)
    bad: dict[int, str] = {}
    nonempty = [i for i, b in enumerate(batches) if b.rows]
    located = [i for i in nonempty if batches[i].spans is not None]
    columns = _decode_spans(batches, located) if located else {}
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
