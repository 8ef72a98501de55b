"""Pure decisions of the agent's eBPF enforcement mode: what the sock_ops program's maps must hold.

No I/O here.  The program (collector/agent/bpf/cc_switch.c) looks a connection's peer up in
two LPM tries; this module mirrors their layout and turns a config's wanted prefixes into
the exact bytes the maps must contain:

- keys: `struct { u32 prefixlen; u8 addr[4 or 16]; }` (prefixlen little-endian, address in
  network order); an IPv4-mapped IPv6 prefix (::ffff:0:0/96 and longer) is stored as IPv4,
  because the program looks IPv4-mapped peers up as IPv4;
- values: `struct target { u64 threshold; u64 netns; char algorithm[16]; char start[16]; }`;
- `desired_maps` refuses (InvalidConfig) what the maps cannot hold: an algorithm name of 16
  bytes or more, two entries for the same normalized prefix, more than MAX_PREFIXES per family;
- `diff_map` and `readback_problems` are the exact comparisons used for apply, rollback and
  the read-back check; `lookup` is the program's selection rule for a peer address.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from collector.agent.plan import InvalidConfig, Wanted, canonical_prefix

MAP_V4 = "dyncc_v4"
MAP_V6 = "dyncc_v6"
MAP_STATS = "dyncc_stats"
SELECTION_MAPS = (MAP_V4, MAP_V6)
PROGRAM = "cc_switch"
DEFAULT_THRESHOLD = 102400  # bytes acknowledged; the scoring's "flows above 100 KB"
START_ALGORITHM = "cubic"
CC_NAME_LEN = 16
MAX_PREFIXES = 65536  # per family: the tries' max_entries (MAX_PREFIXES in cc_switch.c)
KEY_SIZES = {MAP_V4: 8, MAP_V6: 20}
VALUE = struct.Struct("<QQ16s16s")
STATS = ("selected", "switched", "failed", "released", "start_failed", "other_netns")  # index order
MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")

Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Target:
    """One trie value: switch to `algorithm` after `threshold` bytes acked, start on `start`."""

    algorithm: str
    threshold: int
    start: str = START_ALGORITHM
    netns: int = 0  # network-namespace cookie the entry applies to (0 = any)


def switch_threshold(value: int) -> int:
    """A config's switch_threshold_bytes (0 = the default)."""
    return value or DEFAULT_THRESHOLD


def normalize(net: Net) -> Net:
    """An IPv4-mapped IPv6 prefix as the IPv4 prefix it covers; anything else unchanged."""
    if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96 and net.subnet_of(MAPPED):
        v4 = ipaddress.IPv4Address(int(net.network_address) & 0xFFFFFFFF)
        return ipaddress.IPv4Network((v4, net.prefixlen - 96))
    return net


def map_of(net: Net) -> str:
    return MAP_V4 if net.version == 4 else MAP_V6


def encode_key(net: Net) -> bytes:
    return struct.pack("<I", net.prefixlen) + net.network_address.packed


def decode_key(map_name: str, key: bytes) -> Net:
    if len(key) != KEY_SIZES[map_name]:
        raise ValueError(f"{map_name} key of {len(key)} bytes")
    (length,) = struct.unpack_from("<I", key)
    address = ipaddress.ip_address(key[4:])
    return ipaddress.ip_network((address, length), strict=False)


def _name(text: str, what: str) -> bytes:
    raw = text.encode()
    if not raw or len(raw) >= CC_NAME_LEN or b"\0" in raw:
        raise InvalidConfig(f"{what} {text!r} does not fit the program's {CC_NAME_LEN - 1}-byte name")
    return raw


def encode_value(target: Target) -> bytes:
    start = _name(target.start, "start algorithm") if target.start else b""
    return VALUE.pack(target.threshold, target.netns, _name(target.algorithm, "algorithm"), start)


def decode_value(value: bytes) -> Target:
    threshold, netns, algorithm, start = VALUE.unpack(value)
    text = [raw.split(b"\0", 1)[0].decode(errors="replace") for raw in (algorithm, start)]
    return Target(algorithm=text[0], threshold=threshold, start=text[1], netns=netns)


def desired_maps(
    wanted: Mapping[str, Wanted], *, netns: int = 0, start: str = START_ALGORITHM
) -> dict[str, dict[bytes, bytes]]:
    """Map name -> {key bytes: value bytes} for the wanted prefixes (InvalidConfig if impossible).

    Each entry's threshold is its Wanted's (the config's switch_threshold_bytes; 0 = the default).
    """
    maps: dict[str, dict[bytes, bytes]] = {name: {} for name in SELECTION_MAPS}
    origin: dict[tuple[str, bytes], str] = {}
    for prefix, want in wanted.items():
        net = normalize(canonical_prefix(prefix))
        name, key = map_of(net), encode_key(net)
        if (name, key) in origin:
            raise InvalidConfig(f"{prefix} and {origin[name, key]} are the same prefix ({net})")
        origin[name, key] = prefix
        target = Target(want.algorithm, switch_threshold(want.threshold), start, netns)
        maps[name][key] = encode_value(target)
    for name, entries in maps.items():
        if len(entries) > MAX_PREFIXES:
            raise InvalidConfig(f"{len(entries)} prefixes for {name}: the program holds at most {MAX_PREFIXES}")
    return maps


def describe(map_name: str, key: bytes) -> str:
    try:
        return str(decode_key(map_name, key))
    except ValueError:
        return f"{map_name}[{key.hex()}]"


def diff_map(current: Mapping[bytes, bytes], target: Mapping[bytes, bytes]) -> tuple[list[bytes], dict[bytes, bytes]]:
    """(keys to delete, items to write) turning `current` into exactly `target`."""
    delete = [key for key in current if key not in target]
    put = {key: value for key, value in target.items() if current.get(key) != value}
    return delete, put


def readback_problems(
    expected: Mapping[str, Mapping[bytes, bytes]], got: Mapping[str, Mapping[bytes, bytes]], limit: int = 20
) -> list[str]:
    """Differences between the maps we meant to write and what the kernel holds (empty = OK)."""
    errors: list[str] = []
    for name in SELECTION_MAPS:
        want, have = expected.get(name, {}), got.get(name, {})
        for key, value in want.items():
            if key not in have:
                errors.append(f"{describe(name, key)}: missing from {name} after write")
            elif have[key] != value:
                errors.append(
                    f"{describe(name, key)}: read back {decode_value(have[key])}, wanted {decode_value(value)}"
                )
        errors.extend(f"{describe(name, key)}: unexpected entry in {name}" for key in have if key not in want)
    if len(errors) > limit:
        errors = [*errors[:limit], f"... and {len(errors) - limit} more"]
    return errors


def entries_of(maps: Mapping[str, Mapping[bytes, bytes]]) -> dict[str, Target]:
    """The maps' contents as prefix -> Target (what is in force)."""
    out: dict[str, Target] = {}
    for name in SELECTION_MAPS:
        for key, value in maps.get(name, {}).items():
            out[str(decode_key(name, key))] = decode_value(value)
    return out


def lookup(maps: Mapping[str, Mapping[bytes, bytes]], address: str) -> Target | None:
    """The program's selection for a peer: longest matching prefix, IPv4-mapped peers as IPv4."""
    addr = ipaddress.ip_address(address)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    name = MAP_V4 if addr.version == 4 else MAP_V6
    for length in range(addr.max_prefixlen, -1, -1):
        net = ipaddress.ip_network((addr, length), strict=False)
        value = maps.get(name, {}).get(encode_key(net))
        if value is not None:
            return decode_value(value)
    return None
