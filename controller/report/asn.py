"""Prefix -> ISP mapping for the report's per-ISP section (pure; no I/O but reading the file).

The operator's file (`dyncc report --asn-file`) is UTF-8 CSV, one `prefix,asn[,name]` per line:
an IPv4 or IPv6 network in CIDR form (host bits may be set), the AS number with or without
`AS` (`64496`, `AS64496`, `AS 64496`) and an optional name, e.g.

    prefix,asn,name
    2001:db8:100::/40,64496,Example Cable
    198.51.100.0/24,AS64497,Example Mobile

A header line, blank lines and `#` comments are allowed; a line without commas may separate its
fields by whitespace (`2001:db8:100::/40 64496 Example Cable`).  Client prefixes (/24, /56,
IPv4-mapped IPv6 as IPv4) are mapped by longest-prefix match; the label is `AS<asn> <name>`.
Malformed lines are counted and skipped, never fatal.
"""

from __future__ import annotations

import csv
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class AsnTable:
    """Longest-prefix-match table: per family, per prefix length, network int -> ISP label."""

    by_len: dict[int, dict[int, dict[int, str]]] = field(default_factory=lambda: {4: {}, 6: {}})
    entries: int = 0
    malformed: int = 0

    def add(self, network: IPNetwork, label: str) -> None:
        table = self.by_len[network.version].setdefault(network.prefixlen, {})
        table[int(network.network_address)] = label
        self.entries += 1

    def lookup(self, prefix: str) -> str | None:
        """The label of the longest entry covering `prefix` (a CIDR or an address), or None."""
        try:
            net = ipaddress.ip_network(prefix, strict=False)
        except ValueError:
            return None
        if isinstance(net, ipaddress.IPv6Network) and net.network_address.ipv4_mapped is not None:
            mapped = net.network_address.ipv4_mapped
            net = ipaddress.ip_network(f"{mapped}/{max(0, net.prefixlen - 96)}", strict=False)
        family = self.by_len[net.version]
        bits = net.max_prefixlen
        addr = int(net.network_address)
        for length in sorted((n for n in family if n <= net.prefixlen), reverse=True):
            mask = ((1 << length) - 1) << (bits - length) if length else 0
            label = family[length].get(addr & mask)
            if label is not None:
                return label
        return None


def asn_number(asn: str) -> str:
    """The digits of `64496`, `AS64496` or `AS 64496`; '' when it is not an AS number."""
    digits = asn.strip().upper().removeprefix("AS").strip()
    return digits if digits.isdigit() else ""


def label_for(asn: str, name: str) -> str:
    asn = asn_number(asn) or asn.strip()
    name = name.strip()
    return f"AS{asn} {name}" if name else f"AS{asn}"


def parse_asn_rows(rows: Iterable[list[str]]) -> AsnTable:
    table = AsnTable()
    for row in rows:
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        if len(row) == 1:  # no commas: fields separated by whitespace
            row = row[0].split(None, 2)
        if len(row) < 2:
            table.malformed += 1
            continue
        prefix, asn = row[0].strip(), row[1].strip()
        try:
            network = ipaddress.ip_network(prefix, strict=False)
        except ValueError:
            if table.entries == 0 and table.malformed == 0 and not any(c.isdigit() for c in prefix):
                continue  # header line
            table.malformed += 1
            continue
        if not asn_number(asn):
            table.malformed += 1
            continue
        table.add(network, label_for(asn, row[2] if len(row) > 2 else ""))
    return table


def load_asn_file(path: str | os.PathLike[str]) -> AsnTable:
    """Read the CSV file; OSError propagates (the CLI turns it into a one-line error)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        return parse_asn_rows(csv.reader(fh))


def map_prefixes(
    table: AsnTable, prefixes: Iterable[tuple[str, int]], top: int, max_prefixes: int
) -> tuple[list[str], list[str], int]:
    """Map (prefix, weight) pairs to ISPs; keep the `top` ISPs by total weight.

    Returns parallel lists (prefixes, labels) for those ISPs, at most `max_prefixes` long (the
    heaviest prefixes first, so the query stays small), and how many mapped prefixes were dropped.
    """
    weights: dict[str, int] = {}
    mapped: list[tuple[str, str, int]] = []
    for prefix, weight in prefixes:
        label = table.lookup(prefix)
        if label is None:
            continue
        mapped.append((prefix, label, weight))
        weights[label] = weights.get(label, 0) + weight
    keep = set(sorted(weights, key=lambda k: (-weights[k], k))[:top])
    chosen = sorted((m for m in mapped if m[1] in keep), key=lambda m: (-m[2], m[0]))
    dropped = max(0, len(chosen) - max_prefixes) + sum(1 for m in mapped if m[1] not in keep)
    chosen = chosen[:max_prefixes]
    return [m[0] for m in chosen], [m[1] for m in chosen], dropped
