"""Turn decoded batch columns into `tcpinfo` table columns (pure, vectorized).

Header values (time from poll_start_ns, time_ns, pop, host, netns, sequence,
run_id) are repeated per row; `cc` is cc_names[cc_index] of each batch;
`prefix` is the text form of client_prefix/client_prefix_len ("198.51.100.0/24",
"2001:db8:0:100::/56"; IPv4-mapped prefixes print as IPv4), formatted once per
distinct prefix and indexed back.  String columns are kept as codes into a
small table of distinct values (StrColumn) so a writer can serialize them
without one Python object per row.
"""

from __future__ import annotations

import ipaddress

import numpy as np

from controller.store.columns import Prepared, StrColumn, numpy_dtype, plain_columns
from schemas.tcpinfo_columns import COLUMNS
from schemas.tcpinfo_decode import GroupColumns

#: tcpinfo column -> ClickHouse type (as in sql/migrations/001_tcpinfo.sql, without LowCardinality).
TCPINFO_TYPES: dict[str, str] = {}


def _types() -> dict[str, str]:
    head = {
        "time": "DateTime",
        "time_ns": "UInt64",
        "pop": "String",
        "host": "String",
        "netns": "String",
        "sequence": "UInt64",
        "run_id": "UInt64",
        "family": "UInt8",
        "prefix": "String",
        "src_addr": "FixedString(16)",
        "dst_addr": "FixedString(16)",
        "src_port": "UInt16",
        "dst_port": "UInt16",
        "cookie": "UInt64",
        "state": "UInt8",
        "cc": "String",
        "tcp_info_len": "UInt16",
        "has_bbr_info": "UInt8",
        "uid": "UInt32",
        "inode": "UInt32",
    }
    u8 = (
        "ca_state",
        "retransmits",
        "probes",
        "backoff",
        "options",
        "snd_wscale",
        "rcv_wscale",
        "app_limited",
    )
    u64 = {
        "pacing_rate",
        "max_pacing_rate",
        "bytes_acked",
        "bytes_received",
        "delivery_rate",
        "busy_time",
        "rwnd_limited",
        "sndbuf_limited",
        "bytes_sent",
        "bytes_retrans",
        "bbr_bw",
    }
    out = dict(head)
    # every other wire column is a tcp_info / BBR / skmeminfo counter of the same name
    not_in_table = {"cc_index", "client_prefix", "client_prefix_len"}  # -> cc, prefix
    for name in COLUMNS:
        if name in out or name in not_in_table:
            continue
        out[name] = "UInt8" if name in u8 else "UInt64" if name in u64 else "UInt32"
    return out


TCPINFO_TYPES.update(_types())


def _per_batch_strings(values: list[str], rows: np.ndarray) -> StrColumn:
    table: dict[str, int] = {}
    codes = [table.setdefault(v, len(table)) for v in values]
    return StrColumn(np.repeat(np.array(codes, dtype=np.int32), rows), list(table))


def format_prefix(raw: bytes, length: int) -> str:
    """One prefix as text; IPv4-mapped addresses print as IPv4 (length 0-32, or 96-128 mapped bits)."""
    if raw[:12] == b"\x00" * 10 + b"\xff\xff" and (length <= 32 or length >= 96):
        v4_len = length - 96 if length >= 96 else length
        return str(ipaddress.IPv4Network((raw[12:], v4_len), strict=False))
    return str(ipaddress.IPv6Network((raw, min(length, 128)), strict=False))


_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)


def prefix_column(prefix16: np.ndarray, plen: np.ndarray) -> StrColumn:
    """Distinct (prefix, length) pairs formatted once; rows get codes."""
    n = prefix16.shape[0]
    if n == 0:
        return StrColumn(np.zeros(0, dtype=np.int32), [])
    words = np.ascontiguousarray(prefix16, dtype=np.uint8).view(">u8").astype(np.uint64)
    lens = plen.astype(np.uint64)
    key = (words[:, 0] * _K1) ^ (words[:, 1] * _K2) ^ (lens << np.uint64(56)) ^ lens
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if not (
        np.array_equal(prefix16[first][inverse], prefix16) and np.array_equal(plen[first][inverse], plen)
    ):  # hash collision (practically never): exact but slower path
        rows = np.concatenate([np.ascontiguousarray(prefix16, dtype=np.uint8), lens.astype(np.uint8)[:, None]], 1)
        _, first, inverse = np.unique(rows.view("S17").ravel(), return_index=True, return_inverse=True)
    raw = np.ascontiguousarray(prefix16[first], dtype=np.uint8)
    values = [format_prefix(raw[i].tobytes(), int(plen[first[i]])) for i in range(len(first))]
    return StrColumn(inverse.astype(np.int32).reshape(-1), values)


def cc_column(cc_names: list[list[str]], cc_index: np.ndarray, rows: np.ndarray) -> StrColumn:
    """cc_names[cc_index] per batch (batches' name tables may differ)."""
    table: dict[str, int] = {}
    flat: list[int] = []
    offsets = np.zeros(len(cc_names), dtype=np.int64)
    for i, names in enumerate(cc_names):
        offsets[i] = len(flat)
        flat.extend(table.setdefault(n, len(table)) for n in names)
    lut = np.array(flat or [0], dtype=np.int32)
    codes = lut[cc_index.astype(np.int64) + np.repeat(offsets, rows)]
    return StrColumn(codes, list(table) or [""])


def prepare(group: GroupColumns) -> tuple[Prepared, int]:
    """(tcpinfo columns for the group's non-empty batches, in TCPINFO_TYPES order; row count)."""
    batches = [b for b in group.batches if b.rows]
    rows = np.array([b.rows for b in batches], dtype=np.int64)
    total = int(rows.sum())
    hdr = [b.header for b in batches]
    cols = group.columns
    out: Prepared = {}
    start_ns = np.array([h.poll_start_ns for h in hdr], dtype=np.uint64)
    out["time"] = np.repeat((start_ns // np.uint64(1_000_000_000)).astype("<u4"), rows)
    out["time_ns"] = np.repeat(start_ns, rows)
    out["pop"] = _per_batch_strings([h.pop for h in hdr], rows)
    out["host"] = _per_batch_strings([h.host for h in hdr], rows)
    out["netns"] = _per_batch_strings([h.netns for h in hdr], rows)
    out["sequence"] = np.repeat(np.array([h.sequence for h in hdr], dtype=np.uint64), rows)
    out["run_id"] = np.repeat(np.array([h.run_id for h in hdr], dtype=np.uint64), rows)
    out["prefix"] = prefix_column(cols["client_prefix"], cols["client_prefix_len"])
    out["cc"] = cc_column([list(h.cc_names) for h in hdr], cols["cc_index"], rows)
    for name, ch_type in TCPINFO_TYPES.items():
        if name in out:
            continue
        col = cols[name]
        if ch_type == "FixedString(16)":
            out[name] = col
        else:
            out[name] = col.astype(numpy_dtype(ch_type), copy=False)
    assert all(len(v) == total for v in out.values())
    return {name: out[name] for name in TCPINFO_TYPES}, total  # the table's order, whatever the group


def to_insert_columns(prepared: Prepared) -> dict[str, np.ndarray]:
    """Plain numpy/object columns for Store.insert_columns (chDB path)."""
    return plain_columns(prepared)
