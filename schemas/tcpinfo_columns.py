"""The TcpInfoBatch column table (schemas/tcpinfo.proto, schema_version 2) without the protobuf runtime.

COLUMN_TABLE names every packed column field of TcpInfoBatch: (name, field number, kind);
tests/contract/test_tcpinfo_decode.py checks it against the generated descriptor.  The rest is
derived from it: column names in field-number order, their numpy dtypes and wire widths.
Shared by the encoder (schemas.tcpinfo_encode) and the decoder (schemas.tcpinfo_decode)."""

from __future__ import annotations

import numpy as np

from schemas.wire import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES  # the batch caps, the contract's (numpy-free)
from schemas.wire import DEFAULT_MAX_ROWS as DEFAULT_MAX_ROWS

SCHEMA_VERSION = 2
FIRST_COLUMN_FIELD = 32

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
SPEC: list[tuple[str, int, np.dtype]] = [(name, num, _KIND_DTYPES[kind]) for name, num, kind in COLUMN_TABLE]
ADDRESS_COLUMNS: frozenset[str] = frozenset(name for name, _, kind in COLUMN_TABLE if kind == "bytes16")
#: Column names in field-number order.
COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in SPEC)
#: Decoded dtype per column (uint8 for the (rows, 16) address columns).
COLUMN_DTYPES: dict[str, np.dtype] = {name: dt for name, _, dt in SPEC}
IS_ADDR: tuple[bool, ...] = tuple(name in ADDRESS_COLUMNS for name in COLUMNS)
#: Bytes per row of each column on the wire (4, 8, or 16 for addresses).
WIDTHS: tuple[int, ...] = tuple(16 if a else dt.itemsize for a, (_, _, dt) in zip(IS_ADDR, SPEC, strict=True))
#: Bytes of one row over all columns.
ROW_BYTES = sum(WIDTHS)
