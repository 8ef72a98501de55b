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

The kernel struct (include/uapi/linux/tcp.h, 6.7+; byte offsets on the left):

    struct tcp_info {
      0   __u8  tcpi_state;          1 __u8 tcpi_ca_state;   2 __u8 tcpi_retransmits;
      3   __u8  tcpi_probes;         4 __u8 tcpi_backoff;    5 __u8 tcpi_options;
      6   __u8  tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4;
      7   __u8  tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2;
      8   __u32 tcpi_rto, tcpi_ato, tcpi_snd_mss, tcpi_rcv_mss;
     24   __u32 tcpi_unacked, tcpi_sacked, tcpi_lost, tcpi_retrans, tcpi_fackets;
     44   __u32 tcpi_last_data_sent, tcpi_last_ack_sent, tcpi_last_data_recv, tcpi_last_ack_recv;
     60   __u32 tcpi_pmtu, tcpi_rcv_ssthresh, tcpi_rtt, tcpi_rttvar, tcpi_snd_ssthresh,
              tcpi_snd_cwnd, tcpi_advmss, tcpi_reordering;
     92   __u32 tcpi_rcv_rtt, tcpi_rcv_space;
    100   __u32 tcpi_total_retrans;
    104   __u64 tcpi_pacing_rate, tcpi_max_pacing_rate, tcpi_bytes_acked, tcpi_bytes_received;
    136   __u32 tcpi_segs_out, tcpi_segs_in;
    144   __u32 tcpi_notsent_bytes, tcpi_min_rtt, tcpi_data_segs_in, tcpi_data_segs_out;
    160   __u64 tcpi_delivery_rate;
    168   __u64 tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited;
    192   __u32 tcpi_delivered, tcpi_delivered_ce;
    200   __u64 tcpi_bytes_sent, tcpi_bytes_retrans;
    216   __u32 tcpi_dsack_dups, tcpi_reord_seen;
    224   __u32 tcpi_rcv_ooopack;
    228   __u32 tcpi_snd_wnd, tcpi_rcv_wnd;
    236   __u32 tcpi_rehash;
    240   __u16 tcpi_total_rto, tcpi_total_rto_recoveries;
    244   __u32 tcpi_total_rto_time;
    };                                                  /* sizeof 248 = TCP_INFO_MAX */

`decode` (INET_DIAG_INFO = 2): short attributes keep the fields they hold
(whole words only; the rest read 0), long ones are cut to TCP_INFO_MAX and
`tcp_info_len` records min(payload, 0xFFFF); a message without the attribute
is counted as `missing_tcp_info` and gets tcp_info_len 0 (timewait sockets).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from collector.netlink.gather import gather_words

__all__ = [
    "APP_LIMITED_BYTE",
    "BITFIELD_COLUMNS",
    "FIELDS",
    "INET_DIAG_INFO",
    "TCP_INFO_DTYPE",
    "TCP_INFO_MAX",
    "TCP_INFO_WORDS",
    "WSCALE_BYTE",
    "decode",
    "info_columns",
    "present_fields",
]

INET_DIAG_INFO = 2

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


_BLOCK_ROWS = 512  # rows transposed at a time (512 * 248 bytes stay in the CPU cache)


def info_columns(words: np.ndarray) -> dict[str, np.ndarray]:
    """tcp_info fields and bit fields as contiguous columns from (rows, TCP_INFO_WORDS) words.

    The words are transposed in row blocks first: reading one field of every
    row straight from `words` would pull the whole record array through the
    cache once per column (~60 times), and the encoder reads every column.
    """
    rows = words.shape[0]
    wt = np.empty((TCP_INFO_WORDS, rows), dtype=np.uint32)
    for start in range(0, rows, _BLOCK_ROWS):
        wt[:, start : start + _BLOCK_ROWS] = words[start : start + _BLOCK_ROWS].T
    cols: dict[str, np.ndarray] = {}
    for name, off, size in FIELDS:
        word = wt[off >> 2]
        if size == 4:
            cols[name] = word
        elif size == 8:
            cols[name] = word.astype(np.uint64) | (wt[(off >> 2) + 1].astype(np.uint64) << np.uint64(32))
        else:  # 1 or 2 bytes inside a little-endian word
            cols[name] = (word >> np.uint32(8 * (off & 3))) & np.uint32((1 << (8 * size)) - 1)
    flags = wt[WSCALE_BYTE >> 2] >> np.uint32(8 * (WSCALE_BYTE & 3))
    cols["snd_wscale"] = flags & np.uint32(0x0F)
    cols["rcv_wscale"] = (flags >> np.uint32(4)) & np.uint32(0x0F)
    limited = wt[APP_LIMITED_BYTE >> 2] >> np.uint32(8 * (APP_LIMITED_BYTE & 3))
    cols["app_limited"] = limited & np.uint32(0x01)
    return cols


def decode(base: np.ndarray, pos: np.ndarray, length: np.ndarray, errors: Counter[str]) -> dict[str, np.ndarray]:
    """`tcp_info_len` plus every FIELDS / BITFIELD_COLUMNS column from payload offsets `pos` (-1 = absent)."""
    missing = pos < 0
    if missing.any():
        errors["missing_tcp_info"] += int(np.count_nonzero(missing))
    words = gather_words(base, pos, np.minimum(length, TCP_INFO_MAX), TCP_INFO_WORDS)
    cols = {"tcp_info_len": np.where(missing, 0, np.minimum(length, 0xFFFF)).astype(np.uint32)}
    cols.update(info_columns(words))
    return cols
