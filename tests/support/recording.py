"""Synthetic collector batches for the lab's recording and replay tests."""

from __future__ import annotations

import ipaddress


def make_batch(cookies, prefixes, cc, start_ns=1_700_000_000_000_000_000):
    import numpy as np

    from schemas.tcpinfo_decode import empty_columns
    from schemas.tcpinfo_encode import BatchHeader, encode_header
    from tests.support.tcpinfo_batches import split_bodies

    n = len(cookies)
    cols = empty_columns(n)
    cols["cookie"][:] = cookies
    cols["family"][:] = 10
    for i, p in enumerate(prefixes):
        net = ipaddress.ip_network(p)
        raw = (
            (b"\x00" * 10 + b"\xff\xff" + net.network_address.packed)
            if net.version == 4
            else net.network_address.packed
        )
        cols["client_prefix"][i] = np.frombuffer(raw, dtype=np.uint8)
        cols["client_prefix_len"][i] = net.prefixlen + (96 if net.version == 4 else 0)
    names = sorted(set(cc))
    cols["cc_index"][:] = [names.index(c) for c in cc]
    ((rows, body),) = split_bodies(cols, 1000, 1 << 20)
    head = encode_header(
        BatchHeader(host="h", pop="p", run_id=7, poll_start_ns=start_ns, poll_end_ns=start_ns + 1000, cc_names=names),
        sequence=0,
        batch_index=0,
        batch_count=1,
        row_count=rows,
    )
    return head + body
