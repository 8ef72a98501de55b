"""INET_DIAG_CONG: the socket's congestion-control name, as a per-row index into a name table.

The kernel (net/ipv4/tcp_diag.c, tcp_diag_get_aux) sends it with

    nla_put_string(skb, INET_DIAG_CONG, icsk->icsk_ca_ops->name);

where the name is `char name[TCP_CA_NAME_MAX]` of struct tcp_congestion_ops
(include/net/tcp.h, `#define TCP_CA_NAME_MAX 16`): printable ASCII, NUL
terminated, so the payload is strlen(name) + 1 bytes ("cubic" -> 6).

Short/long attributes: only the first min(payload, TCA_CC_MAX) bytes are
read (a long attribute is cut at 16 bytes, a missing NUL ends the name at
the payload's end); bytes past the payload are never read as name.  A name
that is empty, not ASCII, not printable or holds a space is counted as
`bad_cc_name` and the row gets index 0 ('').  Absent attribute -> index 0.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from collector.netlink.gather import gather_words

__all__ = ["INET_DIAG_CONG", "TCA_CC_MAX", "decode"]

INET_DIAG_CONG = 4
#: TCP_CA_NAME_MAX: longest name the kernel sends, NUL included.
TCA_CC_MAX = 16


def decode(base: np.ndarray, pos: np.ndarray, length: np.ndarray, errors: Counter[str]) -> tuple[np.ndarray, list[str]]:
    """(cc_index per row, name table) from payload offsets `pos` (-1 = absent) and lengths.

    Vectorised: the few distinct names of a dump are peeled off one at a time.
    """
    rows = pos.shape[0]
    names: list[str] = [""]
    index = np.zeros(rows, dtype=np.uint32)
    have = pos >= 0
    if not have.any():
        return index, names
    raw = gather_words(base, pos, np.full(rows, TCA_CC_MAX), TCA_CC_MAX // 4).view(np.uint8)
    nbytes = np.minimum(np.maximum(length, 0), TCA_CC_MAX)
    masked = raw * (np.arange(TCA_CC_MAX) < nbytes[:, None]).astype(np.uint8)
    keys = np.ascontiguousarray(masked).view(np.uint64)  # (rows, 2)
    k0, k1 = keys[:, 0], keys[:, 1]
    todo = have.copy()
    while todo.any():
        first = int(np.argmax(todo))
        same = todo & (k0 == k0[first]) & (k1 == k1[first])
        text = masked[first].tobytes().split(b"\0", 1)[0]
        try:
            name = text.decode("ascii")
        except UnicodeDecodeError:
            name = ""
        if not name or not name.isprintable() or " " in name:
            errors["bad_cc_name"] += int(np.count_nonzero(same))
            name = ""
        if name not in names:
            names.append(name)
        index[same] = names.index(name)
        todo &= ~same
    return index, names
