"""Fast, vectorized TcpInfoBatch decoding for ingest: many messages at once, column-major.

collector.batch_codec.decode_batch is the reference decoder (protobuf runtime,
one message at a time); converting its repeated fields to numpy costs ~70 ns a
value, far too slow for a loader.  This module decodes the same wire format
with the same validation and errors, but:

  * scan_batch() walks the top-level fields of one message (a short Python
    loop, ~100 fields), parses the header fields with the protobuf runtime and
    records where each packed column lies; anything unusual (unpacked or
    repeated column fields, groups, truncation) falls back to decode_batch, so
    odd-but-valid encodings still decode and bad ones raise BatchDecodeError;
  * decode_group() joins column payloads of many scanned messages column-major
    and decodes every column's varints with a few numpy passes (fast paths for
    all-one-byte and fixed-width columns), then checks per message that each
    column holds exactly row_count values, client_prefix_len <= 128 and
    cc_index < len(cc_names).  Messages failing that are reported by index
    (GroupDecodeError) so the caller can dead-letter them and decode the rest.

Pure functions; no I/O.  Varint columns come out as unsigned integers of the
smallest of uint8 / uint32 / uint64 their encoded widths allow (callers cast to
the column type), address columns as (rows, 16) uint8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from collector.batch_codec import (
    ADDRESS_COLUMNS,
    SCHEMA_VERSION,
    BatchDecodeError,
    DecodedBatch,
    decode_batch,
)
from schemas.tcpinfo_pb2 import TcpInfoBatch

FIRST_COLUMN_FIELD = 32
MAX_VARINT_BYTES = 10


def _column_fields() -> list[tuple[int, str]]:
    return sorted(
        (fd.number, fd.name) for fd in TcpInfoBatch.DESCRIPTOR.fields if fd.number >= FIRST_COLUMN_FIELD
    )


_FIELDS = _column_fields()
COLUMN_NAMES: tuple[str, ...] = tuple(name for _, name in _FIELDS)
_COL_INDEX: dict[int, int] = {num: i for i, (num, _) in enumerate(_FIELDS)}
_IS_ADDR: tuple[bool, ...] = tuple(name in ADDRESS_COLUMNS for name in COLUMN_NAMES)
VARINT_COLUMNS: tuple[int, ...] = tuple(i for i, a in enumerate(_IS_ADDR) if not a)
ADDR_COLUMNS: tuple[int, ...] = tuple(i for i, a in enumerate(_IS_ADDR) if a)
_ZEROS = bytes(16)


class _Unusual(Exception):
    """The fast scan does not handle this encoding; use the reference decoder."""


@dataclass(slots=True)
class ScannedBatch:
    """One message after the field scan: header parsed, column payload positions known.

    `decoded` is set instead of `spans` when the reference decoder handled the message.
    """

    data: bytes
    header: TcpInfoBatch
    spans: list[tuple[int, int] | None] | None
    decoded: DecodedBatch | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return int(self.header.row_count)

    @property
    def identity(self) -> tuple[str, int, int]:
        """(host, run_id, sequence): the batch identity used for deduplication."""
        h = self.header
        return (h.host, int(h.run_id), int(h.sequence))


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


def _scan_fields(data: bytes) -> tuple[bytes, list[tuple[int, int] | None]]:
    """(header field bytes, column spans) or _Unusual."""
    n = len(data)
    pos = 0
    spans: list[tuple[int, int] | None] = [None] * len(_FIELDS)
    header_parts: list[tuple[int, int]] = []
    col_index = _COL_INDEX
    while pos < n:
        start = pos
        b = data[pos]
        if b < 0x80:
            tag = b
            pos += 1
        else:
            tag, pos = _read_varint(data, pos)
        wire = tag & 7
        if wire == 2:
            if pos >= n:
                raise _Unusual
            b = data[pos]
            if b < 0x80:
                length = b
                pos += 1
            else:
                length, pos = _read_varint(data, pos)
            end = pos + length
        elif wire == 0:
            _, end = _read_varint(data, pos)
        elif wire == 1:
            end = pos + 8
        elif wire == 5:
            end = pos + 4
        else:
            raise _Unusual
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
                raise _Unusual
            spans[col] = (pos, end)
        pos = end
    if len(header_parts) == 1:
        s, e = header_parts[0]
        header = data[s:e] if (s, e) != (0, n) else data
    else:
        header = b"".join(data[s:e] for s, e in header_parts)
    return header, spans


def _check_header(h: TcpInfoBatch) -> None:
    if h.schema_version != SCHEMA_VERSION:
        raise BatchDecodeError(
            f"schema_version {h.schema_version} not supported (this reader knows {SCHEMA_VERSION})"
        )
    if h.batch_count and h.batch_index >= h.batch_count:
        raise BatchDecodeError(f"batch_index {h.batch_index} >= batch_count {h.batch_count}")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_COL_TAGS: tuple[bytes, ...] = tuple(_varint_bytes((num << 3) | 2) for num, _ in _FIELDS)
_ADDR_SET = frozenset(ADDRESS_COLUMNS)
assert all(len(t) == 2 for t in _COL_TAGS)


def _canonical(data: bytes) -> tuple[TcpInfoBatch, list[tuple[int, int] | None]] | None:
    """The collector's layout: header fields, then every column once in field order.

    Returns (header, spans), raises BatchDecodeError for bad column lengths, or
    None when the message is laid out differently (the general scan handles it).
    """
    n = len(data)
    first = _COL_TAGS[0]
    pos = data.find(first)
    # the header must end exactly where the first column starts: parse it and compare
    while pos >= 0:
        header = TcpInfoBatch()
        try:
            if header.ParseFromString(data[:pos]) == pos:
                break
        except (DecodeError, RuntimeError, ValueError):
            pass
        pos = data.find(first, pos + 1)
    else:
        return None
    if any(fd.number >= FIRST_COLUMN_FIELD for fd, _ in header.ListFields()):
        return None  # a column field before the body: let the general scan decide
    rows = int(header.row_count)
    _check_header(header)
    spans: list[tuple[int, int] | None] = []
    append = spans.append
    max_varint = MAX_VARINT_BYTES * rows
    for tag, name in zip(_COL_TAGS, COLUMN_NAMES, strict=True):
        if not data.startswith(tag, pos) or pos + 3 > n:
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
        if name in _ADDR_SET:
            if length != 16 * rows:
                raise BatchDecodeError(
                    f"column {name} has {length} bytes, expected 16 * row_count = {16 * rows}"
                )
        elif length < rows or length > max_varint:
            if rows == 0:
                raise BatchDecodeError(f"column {name} has some values, row_count is 0")
            raise BatchDecodeError(f"column {name}: {length} bytes cannot hold row_count = {rows} values")
        append((pos, end))
        pos = end
    if pos != n:
        return None
    return header, spans


def scan_batch(data: bytes) -> ScannedBatch:
    """Scan one serialized TcpInfoBatch; raises BatchDecodeError with a one-line reason."""
    data = bytes(data)
    fast = _canonical(data)
    if fast is not None:
        return ScannedBatch(data, fast[0], fast[1])
    try:
        header_bytes, spans = _scan_fields(data)
    except _Unusual:
        return _reference(data)
    header = TcpInfoBatch()
    try:
        header.ParseFromString(header_bytes)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BatchDecodeError(f"not a TcpInfoBatch: {exc}") from exc
    _check_header(header)
    rows = int(header.row_count)
    for i, span in enumerate(spans):
        nbytes = 0 if span is None else span[1] - span[0]
        name = COLUMN_NAMES[i]
        if _IS_ADDR[i]:
            if nbytes != 16 * rows:
                raise BatchDecodeError(
                    f"column {name} has {nbytes} bytes, expected 16 * row_count = {16 * rows}"
                )
        elif nbytes < rows or nbytes > MAX_VARINT_BYTES * rows:
            if span is None or rows == 0:
                raise BatchDecodeError(
                    f"column {name} has {'no' if span is None else 'some'} values, row_count is {rows}"
                )
            raise BatchDecodeError(f"column {name}: {nbytes} bytes cannot hold row_count = {rows} values")
    return ScannedBatch(data, header, spans)


def _reference(data: bytes) -> ScannedBatch:
    decoded = decode_batch(data)
    header = TcpInfoBatch(
        schema_version=decoded.schema_version,
        collector_version=decoded.collector_version,
        host=decoded.host,
        pop=decoded.pop,
        netns=decoded.netns,
        sequence=decoded.sequence,
        run_id=decoded.run_id,
        poll_start_ns=decoded.poll_start_ns,
        poll_end_ns=decoded.poll_end_ns,
        sockets_seen=decoded.sockets_seen,
        sockets_exported=decoded.sockets_exported,
        sockets_filtered=decoded.sockets_filtered,
        batch_index=decoded.batch_index,
        batch_count=decoded.batch_count,
        row_count=decoded.row_count,
        cc_names=decoded.cc_names,
        client_prefix_len_v4=decoded.client_prefix_len_v4,
        client_prefix_len_v6=decoded.client_prefix_len_v6,
    )
    if decoded.row_count and int(decoded.columns["client_prefix_len"].max()) > 128:
        raise BatchDecodeError(f"client_prefix_len {int(decoded.columns['client_prefix_len'].max())} > 128")
    return ScannedBatch(data, header, None, decoded)


class GroupDecodeError(Exception):
    """Some messages of a group failed column validation: {index in group: reason}."""

    def __init__(self, bad: dict[int, str]) -> None:
        super().__init__(f"{len(bad)} bad batches")
        self.bad = bad


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


def _compact(x: np.ndarray) -> np.ndarray:
    """Drop the continuation bit of each of the 8 bytes and pack the 7-bit groups (little-endian)."""
    x &= _M7
    for keep, move, shift in _PAIRS:
        t = x & move
        t >>= shift
        x &= keep
        x |= t
    return x


def _compact32(x: np.ndarray) -> np.ndarray:
    """_compact for 4-byte windows (varints of at most 4 bytes, values < 2**28)."""
    x &= _M7_32
    for keep, move, shift in _PAIRS_32:
        t = x & move
        t >>= shift
        x &= keep
        x |= t
    return x


def _windows(padded: np.ndarray, dtype: str = "<u8") -> np.ndarray:
    """Little-endian integer view starting at every byte of `padded` (which ends with >= 8 spare bytes)."""
    return np.ndarray(shape=(padded.size - 8,), dtype=dtype, buffer=padded, strides=(1,))


def _decode_known(padded: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Values of the varints at `starts` with `lengths` (uint32 when all are <= 4 bytes, else uint64)."""
    if int(lengths.max()) <= 4:
        x32 = _windows(padded, "<u4")[starts]
        x32 &= _LENMASK_32[lengths]
        return _compact32(x32)
    win = _windows(padded)
    x = win[starts]
    x &= _LENMASK[lengths]
    x = _compact(x)
    long = np.flatnonzero(lengths > 8)
    if long.size:
        hi = win[starts[long] + 8] & _LENMASK[lengths[long] - 8]
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
    return _decode_known(padded, starts, ends - starts + 1)


def _decode_column(
    padded: np.ndarray,
    nbytes: int,
    seg_lengths: np.ndarray,
    rows: np.ndarray,
    name: str,
    bad: dict[int, str],
    idx: list[int],
) -> np.ndarray | None:
    """Validate (each message's segment holds exactly its rows, varints <= 10 bytes) and decode.

    `padded` holds the segments back to back followed by PAD zero bytes.
    """
    buf = padded[:nbytes]
    total = int(rows.sum())
    term = buf < 0x80
    if nbytes == total and bool((seg_lengths == rows).all()) and bool(term.all()):
        return buf  # every value is one byte: the bytes are the values (uint8)
    ends = np.flatnonzero(term)
    seg_ends = np.cumsum(seg_lengths)
    counts = np.diff(np.searchsorted(ends, seg_ends), prepend=0)
    wrong = np.flatnonzero((counts != rows) | ~term[seg_ends - 1])
    for w in wrong.tolist():
        bad.setdefault(idx[w], f"column {name} does not hold row_count = {int(rows[w])} varints")
    if wrong.size:
        return None
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    too_long = np.flatnonzero(lengths > MAX_VARINT_BYTES)
    if too_long.size:
        owners = np.searchsorted(seg_ends, ends[too_long], side="right")
        for w in np.unique(owners).tolist():
            bad.setdefault(idx[w], f"column {name} has a varint longer than 10 bytes")
        return None
    return _decode_known(padded, starts, lengths)


@dataclass
class GroupColumns:
    """Decoded columns of a group of batches, rows in batch order."""

    batches: list[ScannedBatch]
    rows: np.ndarray  # rows per batch (int64)
    columns: dict[str, np.ndarray]


def decode_group(batches: Sequence[ScannedBatch]) -> GroupColumns:
    """Decode the columns of non-empty scanned batches; GroupDecodeError names the bad ones."""
    batches = list(batches)
    rows = np.array([b.rows for b in batches], dtype=np.int64)
    bad: dict[int, str] = {}
    fast = [i for i, b in enumerate(batches) if b.spans is not None and b.rows]
    columns: dict[str, np.ndarray] = {}
    fast_rows = rows[fast]
    total_fast = int(fast_rows.sum())
    if fast:
        datas = [batches[i].data for i in fast]
        spans = np.array([batches[i].spans for i in fast], dtype=np.int64)  # (B, columns, 2)
        seg_all = spans[:, :, 1] - spans[:, :, 0]
        for col, name in enumerate(COLUMN_NAMES):
            starts_l = spans[:, col, 0].tolist()
            ends_l = spans[:, col, 1].tolist()
            pieces = [d[s:e] for d, s, e in zip(datas, starts_l, ends_l, strict=True)]
            if _IS_ADDR[col]:
                columns[name] = np.frombuffer(b"".join(pieces), dtype=np.uint8).reshape(total_fast, 16)
                continue
            pieces.append(_ZEROS)
            padded = np.frombuffer(b"".join(pieces), dtype=np.uint8)
            values = _decode_column(padded, padded.size - PAD, seg_all[:, col], fast_rows, name, bad, fast)
            if values is not None and not bad:
                columns[name] = values
    if not bad and total_fast:
        starts = np.cumsum(fast_rows) - fast_rows
        plen_max = np.maximum.reduceat(columns["client_prefix_len"], starts)
        cc_max = np.maximum.reduceat(columns["cc_index"], starts)
        for j, i in enumerate(fast):
            h = batches[i].header
            if int(cc_max[j]) >= len(h.cc_names):
                bad[i] = f"cc_index {int(cc_max[j])} outside cc_names ({len(h.cc_names)} names)"
            elif int(plen_max[j]) > 128:
                bad[i] = f"client_prefix_len {int(plen_max[j])} > 128"
    if bad:
        raise GroupDecodeError(bad)
    slow = [i for i, b in enumerate(batches) if b.spans is None and b.rows]
    if not slow:
        return GroupColumns(batches, rows, columns)
    # Merge reference-decoded batches in group order (rare: unusual encodings).
    order = [i for i, b in enumerate(batches) if b.rows]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in COLUMN_NAMES}
    fast_pos = 0
    fast_offsets = np.concatenate([[0], np.cumsum(fast_rows)])
    for i in order:
        b = batches[i]
        if b.decoded is not None:
            for name in COLUMN_NAMES:
                arr = b.decoded.columns[name]
                parts[name].append(arr if name in ADDRESS_COLUMNS else arr.astype(np.uint64))
        else:
            lo, hi = int(fast_offsets[fast_pos]), int(fast_offsets[fast_pos + 1])
            fast_pos += 1
            for name in COLUMN_NAMES:
                parts[name].append(columns[name][lo:hi])
    merged = {name: np.concatenate(parts[name]) for name in COLUMN_NAMES}
    return GroupColumns(batches, rows, merged)


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
            bad_local = set(exc.bad)
            remaining = [g for k, g in enumerate(remaining) if k not in bad_local]
            continue
        return group, bad_all
