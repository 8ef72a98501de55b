"""INET_DIAG_SKMEMINFO: the socket's memory counters (sk_get_meminfo), as nine columns.

The kernel (net/core/sock.c, sock_diag_put_meminfo) sends `u32 mem[SK_MEMINFO_VARS]`
indexed by, from include/uapi/linux/sock_diag.h:

    enum {
            SK_MEMINFO_RMEM_ALLOC,
            SK_MEMINFO_RCVBUF,
            SK_MEMINFO_WMEM_ALLOC,
            SK_MEMINFO_SNDBUF,
            SK_MEMINFO_FWD_ALLOC,
            SK_MEMINFO_WMEM_QUEUED,
            SK_MEMINFO_OPTMEM,
            SK_MEMINFO_BACKLOG,
            SK_MEMINFO_DROPS,

            SK_MEMINFO_VARS,
    };

(SKMEM_WORDS = SK_MEMINFO_VARS = 9 words, 36 bytes, on every kernel this collector supports.)

Short/long attributes: words the payload does not hold read as 0 (an 8-word
attribute has skmem_drops 0); words past the ninth are ignored.  No error is
counted (the array only ever grew, so a short one is an older kernel).
Absent attribute -> all 0.
"""

from __future__ import annotations

import numpy as np

from collector.netlink.gather import gather_words

__all__ = ["INET_DIAG_SKMEMINFO", "SKMEM_COLUMNS", "SKMEM_WORDS", "decode"]

INET_DIAG_SKMEMINFO = 7
#: SK_MEMINFO_VARS.
SKMEM_WORDS = 9
SKMEM_COLUMNS = (
    "skmem_rmem_alloc", "skmem_rcvbuf", "skmem_wmem_alloc", "skmem_sndbuf", "skmem_fwd_alloc",
    "skmem_wmem_queued", "skmem_optmem", "skmem_backlog", "skmem_drops",
)  # fmt: skip


def decode(base: np.ndarray, pos: np.ndarray, length: np.ndarray) -> dict[str, np.ndarray]:
    """SKMEM_COLUMNS from payload offsets `pos` (-1 = absent) and payload lengths."""
    sk = gather_words(base, pos, length, SKMEM_WORDS)
    return {name: sk[:, k].copy() for k, name in enumerate(SKMEM_COLUMNS)}
