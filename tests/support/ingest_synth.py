"""Synthetic, realistic TcpInfoBatch messages for ingest tests and bench/ingest.py.

Columns are drawn from plausible CDN-edge distributions (a few thousand client
/24s and /56s in documentation ranges, BBR/CUBIC mix, RTTs of ms to hundreds of
ms, delivery rates of kB/s to Gb/s) and encoded with the collector's codec
(schemas.tcpinfo_decode), so the bytes are exactly what a collector would send.
Deterministic for a given seed.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from schemas.tcpinfo_encode import BatchHeader
from tests.support.tcpinfo_batches import encode_batches

CC_NAMES = ("cubic", "bbr")
# RFC 2544 benchmarking space 198.18.0.0/15 (512 /24s) and the documentation /24s.
_V4_NETS = (bytes([198, 18, 0]), bytes([198, 19, 0]), bytes([198, 51, 100]), bytes([203, 0, 113]))


def _v4_mapped(octets: np.ndarray) -> np.ndarray:
    """(rows, 4) uint8 IPv4 -> (rows, 16) IPv4-mapped IPv6."""
    out = np.zeros((len(octets), 16), dtype=np.uint8)
    out[:, 10] = 0xFF
    out[:, 11] = 0xFF
    out[:, 12:] = octets
    return out


def synth_columns(rows: int, rng: np.random.Generator, v6_share: float = 0.2) -> dict[str, np.ndarray]:
    """One poll's worth of columns (names and dtypes as schemas.tcpinfo_decode decodes them)."""
    n = rows
    is_v6 = rng.random(n) < v6_share
    family = np.where(is_v6, 10, 2).astype(np.uint32)
    # client addresses: v4 in 198.18.0.0/15 and documentation /24s, v6 in 2001:db8::/32
    v4 = np.zeros((n, 4), dtype=np.uint8)
    net = rng.integers(0, len(_V4_NETS), n)
    for i, base in enumerate(_V4_NETS):
        v4[net == i, :3] = np.frombuffer(base, dtype=np.uint8)
    in_bench = net < 2
    v4[in_bench, 2] = rng.integers(0, 256, int(in_bench.sum()))
    v4[:, 3] = rng.integers(1, 255, n)
    dst = _v4_mapped(v4)
    v6 = np.zeros((n, 16), dtype=np.uint8)
    v6[:, :4] = (0x20, 0x01, 0x0D, 0xB8)
    v6[:, 4:7] = rng.integers(0, 4, (n, 3))  # a few hundred /56s
    v6[:, 8:] = rng.integers(0, 256, (n, 8))
    dst[is_v6] = v6[is_v6]
    prefix = dst.copy()
    prefix[~is_v6, 15] = 0  # /24
    prefix[is_v6, 7:] = 0  # /56
    prefix_len = np.where(is_v6, 56, 24).astype(np.uint32)
    src = np.zeros((n, 16), dtype=np.uint8)
    src[:, 10:12] = 0xFF
    src[:, 12:] = (192, 0, 2, 10)
    src[is_v6, :] = np.frombuffer(bytes.fromhex("20010db8ffff00000000000000000010"), dtype=np.uint8)
    u32 = np.uint32
    u64 = np.uint64
    rtt = rng.lognormal(np.log(30_000), 0.8, n).clip(100, 2_000_000).astype(u32)
    min_rtt = (rtt * rng.uniform(0.5, 1.0, n)).astype(u32)
    delivery = rng.lognormal(np.log(2e6), 1.5, n).clip(1e3, 1.2e9).astype(u64)
    bytes_acked = rng.lognormal(np.log(3e5), 2.0, n).clip(0, 1e11).astype(u64)
    bytes_sent = (bytes_acked * rng.uniform(1.0, 1.05, n)).astype(u64)
    bytes_retrans = (bytes_sent * rng.exponential(0.01, n)).astype(u64)
    cc_index = (rng.random(n) < 0.3).astype(u32)
    is_bbr = cc_index == 1
    mss = np.where(is_v6, 1428, 1448).astype(u32)
    segs_out = (bytes_sent // mss.astype(u64) + 1).astype(u32)
    cols: dict[str, np.ndarray] = {
        "family": family,
        "src_addr": src,
        "dst_addr": dst,
        "src_port": np.full(n, 443, dtype=u32),
        "dst_port": rng.integers(1024, 65536, n).astype(u32),
        "cookie": rng.integers(1, 2**63, n, dtype=np.int64).astype(u64),
        "state": np.ones(n, dtype=u32),
        "cc_index": cc_index,
        "client_prefix": prefix,
        "client_prefix_len": prefix_len,
        "tcp_info_len": np.full(n, 248, dtype=u32),
        "has_bbr_info": is_bbr.astype(u32),
        "uid": np.full(n, 33, dtype=u32),
        "inode": rng.integers(10_000, 50_000_000, n).astype(u32),
        "ca_state": (rng.random(n) < 0.05).astype(u32),
        "retransmits": np.zeros(n, dtype=u32),
        "probes": np.zeros(n, dtype=u32),
        "backoff": np.zeros(n, dtype=u32),
        "options": np.full(n, 7, dtype=u32),
        "snd_wscale": np.full(n, 9, dtype=u32),
        "rcv_wscale": np.full(n, 7, dtype=u32),
        "app_limited": (rng.random(n) < 0.6).astype(u32),
        "rto": (200_000 + rtt).astype(u32),
        "ato": np.full(n, 40_000, dtype=u32),
        "snd_mss": mss,
        "rcv_mss": np.full(n, 536, dtype=u32),
        "unacked": rng.integers(0, 40, n).astype(u32),
        "sacked": np.zeros(n, dtype=u32),
        "lost": np.zeros(n, dtype=u32),
        "retrans": np.zeros(n, dtype=u32),
        "fackets": np.zeros(n, dtype=u32),
        "last_data_sent": rng.integers(0, 60_000, n).astype(u32),
        "last_ack_sent": np.zeros(n, dtype=u32),
        "last_data_recv": rng.integers(0, 60_000, n).astype(u32),
        "last_ack_recv": rng.integers(0, 60_000, n).astype(u32),
        "pmtu": np.full(n, 1500, dtype=u32),
        "rcv_ssthresh": np.full(n, 64_076, dtype=u32),
        "rtt": rtt,
        "rttvar": (rtt // 4).astype(u32),
        "snd_ssthresh": rng.integers(7, 2000, n).astype(u32),
        "snd_cwnd": rng.integers(10, 2000, n).astype(u32),
        "advmss": mss,
        "reordering": np.full(n, 3, dtype=u32),
        "rcv_rtt": np.zeros(n, dtype=u32),
        "rcv_space": np.full(n, 14_480, dtype=u32),
        "total_retrans": (bytes_retrans // mss.astype(u64)).astype(u32),
        "pacing_rate": (delivery * 2).astype(u64),
        "max_pacing_rate": np.full(n, 2**64 - 1, dtype=u64),
        "bytes_acked": bytes_acked,
        "bytes_received": rng.integers(300, 3000, n).astype(u64),
        "segs_out": segs_out,
        "segs_in": (segs_out // 2 + 1).astype(u32),
        "notsent_bytes": rng.integers(0, 200_000, n).astype(u32),
        "min_rtt": min_rtt,
        "data_segs_in": np.ones(n, dtype=u32),
        "data_segs_out": segs_out,
        "delivery_rate": delivery,
        "busy_time": rng.integers(1_000, 100_000_000, n).astype(u64),
        "rwnd_limited": np.zeros(n, dtype=u64),
        "sndbuf_limited": np.zeros(n, dtype=u64),
        "delivered": segs_out,
        "delivered_ce": np.zeros(n, dtype=u32),
        "bytes_sent": bytes_sent,
        "bytes_retrans": bytes_retrans,
        "dsack_dups": np.zeros(n, dtype=u32),
        "reord_seen": np.zeros(n, dtype=u32),
        "rcv_ooopack": np.zeros(n, dtype=u32),
        "snd_wnd": rng.integers(60_000, 4_000_000, n).astype(u32),
        "rcv_wnd": np.full(n, 65_535, dtype=u32),
        "rehash": np.zeros(n, dtype=u32),
        "total_rto": np.zeros(n, dtype=u32),
        "total_rto_recoveries": np.zeros(n, dtype=u32),
        "total_rto_time": np.zeros(n, dtype=u32),
        "bbr_bw": np.where(is_bbr, delivery, 0).astype(u64),
        "bbr_min_rtt": np.where(is_bbr, min_rtt, 0).astype(u32),
        "bbr_pacing_gain": np.where(is_bbr, 256, 0).astype(u32),
        "bbr_cwnd_gain": np.where(is_bbr, 512, 0).astype(u32),
        "skmem_rmem_alloc": np.zeros(n, dtype=u32),
        "skmem_rcvbuf": np.full(n, 131_072, dtype=u32),
        "skmem_wmem_alloc": rng.integers(0, 4_000_000, n).astype(u32),
        "skmem_sndbuf": np.full(n, 4_194_304, dtype=u32),
        "skmem_fwd_alloc": rng.integers(0, 100_000, n).astype(u32),
        "skmem_wmem_queued": rng.integers(0, 4_000_000, n).astype(u32),
        "skmem_optmem": np.zeros(n, dtype=u32),
        "skmem_backlog": np.zeros(n, dtype=u32),
        "skmem_drops": np.zeros(n, dtype=u32),
    }
    return cols


def synth_messages(
    total_rows: int,
    *,
    hosts: int = 4,
    rows_per_poll: int = 2000,
    seed: int = 1,
    max_bytes: int = 64 * 1024,
    pop: str = "fra1",
    start_ns: int = 1_700_000_000_000_000_000,
    run_id: int = 1,
    first_sequence: int = 1,
) -> Iterator[tuple[str, bytes]]:
    """(host, serialized TcpInfoBatch) pairs totalling `total_rows` rows, ~max_bytes each.

    Hosts take turns polling; each host's sequence starts at first_sequence and
    increases by one per batch.
    """
    rng = np.random.default_rng(seed)
    sequence = {f"edge{h:02d}.{pop}": first_sequence for h in range(hosts)}
    names = list(sequence)
    left = total_rows
    poll = 0
    while left > 0:
        host = names[poll % len(names)]
        n = min(rows_per_poll, left)
        header = BatchHeader(
            host=host,
            pop=pop,
            netns="",
            run_id=run_id,
            poll_start_ns=start_ns + poll * 10_000_000_000,
            poll_end_ns=start_ns + poll * 10_000_000_000 + 50_000_000,
            sockets_seen=n,
            sockets_exported=n,
            cc_names=CC_NAMES,
            collector_version="synth",
        )
        messages = encode_batches(synth_columns(n, rng), header, sequence[host], max_bytes=max_bytes)
        sequence[host] += len(messages)
        for m in messages:
            yield host, m
        left -= n
        poll += 1
