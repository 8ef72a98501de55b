"""Pure decisions about OPEN connections when a config changes (docs/enforce.md, "Open connections").

No I/O here.  A config change moves prefixes on or off BBR; the sock_ops program and the routes
act only on new connections, so the agent runs a BPF TCP iterator (collector/agent/bpf/cc_iter.c)
once over the connections already open.  This module decides what that run does:

- `plan_switches(before, after)`: for every prefix of either set, the `Switch` its open
  connections get, by longest-prefix match like the kernel's tries.  A prefix that leaves the
  selection (a revert, a config without it, the kill switch) goes back to the default algorithm
  (cubic), but only its connections still on the algorithm it had (`only_from`).  A prefix that
  enters it, or changes algorithm, switches its connections that have more than the config's
  threshold acknowledged (`min_acked` = threshold + 1; the route mode never asks for this), and
  in the bpf mode turns the sock_ops per-RTT callback on for the others (`watch`), so that the
  sock_ops program switches them when they pass the threshold.  A
  prefix whose selection is unchanged is held (algorithm ""), and only when it would otherwise
  fall under a shorter prefix that acts.
- `switches_for(mode, before, after)`: the moments: the bpf mode follows every change; the route
  mode only the kill switch (an empty selection), since its routes already cover new connections.
- `iter_maps(switches)`: the exact bytes of the iterator's tries (IPv4-mapped prefixes as IPv4,
  as the program looks IPv4-mapped peers up); InvalidConfig when an algorithm name does not fit.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from collector.agent.bpf.plan import (
    CC_NAME_LEN,
    MAX_PREFIXES,
    START_ALGORITHM,
    Net,
    encode_key,
    normalize,
    switch_threshold,
)
from collector.agent.plan import InvalidConfig, Wanted

ITER_PROGRAM = "cc_iter"
ITER_FUNCTION = "dyncc_cc_iter"
ITER_MAP_V4 = "dyncc_it_v4"
ITER_MAP_V6 = "dyncc_it_v6"
ITER_MAP_STATS = "dyncc_it_stats"
ITER_MAPS = (ITER_MAP_V4, ITER_MAP_V6)
ITER_KEY_SIZES = {ITER_MAP_V4: 8, ITER_MAP_V6: 20}
ENTRY = struct.Struct("<QQ16s16s")  # struct entry { u64 min_acked; u64 flags; char algorithm[16]; char from[16]; }
ENTRY_WATCH = 1
ITER_STATS = ("matched", "switched", "failed", "already", "below", "other", "visited", "watched")  # index order
DEFAULT_ALGORITHM = START_ALGORITHM
MODES = ("route", "bpf")


@dataclass(frozen=True)
class Switch:
    """What the iterator does to the open connections of one prefix.

    Connections with at least `min_acked` bytes acknowledged that are on `only_from` ("" = any
    other algorithm) go to `algorithm`; `algorithm` "" holds the prefix (nothing changes).  With
    `watch`, the connections below `min_acked` get the sock_ops per-RTT callback, so that the
    bpf mode's program switches them when they pass the threshold.
    """

    algorithm: str
    min_acked: int = 0
    only_from: str = ""
    watch: bool = False

    @property
    def acts(self) -> bool:
        return bool(self.algorithm)


HOLD = Switch("")


def _net(prefix: str) -> Net:
    return normalize(ipaddress.ip_network(prefix, strict=False))


class _Selection:
    """Prefixes (normalized) with their Wanted, and the prefix lengths present per IP version."""

    def __init__(self, wanted: Mapping[str, Wanted]) -> None:
        self.by_net: dict[Net, Wanted] = {_net(prefix): want for prefix, want in wanted.items()}
        self.lengths = {v: sorted({n.prefixlen for n in self.by_net if n.version == v}, reverse=True) for v in (4, 6)}

    def covering(self, net: Net) -> Wanted | None:
        """The longest prefix of the selection that covers `net` (itself included)."""
        for length in self.lengths[net.version]:
            if length <= net.prefixlen:
                found = self.by_net.get(_supernet(net, length))
                if found is not None:
                    return found
        return None


def _supernet(net: Net, length: int) -> Net:
    return net if length == net.prefixlen else ipaddress.ip_network((net.network_address, length), strict=False)


def _switch(was: Wanted | None, now: Wanted | None, default: str, watch: bool) -> Switch:
    if now is not None and (was is None or was.algorithm != now.algorithm):
        return Switch(now.algorithm, switch_threshold(now.threshold) + 1, watch=watch)
    if now is None and was is not None and was.algorithm != default:
        return Switch(default, 0, only_from=was.algorithm)
    return HOLD


def _shadows(net: Net, acting: _Acting) -> bool:
    """Some acting prefix strictly covers `net` (so a hold entry for `net` is needed)."""
    return any(
        _supernet(net, length) in acting.nets for length in acting.lengths[net.version] if length < net.prefixlen
    )


class _Acting:
    def __init__(self, nets: set[Net]) -> None:
        self.nets = nets
        self.lengths = {v: sorted({n.prefixlen for n in nets if n.version == v}) for v in (4, 6)}


def plan_switches(
    before: Mapping[str, Wanted], after: Mapping[str, Wanted], *, default: str = DEFAULT_ALGORITHM, watch: bool = False
) -> dict[Net, Switch]:
    """Normalized prefix -> Switch for the open connections when `before` is replaced by `after`.

    Each connection gets the Switch of the longest prefix of the result covering its peer (the
    tries' rule), and that Switch is what the change means for it: a result with no acting
    Switch means nothing to do.  `watch`: entering prefixes' connections below the threshold get
    the sock_ops per-RTT callback (the bpf mode).
    """
    old, new = _Selection(before), _Selection(after)
    switches = {
        net: _switch(old.covering(net), new.covering(net), default, watch)
        for net in old.by_net.keys() | new.by_net.keys()
    }
    acts = _Acting({net for net, switch in switches.items() if switch.acts})
    if not acts.nets:
        return {}
    return {net: switch for net, switch in switches.items() if switch.acts or _shadows(net, acts)}


def switches_for(mode: str, before: Mapping[str, Wanted], after: Mapping[str, Wanted]) -> dict[Net, Switch]:
    """The switches a config change asks for in enforcement mode `mode` ("route" or "bpf")."""
    if mode not in MODES:
        raise ValueError(f"unknown enforcement mode {mode!r}")
    if mode == "route" and after:
        return {}  # routes follow new connections; only the kill switch reaches open ones
    return plan_switches(before, after, watch=mode == "bpf")


def acting(switches: Mapping[Net, Switch]) -> int:
    return sum(1 for switch in switches.values() if switch.acts)


def _name(text: str) -> bytes:
    raw = text.encode()
    if len(raw) >= CC_NAME_LEN or b"\0" in raw:
        raise InvalidConfig(f"algorithm {text!r} does not fit the iterator's {CC_NAME_LEN - 1}-byte name")
    return raw


def encode_entry(switch: Switch) -> bytes:
    flags = ENTRY_WATCH if switch.watch else 0
    return ENTRY.pack(switch.min_acked, flags, _name(switch.algorithm), _name(switch.only_from))


def decode_entry(value: bytes) -> Switch:
    min_acked, flags, algorithm, only_from = ENTRY.unpack(value)
    text = [raw.split(b"\0", 1)[0].decode(errors="replace") for raw in (algorithm, only_from)]
    return Switch(text[0], min_acked, text[1], bool(flags & ENTRY_WATCH))


def iter_maps(switches: Mapping[Net, Switch]) -> dict[str, dict[bytes, bytes]]:
    """Map name -> {key: value} of the iterator's tries for `switches` (InvalidConfig if impossible)."""
    maps: dict[str, dict[bytes, bytes]] = {name: {} for name in ITER_MAPS}
    for net, switch in switches.items():
        maps[ITER_MAP_V4 if net.version == 4 else ITER_MAP_V6][encode_key(net)] = encode_entry(switch)
    for name, entries in maps.items():
        if len(entries) > MAX_PREFIXES:
            raise InvalidConfig(f"{len(entries)} prefixes for {name}: the iterator holds at most {MAX_PREFIXES}")
    return maps


def decide(switches: Mapping[Net, Switch], address: str, bytes_acked: int, current: str) -> str | None:
    """The iterator's rule for one sending connection: the algorithm it switches to, or None."""
    addr = ipaddress.ip_address(address)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    for length in range(addr.max_prefixlen, -1, -1):
        switch = switches.get(ipaddress.ip_network((addr, length), strict=False))
        if switch is None:
            continue
        if not switch.acts or bytes_acked < switch.min_acked or current == switch.algorithm:
            return None
        if switch.only_from and current != switch.only_from:
            return None
        return switch.algorithm
    return None
