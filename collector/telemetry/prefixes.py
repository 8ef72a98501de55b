"""Client prefixes from 16-byte (IPv4-mapped) addresses, vectorized (pure).

The client of a socket is its remote address.  IPv4 and IPv4-mapped IPv6
(::ffff:a.b.c.d) addresses get the IPv4 prefix length (default /24) and stay
in mapped form; other IPv6 addresses get the IPv6 length (default /56).

A prefix is one client network whichever socket family saw it: an IPv4 client
on an IPv6 socket gets the same IPv4 prefix (printed '198.51.100.0/24') as on
an IPv4 socket.  The socket family travels separately (tcpinfo `family`, 2 or
10); the prefix's own family is schemas.addresses.prefix_family() of its text (the
SQL uses the same rule), and schemas.addresses.mapped_to_ipv4() turns '::ffff:198.51.100.0/120' typed by a
person into that IPv4 prefix.
"""

from __future__ import annotations

import ipaddress

import numpy as np

from schemas.addresses import MAPPED_PREFIX, is_v4_mapped


def _mask_rows(plen: np.ndarray) -> np.ndarray:
    """(n, 16) byte masks keeping the first plen bits of a 128-bit address."""
    bits = np.clip(plen.astype(np.int64)[:, None] - 8 * np.arange(16), 0, 8)
    return ((0xFF00 >> bits) & 0xFF).astype(np.uint8)


def client_prefixes(dst16: np.ndarray, v4_len: int = 24, v6_len: int = 56) -> tuple[np.ndarray, np.ndarray]:
    """(prefix addresses (n, 16) uint8, prefix lengths uint32) for remote addresses.

    Prefix lengths are the per-family lengths (v4_len counts IPv4 bits); the
    stored prefix is the masked address in 16-byte form.
    """
    if not 0 <= v4_len <= 32 or not 0 <= v6_len <= 128:
        raise ValueError("prefix length out of range")
    v4 = is_v4_mapped(dst16)
    plen = np.where(v4, v4_len, v6_len).astype(np.uint32)
    # two prefix lengths, so two byte masks: each row takes its family's
    mask4, mask6 = _mask_rows(np.array([96 + v4_len, v6_len]))
    if v4.all():
        mask = mask4
    elif not v4.any():
        mask = mask6
    else:
        mask = np.where(v4[:, None], mask4, mask6)
    out = np.asarray(dst16, dtype=np.uint8) & mask
    return out, plen


def network_to_mapped(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> tuple[bytes, int]:
    """A network as (16-byte address, 128-bit prefix length); IPv4 goes under ::ffff:0:0/96."""
    if isinstance(net, ipaddress.IPv4Network):
        return MAPPED_PREFIX + net.network_address.packed, 96 + net.prefixlen
    return net.network_address.packed, net.prefixlen


def in_networks(addr16: np.ndarray, nets: list[tuple[bytes, int]]) -> np.ndarray:
    """Rows whose address falls in any of the (16-byte address, bit length) networks."""
    n = addr16.shape[0]
    hit = np.zeros(n, dtype=bool)
    if not n or not nets:
        return hit
    words = np.ascontiguousarray(addr16).view(">u8")  # (n, 2): high and low 64 bits
    hi, lo = words[:, 0], words[:, 1]
    for raw, bits in nets:
        net_hi = int.from_bytes(raw[:8], "big")
        net_lo = int.from_bytes(raw[8:], "big")
        mask_hi = ((1 << 64) - 1) ^ ((1 << (64 - min(bits, 64))) - 1) if bits > 0 else 0
        lo_bits = max(bits - 64, 0)
        mask_lo = ((1 << 64) - 1) ^ ((1 << (64 - lo_bits)) - 1) if lo_bits > 0 else 0
        hit |= ((hi & np.uint64(mask_hi)) == np.uint64(net_hi & mask_hi)) & (
            (lo & np.uint64(mask_lo)) == np.uint64(net_lo & mask_lo)
        )
    return hit
