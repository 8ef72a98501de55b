"""Client addresses and prefixes in the contract's form (pure).

Addresses travel as 16 bytes, IPv4 in IPv4-mapped form (::ffff:a.b.c.d); a prefix is printed
as text with IPv4 clients (on either socket family) in plain IPv4 form ('198.51.100.0/24').
The collector writes them, ingest, scoring and the lab read them: this is the one copy."""

from __future__ import annotations

import ipaddress

import numpy as np

MAPPED_PREFIX = bytes(10) + b"\xff\xff"


def is_v4_mapped(addr16: np.ndarray) -> np.ndarray:
    """Rows of an (n, 16) uint8 array that are ::ffff:a.b.c.d."""
    hi = np.ascontiguousarray(addr16).view(">u8")[:, 0]
    lo_top = np.ascontiguousarray(addr16[:, 8:12]).view(">u4")[:, 0]
    return (hi == 0) & (lo_top == 0xFFFF)


def format_prefixes(prefix16: np.ndarray, plen: np.ndarray) -> list[str]:
    """'198.51.100.0/24' / '2001:db8:1:200::/56' strings (mapped IPv4 printed as IPv4)."""
    v4 = is_v4_mapped(prefix16)
    out: list[str] = []
    cache: dict[tuple[bytes, int], str] = {}
    rows = np.ascontiguousarray(prefix16, dtype=np.uint8).view("V16").reshape(-1)
    for item, length, is4 in zip(rows.tolist(), plen.tolist(), v4.tolist(), strict=True):
        raw = bytes(item)
        key = (raw, length)
        text = cache.get(key)
        if text is None:
            addr = ipaddress.IPv4Address(raw[12:]) if is4 else ipaddress.IPv6Address(raw)
            text = f"{addr}/{length}"
            cache[key] = text
        out.append(text)
    return out


def format_addresses(addr16: np.ndarray) -> list[str]:
    """Address strings; mapped IPv4 printed as dotted quad."""
    v4 = is_v4_mapped(addr16)
    return [
        str(ipaddress.IPv4Address(bytes(r[12:]))) if is4 else str(ipaddress.IPv6Address(bytes(r)))
        for r, is4 in zip(addr16, v4.tolist(), strict=True)
    ]


AF_INET = 2
AF_INET6 = 10


def prefix_family(prefix: str) -> int:
    """The family of a prefix string: AF_INET6 (10) when it contains ':', else AF_INET (2)."""
    return AF_INET6 if ":" in prefix else AF_INET


def mapped_to_ipv4(prefix: str) -> str:
    """'::ffff:198.51.100.0/120' -> '198.51.100.0/120' - 96 bits; anything else unchanged.

    Only canonical IPv4-mapped IPv6 networks of at least 96 bits are rewritten;
    text that is not such a network is returned as given (validation is the
    caller's business).
    """
    try:
        net = ipaddress.ip_network(prefix.strip())
    except ValueError:
        return prefix
    if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96:
        mapped = net.network_address.ipv4_mapped
        if mapped is not None:
            return str(ipaddress.IPv4Network((mapped, net.prefixlen - 96)))
    return prefix
