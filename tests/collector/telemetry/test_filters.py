"""Pure helpers: client prefixes, exclusion networks, stable sampling, filter counting."""

from __future__ import annotations

import ipaddress
from collections import Counter

import numpy as np

from collector.telemetry.filters import DEFAULT_EXCLUDES, FilterSpec, apply_filters, parse_networks, sample_keep
from collector.telemetry.prefixes import client_prefixes, in_networks
from schemas.addresses import format_prefixes


def addrs(*texts: str) -> np.ndarray:
    out = []
    for t in texts:
        ip = ipaddress.ip_address(t)
        raw = (b"\0" * 10 + b"\xff\xff" + ip.packed) if ip.version == 4 else ip.packed
        out.append(np.frombuffer(raw, dtype=np.uint8))
    return np.array(out, dtype=np.uint8).reshape(-1, 16)


def test_client_prefixes() -> None:
    dst = addrs("198.51.100.77", "2001:db8:1:2ff::9", "::ffff:203.0.113.200", "2001:db8::1")
    prefix, plen = client_prefixes(dst, 24, 56)
    assert format_prefixes(prefix, plen) == [
        "198.51.100.0/24",
        "2001:db8:1:200::/56",
        "203.0.113.0/24",
        "2001:db8::/56",
    ]
    prefix, plen = client_prefixes(dst, 20, 48)
    assert format_prefixes(prefix, plen) == [
        "198.51.96.0/20",
        "2001:db8:1::/48",
        "203.0.112.0/20",
        "2001:db8::/48",
    ]


def test_excluded_networks_cover_defaults() -> None:
    nets = [
        (
            n.network_address.packed if n.version == 6 else b"\0" * 10 + b"\xff\xff" + n.network_address.packed,
            n.prefixlen + (96 if n.version == 4 else 0),
        )
        for n in parse_networks(DEFAULT_EXCLUDES)
    ]
    dst = addrs("127.0.0.1", "::1", "169.254.3.4", "fe80::1", "0.0.0.0", "::", "198.51.100.1", "2001:db8::1")
    assert in_networks(dst, nets).tolist() == [True] * 6 + [False, False]


def test_sampling_is_stable_and_about_one_in_n() -> None:
    cookies = np.arange(1, 40001, dtype=np.uint64)
    keep = sample_keep(cookies, 8)
    assert 0.11 < keep.mean() < 0.14
    assert (sample_keep(cookies[::-1], 8)[::-1] == keep).all()  # depends on the cookie only


def test_first_failing_filter_counts() -> None:
    cols = {
        "state": np.array([1, 1, 1, 1, 8], dtype=np.uint32),
        "src_port": np.array([443, 22, 443, 443, 443], dtype=np.uint32),
        "dst_addr": addrs("127.0.0.1", "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"),
        "cookie": np.arange(5, dtype=np.uint64),
        "bytes_acked": np.array([10, 10, 10, 5000, 5000], dtype=np.uint64),
    }
    spec = FilterSpec(
        states=frozenset({1}),
        local_ports=frozenset({443}),
        exclude=tuple(parse_networks(["127.0.0.0/8"])),
        min_bytes_acked=100,
    )
    counts: Counter[str] = Counter()
    keep = apply_filters(cols, spec, counts)
    assert keep.tolist() == [False, False, False, True, False]
    assert counts == {"state": 1, "local_port": 1, "excluded_address": 1, "min_bytes_acked": 1}


def test_client_prefixes_single_family_chunks() -> None:
    """A dump chunk is usually one family: those take one mask for all rows."""
    v4 = addrs("198.51.100.77", "203.0.113.200")
    prefix, plen = client_prefixes(v4, 24, 56)
    assert format_prefixes(prefix, plen) == ["198.51.100.0/24", "203.0.113.0/24"]
    v6 = addrs("2001:db8:1:2ff::9", "2001:db8::1")
    prefix, plen = client_prefixes(v6, 24, 56)
    assert format_prefixes(prefix, plen) == ["2001:db8:1:200::/56", "2001:db8::/56"]
    assert plen.dtype == np.uint32 and prefix.dtype == np.uint8 and prefix.shape == (2, 16)
