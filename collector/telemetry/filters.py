"""Which sockets are exported: states, local ports, excluded peers, sampling, min bytes (pure).

Each socket is counted under the first filter that drops it, in this order:
state, local_port, excluded_address, sampled_out, min_bytes_acked.
Excluded addresses are matched against the remote (client) address; the
defaults exclude loopback, link-local and unspecified peers.
Sampling keeps 1 in N sockets by a hash of the socket cookie, so the same
socket stays in or out across polls.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from collector.telemetry.prefixes import in_networks, network_to_mapped

DEFAULT_EXCLUDES = (
    "127.0.0.0/8", "::1/128",  # loopback
    "169.254.0.0/16", "fe80::/10",  # link-local
    "0.0.0.0/32", "::/128",  # unspecified
)  # fmt: skip
FILTER_REASONS = ("state", "local_port", "excluded_address", "sampled_out", "min_bytes_acked")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def parse_networks(items: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """CIDR strings -> networks; ValueError with the offending text."""
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for item in items:
        try:
            nets.append(ipaddress.ip_network(str(item).strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"bad CIDR {item!r}: {exc}") from exc
    return nets


@dataclass(frozen=True)
class FilterSpec:
    states: frozenset[int] = frozenset()  # empty = any state
    local_ports: frozenset[int] = frozenset()  # empty = any port
    exclude: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    sample_n: int = 1
    min_bytes_acked: int = 0
    _nets: list[tuple[bytes, int]] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.sample_n < 1:
            raise ValueError("sample must be >= 1")
        if self.min_bytes_acked < 0:
            raise ValueError("min_bytes_acked must be >= 0")
        self._nets.extend(network_to_mapped(n) for n in self.exclude)


def sample_keep(cookie: np.ndarray, n: int) -> np.ndarray:
    """Stable 1-in-n choice by cookie (multiplicative hash, top 32 bits)."""
    if n <= 1:
        return np.ones(cookie.shape[0], dtype=bool)
    with np.errstate(over="ignore"):
        h = (cookie.astype(np.uint64) * _GOLDEN) >> np.uint64(32)
    return (h % np.uint64(n)) == 0


def apply_filters(columns: Mapping[str, np.ndarray], spec: FilterSpec, counts: Counter[str]) -> np.ndarray:
    """Boolean mask of rows to export; adds dropped rows to counts[reason]."""
    rows = columns["state"].shape[0]
    keep = np.ones(rows, dtype=bool)
    if not rows:
        return keep

    def drop(reason: str, bad: np.ndarray) -> None:
        newly = bad & keep
        counts[reason] += int(np.count_nonzero(newly))
        keep[newly] = False

    if spec.states:
        drop("state", ~np.isin(columns["state"], np.array(sorted(spec.states))))
    if spec.local_ports:
        drop("local_port", ~np.isin(columns["src_port"], np.array(sorted(spec.local_ports))))
    if spec._nets:
        drop("excluded_address", in_networks(columns["dst_addr"], spec._nets))
    if spec.sample_n > 1:
        drop("sampled_out", ~sample_keep(columns["cookie"], spec.sample_n))
    if spec.min_bytes_acked > 0:
        drop("min_bytes_acked", columns["bytes_acked"] < np.uint64(spec.min_bytes_acked))
    return keep
