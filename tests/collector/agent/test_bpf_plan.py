"""The pure side of `--enforce bpf`: map keys and values, desired contents, IPv4-mapped prefixes, diffs."""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from collector.agent.bpf.build import PROGRAM, cached_name, clang_command, source_text
from collector.agent.bpf.plan import (
    DEFAULT_THRESHOLD,
    MAP_V4,
    MAP_V6,
    STATS,
    VALUE,
    Target,
    decode_key,
    decode_value,
    desired_maps,
    diff_map,
    encode_key,
    encode_value,
    entries_of,
    lookup,
    normalize,
    readback_problems,
)
from collector.agent.plan import InvalidConfig, Wanted, parse_wanted
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry

v4_nets = st.builds(
    lambda addr, length: ipaddress.IPv4Network((addr, length), strict=False),
    st.integers(0, 2**32 - 1),
    st.integers(1, 31),
)
v6_nets = st.builds(
    lambda addr, length: ipaddress.IPv6Network((addr, length), strict=False),
    st.integers(0, 2**128 - 1),
    st.integers(1, 127),
)
algorithms = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=15)


def wanted(prefixes: list[str], algo: str = "bbr", threshold: int = 0) -> dict[str, Wanted]:
    return {p: Wanted(p, algo, False, threshold) for p in prefixes}


@settings(max_examples=200, deadline=None)
@given(net=st.one_of(v4_nets, v6_nets))
def test_key_round_trip_and_layout(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> None:
    net = normalize(net)
    name = MAP_V4 if net.version == 4 else MAP_V6
    key = encode_key(net)
    assert len(key) == (8 if net.version == 4 else 20)
    assert struct.unpack_from("<I", key)[0] == net.prefixlen  # struct bpf_lpm_trie_key: host-order u32 first
    assert key[4:] == net.network_address.packed  # then the address in network order
    assert decode_key(name, key) == net


@settings(max_examples=200, deadline=None)
@given(algorithm=algorithms, start=st.one_of(st.just(""), algorithms), threshold=st.integers(0, 2**64 - 1))
def test_value_round_trip(algorithm: str, start: str, threshold: int) -> None:
    target = Target(algorithm, threshold, start, netns=threshold // 3)
    raw = encode_value(target)
    assert len(raw) == VALUE.size == 48
    assert decode_value(raw) == target


def test_names_that_do_not_fit_are_refused() -> None:
    with pytest.raises(InvalidConfig, match="does not fit"):
        encode_value(Target("a" * 16, 1))
    with pytest.raises(InvalidConfig):
        desired_maps(wanted(["198.51.100.0/24"], algo="x" * 20))


@settings(max_examples=200, deadline=None)
@given(net=v4_nets.filter(lambda n: n.prefixlen >= 1))
def test_ipv4_mapped_prefixes_are_stored_as_ipv4(net: ipaddress.IPv4Network) -> None:
    mapped = ipaddress.IPv6Network((int(net.network_address) | 0xFFFF00000000, net.prefixlen + 96))
    assert normalize(mapped) == net
    maps = desired_maps(wanted([str(mapped)]))
    assert list(maps[MAP_V4]) == [encode_key(net)] and maps[MAP_V6] == {}
    with pytest.raises(InvalidConfig, match="same prefix"):
        desired_maps(wanted([str(mapped), str(net)]))
    inside = str(net.network_address + (net.num_addresses - 1))
    assert lookup(maps, inside) is not None
    assert lookup(maps, f"::ffff:{inside}") is not None  # an IPv4-mapped peer is looked up as IPv4


def test_desired_maps_from_a_config() -> None:
    config = CongestionConfig(pop="lax", version=3, switch_threshold_bytes=0)
    config.entries.extend(
        PrefixEntry(prefix=p, algorithm="bbr") for p in ("198.51.100.0/24", "2001:db8:100::/56", "::ffff:cb00:7100/120")
    )
    maps = desired_maps(parse_wanted(config, ["bbr", "cubic"]), netns=77)
    assert entries_of(maps) == {
        "198.51.100.0/24": Target("bbr", DEFAULT_THRESHOLD, "cubic", 77),
        "203.0.113.0/24": Target("bbr", DEFAULT_THRESHOLD, "cubic", 77),
        "2001:db8:100::/56": Target("bbr", DEFAULT_THRESHOLD, "cubic", 77),
    }
    config.switch_threshold_bytes = 5000
    maps = desired_maps(parse_wanted(config, None))
    assert {t.threshold for t in entries_of(maps).values()} == {5000}
    assert lookup(maps, "198.51.100.77") == Target("bbr", 5000, "cubic", 0)
    assert lookup(maps, "2001:db8:100:ff::1") is not None
    assert lookup(maps, "2001:db8:101::1") is None and lookup(maps, "192.0.2.1") is None
    config.kill_switch = True
    assert desired_maps(parse_wanted(config, None)) == {MAP_V4: {}, MAP_V6: {}}


@settings(max_examples=100, deadline=None)
@given(
    current=st.dictionaries(st.binary(min_size=8, max_size=8), st.binary(min_size=2, max_size=2), max_size=12),
    target=st.dictionaries(st.binary(min_size=8, max_size=8), st.binary(min_size=2, max_size=2), max_size=12),
)
def test_diff_turns_current_into_target(current: dict[bytes, bytes], target: dict[bytes, bytes]) -> None:
    delete, put = diff_map(current, target)
    result = {k: v for k, v in current.items() if k not in delete}
    result.update(put)
    assert result == target
    assert all(current.get(k) != v for k, v in put.items())  # nothing rewritten needlessly


def test_readback_names_every_difference() -> None:
    want = desired_maps(wanted(["198.51.100.0/24", "2001:db8:100::/56"]))
    assert readback_problems(want, want) == []
    got = {MAP_V4: {}, MAP_V6: dict(want[MAP_V6])}
    got[MAP_V4][encode_key(ipaddress.IPv4Network("203.0.113.0/24"))] = encode_value(Target("bbr", 1))
    key6 = next(iter(got[MAP_V6]))
    got[MAP_V6][key6] = encode_value(Target("cubic", 1))
    problems = readback_problems(want, got)
    assert any("198.51.100.0/24: missing" in p for p in problems)
    assert any("203.0.113.0/24: unexpected" in p for p in problems)
    assert any("2001:db8:100::/56: read back" in p for p in problems)


def test_lookup_prefers_the_longest_prefix() -> None:
    maps = desired_maps(wanted(["198.51.0.0/16"]))
    maps[MAP_V4].update(desired_maps(wanted(["198.51.100.0/24"], algo="cubic"))[MAP_V4])
    assert lookup(maps, "198.51.100.1") == Target("cubic", DEFAULT_THRESHOLD)
    assert lookup(maps, "198.51.7.1") == Target("bbr", DEFAULT_THRESHOLD)


def test_source_mirrors_the_python_layout() -> None:
    """The C program's names and counter order are the ones bpf/plan.py reads."""
    text = source_text()
    for name in (MAP_V4, MAP_V6, "dyncc_stats"):
        assert f'}} {name} SEC(".maps");' in text
    order = [line.split("=")[0].strip() for line in text.splitlines() if line.strip().startswith("STAT_")]
    assert [o.removeprefix("STAT_").lower() for o in order[: len(STATS)]] == list(STATS)
    assert "__u64 threshold;" in text and "__u64 netns;" in text


def test_object_name_follows_source_and_command() -> None:
    def object_name(text: str, clang: str = "clang") -> str:
        return cached_name(PROGRAM, text, clang_command(Path("SRC"), Path("OUT"), clang))

    assert object_name("a") != object_name("b") and object_name("a") == object_name("a")
    assert object_name("a") != object_name("a", clang="clang-16")
    cmd = clang_command(Path("x.c"), Path("x.o"))
    assert cmd[:5] == ["clang", "-O2", "-g", "-target", "bpf"]
