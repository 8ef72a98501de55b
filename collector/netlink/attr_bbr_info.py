"""INET_DIAG_BBRINFO: struct tcp_bbr_info of a bbr socket, as five columns.

The kernel (net/ipv4/tcp_bbr.c, bbr_get_info) fills, from include/uapi/linux/inet_diag.h:

    struct tcp_bbr_info {
            /* u64 bw: max-filtered BW (app throughput) estimate in Byte per sec: */
            __u32   bbr_bw_lo;              /* lower 32 bits of bw */
            __u32   bbr_bw_hi;              /* upper 32 bits of bw */
            __u32   bbr_min_rtt;            /* min-filtered RTT in uSec */
            __u32   bbr_pacing_gain;        /* pacing gain shifted left 8 bits */
            __u32   bbr_cwnd_gain;          /* cwnd gain shifted left 8 bits */
    };

(BBR_INFO_LEN = 20 bytes; the kernel asks for it with INET_DIAG_VEGASINFO.)

Short/long attributes: a payload under 20 bytes is counted as `short_bbr_info`
and the row reads as having no BBR info (has_bbr_info 0, columns 0); bytes
past the 20 of a longer payload are ignored.  Absent attribute -> all 0.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from collector.netlink.gather import gather_words

__all__ = ["BBR_COLUMNS", "BBR_INFO_LEN", "INET_DIAG_BBRINFO", "decode"]

INET_DIAG_BBRINFO = 16
#: sizeof(struct tcp_bbr_info).
BBR_INFO_LEN = 20
BBR_COLUMNS = ("has_bbr_info", "bbr_bw", "bbr_min_rtt", "bbr_pacing_gain", "bbr_cwnd_gain")


def decode(base: np.ndarray, pos: np.ndarray, length: np.ndarray, errors: Counter[str]) -> dict[str, np.ndarray]:
    """BBR_COLUMNS from payload offsets `pos` (-1 = absent) and payload lengths."""
    short = (pos >= 0) & (length < BBR_INFO_LEN)
    if short.any():
        errors["short_bbr_info"] += int(np.count_nonzero(short))
        pos = np.where(short, -1, pos)
    if not (pos >= 0).any():  # no BBR socket (the usual chunk): zero columns, nothing gathered
        rows = pos.shape[0]
        return {name: np.zeros(rows, dtype=np.uint64 if name == "bbr_bw" else np.uint32) for name in BBR_COLUMNS}
    bbr = gather_words(base, pos, length, BBR_INFO_LEN // 4)
    return {
        "has_bbr_info": (pos >= 0).astype(np.uint32),
        "bbr_bw": bbr[:, 0].astype(np.uint64) | (bbr[:, 1].astype(np.uint64) << np.uint64(32)),
        "bbr_min_rtt": bbr[:, 2].copy(),
        "bbr_pacing_gain": bbr[:, 3].copy(),
        "bbr_cwnd_gain": bbr[:, 4].copy(),
    }
