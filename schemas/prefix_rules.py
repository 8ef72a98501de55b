"""Which prefixes may ever carry a per-prefix route: the rule the controller and the agent share.

Pure and numpy-free (the agent reads it before anything heavy is loaded).  The controller's
validation (controller/rollout/validate.py) refuses a config that breaks it; the agent
(collector/agent/plan.py) refuses such a prefix of a signed config again, on the edge, so a
controller that was misconfigured or replaced cannot route them:

- `shape_problem(text)`: the prefix's text: an IP network, canonical (no host bits, the
  spelling `str(ip_network)` gives), not a default route (/0), not a host route (/32, /128).
- `BUILTIN_DENY`: ranges that are never client prefixes (loopback, link-local, multicast,
  "this network" 0/8, reserved 240/4, ::/127, IPv4-mapped ::ffff:0:0/96); a prefix sharing an
  address with one of them is refused, whichever contains the other.
- `RangeSet`: a set of ranges answering "which range shares an address with this prefix"
  (`overlapping`) and "which range contains it" (`covering`), by interval arithmetic.
- `parse_ranges(texts, what)`: CIDR texts (host bits allowed: 198.51.100.7/24 is its /24) ->
  networks; ValueError naming the bad one.

Each problem is (code, detail); the codes are validation's (`invalid_prefix`, `not_canonical`,
`default_route`, `host_route`, `denied`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Problem = tuple[str, str]

BUILTIN_DENY: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/127",
        "::ffff:0:0/96",
        "fe80::/10",
        "ff00::/8",
    )
)


def parse_ranges(texts: Iterable[str], what: str = "range") -> tuple[IPNetwork, ...]:
    """CIDR texts -> networks (non-strict); ValueError "bad WHAT 'text': why" on the first bad one."""
    out: list[IPNetwork] = []
    for text in texts:
        try:
            out.append(ipaddress.ip_network(str(text).strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"bad {what} {text!r}: {exc}") from exc
    return tuple(out)


def shape_problem(text: str) -> tuple[Problem | None, IPNetwork | None]:
    """(problem, None) when `text` is not a routable prefix's canonical text, else (None, network)."""
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        try:
            loose = ipaddress.ip_network(text, strict=False)
        except ValueError:
            return ("invalid_prefix", f"{text!r} is not an IP network ({exc})"), None
        return ("not_canonical", f"{text!r} has host bits set (canonical {loose})"), None
    if str(net) != text:
        return ("not_canonical", f"{text!r} is not canonical (canonical {net})"), None
    if net.prefixlen == 0:
        return ("default_route", f"{text} is a default route"), None
    if net.prefixlen == net.max_prefixlen:
        return ("host_route", f"{text} is a host route"), None
    return None, net


class RangeSet:
    """Ranges of both IP versions, asked by interval: first and last address as integers."""

    def __init__(self, ranges: Iterable[IPNetwork]) -> None:
        self.ranges: tuple[IPNetwork, ...] = tuple(ranges)
        by_version: dict[int, list[tuple[int, int, IPNetwork]]] = {4: [], 6: []}
        for net in self.ranges:
            by_version[net.version].append((int(net.network_address), int(net.broadcast_address), net))
        self._intervals = {version: tuple(items) for version, items in by_version.items()}

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    def overlapping(self, net: IPNetwork) -> IPNetwork | None:
        """The first range sharing an address with `net` (either inside the other), or None."""
        lo, hi = int(net.network_address), int(net.broadcast_address)
        for first, last, found in self._intervals[net.version]:  # = net.overlaps(found), faster
            if first <= hi and lo <= last:
                return found
        return None

    def covering(self, net: IPNetwork) -> IPNetwork | None:
        """The first range that contains all of `net`, or None."""
        lo, hi = int(net.network_address), int(net.broadcast_address)
        for first, last, found in self._intervals[net.version]:
            if first <= lo and hi <= last:
                return found
        return None


BUILTIN = RangeSet(BUILTIN_DENY)


def builtin_problem(net: IPNetwork) -> Problem | None:
    """("denied", why) when `net` overlaps a built-in range, else None."""
    hit = BUILTIN.overlapping(net)
    return None if hit is None else ("denied", f"{net} overlaps built-in range {hit}")
