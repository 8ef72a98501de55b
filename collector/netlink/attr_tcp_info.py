"""struct tcp_info (linux/tcp.h) layout: byte offset and size of each exported field.

The kernel sends INET_DIAG_INFO with its own sizeof(struct tcp_info); a field is
present only when `offset + size <= tcp_info_len`.  Lengths seen in practice:

    104  3.x (up to total_retrans)      192  4.10-4.17 (up to sndbuf_limited)
    224  4.18-5.3 (+delivered..reord_seen)   232  5.4-6.1 (+rcv_ooopack, snd_wnd)
    240  6.2-6.6 (+rcv_wnd, rehash)     248  6.7+ (+total_rto, ...)

Fields past the received length are zero (the parser masks them) and the
row's `tcp_info_len` column tells a reader which ones were really sent.
Bit fields (snd_wscale/rcv_wscale nibbles, delivery_rate_app_limited bit) are
listed separately.  Names are the TcpInfoBatch / ClickHouse column names.
"""

from __future__ import annotations

import numpy as np

#: Largest struct tcp_info this collector knows (Linux 6.7+); longer attributes are truncated to it.
TCP_INFO_MAX = 248
TCP_INFO_WORDS = TCP_INFO_MAX // 4

#: (column name, byte offset, size in bytes) of the plain integer fields.
FIELDS: tuple[tuple[str, int, int], ...] = (
    ("ca_state", 1, 1),
    ("retransmits", 2, 1),
    ("probes", 3, 1),
    ("backoff", 4, 1),
    ("options", 5, 1),
    ("rto", 8, 4),
    ("ato", 12, 4),
    ("snd_mss", 16, 4),
    ("rcv_mss", 20, 4),
    ("unacked", 24, 4),
    ("sacked", 28, 4),
    ("lost", 32, 4),
    ("retrans", 36, 4),
    ("fackets", 40, 4),
    ("last_data_sent", 44, 4),
    ("last_ack_sent", 48, 4),
    ("last_data_recv", 52, 4),
    ("last_ack_recv", 56, 4),
    ("pmtu", 60, 4),
    ("rcv_ssthresh", 64, 4),
    ("rtt", 68, 4),
    ("rttvar", 72, 4),
    ("snd_ssthresh", 76, 4),
    ("snd_cwnd", 80, 4),
    ("advmss", 84, 4),
    ("reordering", 88, 4),
    ("rcv_rtt", 92, 4),
    ("rcv_space", 96, 4),
    ("total_retrans", 100, 4),
    ("pacing_rate", 104, 8),
    ("max_pacing_rate", 112, 8),
    ("bytes_acked", 120, 8),
    ("bytes_received", 128, 8),
    ("segs_out", 136, 4),
    ("segs_in", 140, 4),
    ("notsent_bytes", 144, 4),
    ("min_rtt", 148, 4),
    ("data_segs_in", 152, 4),
    ("data_segs_out", 156, 4),
    ("delivery_rate", 160, 8),
    ("busy_time", 168, 8),
    ("rwnd_limited", 176, 8),
    ("sndbuf_limited", 184, 8),
    ("delivered", 192, 4),
    ("delivered_ce", 196, 4),
    ("bytes_sent", 200, 8),
    ("bytes_retrans", 208, 8),
    ("dsack_dups", 216, 4),
    ("reord_seen", 220, 4),
    ("rcv_ooopack", 224, 4),
    ("snd_wnd", 228, 4),
    ("rcv_wnd", 232, 4),
    ("rehash", 236, 4),
    ("total_rto", 240, 2),
    ("total_rto_recoveries", 242, 2),
    ("total_rto_time", 244, 4),
)

#: Byte 6: snd_wscale low nibble, rcv_wscale high nibble; byte 7 bit 0: delivery_rate_app_limited.
WSCALE_BYTE = 6
APP_LIMITED_BYTE = 7
BITFIELD_COLUMNS = ("snd_wscale", "rcv_wscale", "app_limited")

_FORMATS = {1: "u1", 2: "=u2", 4: "=u4", 8: "=u8"}

#: Structured dtype over TCP_INFO_MAX bytes of (zero-padded) tcp_info.
TCP_INFO_DTYPE = np.dtype(
    {
        "names": [name for name, _, _ in FIELDS] + ["_flags"],
        "formats": [_FORMATS[size] for _, _, size in FIELDS] + ["(2,)u1"],
        "offsets": [off for _, off, _ in FIELDS] + [WSCALE_BYTE],
        "itemsize": TCP_INFO_MAX,
    }
)


def present_fields(tcp_info_len: int) -> list[str]:
    """Names of the fields a kernel sending `tcp_info_len` bytes provides."""
    names = [name for name, off, size in FIELDS if off + size <= tcp_info_len]
    if tcp_info_len > APP_LIMITED_BYTE:
        names[5:5] = list(BITFIELD_COLUMNS)
    return names
