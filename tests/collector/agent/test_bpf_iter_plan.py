"""The pure side of the open-connection switch: which prefixes' open connections move, and the iterator's maps."""

from __future__ import annotations

import ipaddress
import re
import struct
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from collector.agent.bpf.build import source_text
from collector.agent.bpf.iter_plan import (
    ENTRY,
    HOLD,
    ITER_FUNCTION,
    ITER_MAP_STATS,
    ITER_MAP_V4,
    ITER_MAP_V6,
    ITER_PROGRAM,
    ITER_STATS,
    Switch,
    decide,
    decode_entry,
    encode_entry,
    iter_maps,
    plan_switches,
    switches_for,
)
from collector.agent.bpf.iterate import OpenConnections, SwitchReport
from collector.agent.bpf.plan import DEFAULT_THRESHOLD, encode_key
from collector.agent.plan import InvalidConfig, Wanted

A, B = "198.51.100.0/24", "203.0.113.0/24"
A6 = "2001:db8:100::/56"


def sel(*prefixes: str, algorithm: str = "bbr", threshold: int = 0) -> dict[str, Wanted]:
    return {p: Wanted(p, algorithm, False, threshold) for p in prefixes}


def net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


def test_a_prefix_that_leaves_goes_back_to_cubic_from_the_algorithm_it_had() -> None:
    plan = plan_switches(sel(A, B), sel(B))
    assert plan == {net(A): Switch("cubic", 0, only_from="bbr")}
    assert decide(plan, "198.51.100.7", 0, "bbr") == "cubic"  # any size: nothing waits for a threshold
    assert decide(plan, "198.51.100.7", 10**9, "cubic") is None  # already there
    assert decide(plan, "198.51.100.7", 10**9, "reno") is None  # not ours to change
    assert decide(plan, "203.0.113.7", 10**9, "bbr") is None  # the prefix that stays


def test_a_prefix_that_enters_switches_its_connections_past_the_threshold() -> None:
    plan = plan_switches(sel(B), sel(A, B))
    assert plan == {net(A): Switch("bbr", DEFAULT_THRESHOLD + 1)}
    assert decide(plan, "198.51.100.7", DEFAULT_THRESHOLD, "cubic") is None  # "flows above 100 KB"
    assert decide(plan, "198.51.100.7", DEFAULT_THRESHOLD + 1, "cubic") == "bbr"
    assert decide(plan, "::ffff:198.51.100.7", DEFAULT_THRESHOLD + 1, "cubic") == "bbr"  # dual-stack listener
    custom = plan_switches({}, sel(A6, threshold=5000))
    assert custom == {net(A6): Switch("bbr", 5001)}
    assert decide(custom, "2001:db8:100::10", 5001, "cubic") == "bbr"


def test_nothing_changes_nothing_to_do() -> None:
    assert plan_switches(sel(A, B), sel(A, B)) == {}
    assert plan_switches(sel(A, threshold=1), sel(A, threshold=10**6)) == {}  # a threshold change is not a switch
    assert plan_switches({}, {}) == {}


def test_kill_switch_reverts_everything() -> None:
    plan = plan_switches(sel(A, A6), {})
    assert plan == {net(A): Switch("cubic", 0, "bbr"), net(A6): Switch("cubic", 0, "bbr")}
    assert plan_switches(sel(A, algorithm="cubic"), {}) == {}  # already the default


def test_route_mode_follows_only_the_kill_switch() -> None:
    assert switches_for("route", sel(A), sel(B)) == {}
    assert switches_for("route", sel(A), {}) == {net(A): Switch("cubic", 0, "bbr")}
    assert switches_for("bpf", sel(A), sel(B)) == {
        net(A): Switch("cubic", 0, "bbr"),
        net(B): Switch("bbr", 102401, watch=True),  # the bpf mode also watches those below the threshold
    }
    assert plan_switches(sel(A), sel(B))[net(B)] == Switch("bbr", 102401)
    with pytest.raises(ValueError):
        switches_for("tc", sel(A), {})


def test_a_kept_prefix_inside_a_reverted_one_is_held() -> None:
    plan = plan_switches(sel("198.51.0.0/16", A), sel(A))
    assert plan == {net("198.51.0.0/16"): Switch("cubic", 0, "bbr"), net(A): HOLD}
    assert decide(plan, "198.51.100.7", 10**6, "bbr") is None  # still selected
    assert decide(plan, "198.51.7.7", 10**6, "bbr") == "cubic"


def test_a_reverted_prefix_inside_a_new_wider_one_follows_the_wider() -> None:
    plan = plan_switches(sel("198.51.100.0/25"), sel(A))
    assert decide(plan, "198.51.100.7", 10**6, "bbr") is None  # was on bbr, stays under the /24
    assert decide(plan, "198.51.100.200", 10**6, "cubic") == "bbr"  # newly selected, past the threshold
    assert plan[net("198.51.100.0/25")] == HOLD


def test_ipv4_mapped_prefixes_count_as_ipv4() -> None:
    plan = plan_switches(sel("::ffff:198.51.100.0/120"), {})
    assert plan == {net(A): Switch("cubic", 0, "bbr")}
    maps = iter_maps(plan)
    assert maps[ITER_MAP_V4] == {encode_key(net(A)): encode_entry(Switch("cubic", 0, "bbr"))} and not maps[ITER_MAP_V6]


def test_entry_layout_and_refusals() -> None:
    raw = encode_entry(Switch("bbr", 102401, "", watch=True))
    assert raw == struct.pack("<QQ16s16s", 102401, 1, b"bbr", b"") and len(raw) == ENTRY.size == 48
    assert decode_entry(raw) == Switch("bbr", 102401, "", watch=True)
    assert decode_entry(encode_entry(Switch("cubic", 0, "bbr"))) == Switch("cubic", 0, "bbr")
    assert decode_entry(encode_entry(HOLD)) == HOLD
    with pytest.raises(InvalidConfig, match="does not fit"):
        encode_entry(Switch("x" * 16))


def test_the_c_program_matches_the_python_layout() -> None:
    text = source_text(ITER_PROGRAM)
    indexes = {m[0].lower(): int(m[1]) for m in re.findall(r"STAT_([A-Z]+) = (\d+),", text) if m[0] != "COUNT"}
    assert indexes == {name: i for i, name in enumerate(ITER_STATS)}
    for name in (ITER_MAP_V4, ITER_MAP_V6, ITER_MAP_STATS, ITER_FUNCTION):
        assert re.search(rf"\b{name}\b", text), name
    fields = r"__u64 min_acked;.*\n\s*__u64 flags;.*\n\s*char algorithm\[CC_NAME_LEN\];.*\n\s*char from\[CC_NAME_LEN\];"
    assert re.search(fields, text)
    assert "#define ENTRY_WATCH 1 " in text
    assert 'SEC("iter/tcp")' in text


def test_follow_without_the_toolchain_says_so_and_without_a_change_does_nothing() -> None:
    follower = OpenConnections("route", None, None, "no BPF toolchain (clang not found)")
    assert not follower.available
    assert follower.follow(sel(A), sel(A, B)) is None  # route mode, not a kill switch
    report = follower.follow(sel(A, A6), {})
    assert report is not None and not report.ok and report.prefixes == 2 and report.switched == 0
    assert report.summary() == (
        "open connections of 2 prefixes keep their algorithm until they close: no BPF toolchain (clang not found)"
    )
    assert OpenConnections("bpf", None, None, "x").follow(sel(A), sel(A)) is None


def test_report_summary() -> None:
    report = SwitchReport(3, {"switched": 40, "failed": 1, "below": 2, "visited": 90}, 0.25)
    assert report.ok and report.switched == 40 and report.failed == 1
    assert report.summary() == (
        "open connections of 3 prefixes: switched=40 failed=1 already=0 below_threshold=2 (watched=0) "
        "other_algorithm=0 (of 90 TCP sockets) in 0.250s"
    )


def test_iterator_object_builds(tmp_path: Path) -> None:
    pytest.importorskip("shutil").which("clang") or pytest.skip("no clang")
    from collector.agent.bpf.build import build_object

    obj = build_object(tmp_path, program=ITER_PROGRAM)
    assert obj.name.startswith("cc_iter-") and obj.stat().st_size > 0


# -------------------------------------------------------- against a reference

PREFIXES = [
    "198.51.0.0/16", "198.51.100.0/24", "198.51.100.0/25", "198.51.100.128/26", "203.0.113.0/24",
    "::ffff:198.51.100.0/120", "2001:db8::/32", "2001:db8:100::/56", "2001:db8:100::/64",
]  # fmt: skip
ADDRESSES = [
    "198.51.100.7", "198.51.100.130", "198.51.100.200", "198.51.7.7", "203.0.113.9", "192.0.2.1",
    "::ffff:198.51.100.7", "2001:db8:100::10", "2001:db8:100:0:1::1", "2001:db8:200::1", "2001:db8:100:ff::1",
]  # fmt: skip
selections = st.dictionaries(
    st.sampled_from(PREFIXES), st.tuples(st.sampled_from(["bbr", "cubic", "reno"]), st.sampled_from([0, 1, 5000]))
)


def _longest(selection: dict[str, tuple[str, int]], address: str) -> tuple[str, int] | None:
    addr = ipaddress.ip_address(address)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    best: tuple[int, tuple[str, int]] | None = None
    for prefix, value in selection.items():
        n = ipaddress.ip_network(prefix)
        if isinstance(n, ipaddress.IPv6Network) and n.subnet_of(ipaddress.IPv6Network("::ffff:0:0/96")):
            n = ipaddress.ip_network((int(n.network_address) & 0xFFFFFFFF, n.prefixlen - 96))
        if n.version == addr.version and addr in n and (best is None or n.prefixlen > best[0]):
            best = (n.prefixlen, value)
    return best[1] if best else None


def _dedup(selection: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """One of two spellings of the same prefix (the config check refuses both)."""
    out = dict(selection)
    if "::ffff:198.51.100.0/120" in out and "198.51.100.0/24" in out:
        del out["::ffff:198.51.100.0/120"]
    return out


@settings(max_examples=300, deadline=None)
@given(
    selections,
    selections,
    st.sampled_from(ADDRESSES),
    st.sampled_from([0, 1, 5001, 10**6]),
    st.sampled_from(["bbr", "cubic", "reno"]),
)
def test_the_planned_tries_decide_like_the_selections(
    before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]], address: str, acked: int, current: str
) -> None:
    before, after = _dedup(before), _dedup(after)
    plan = plan_switches(
        {p: Wanted(p, a, False, t) for p, (a, t) in before.items()},
        {p: Wanted(p, a, False, t) for p, (a, t) in after.items()},
    )
    was, now = _longest(before, address), _longest(after, address)
    want: str | None = None
    if now is not None and (was is None or was[0] != now[0]):
        threshold = now[1] or DEFAULT_THRESHOLD
        want = now[0] if acked > threshold and current != now[0] else None
    elif now is None and was is not None and was[0] != "cubic":
        want = "cubic" if current == was[0] else None
    assert decide(plan, address, acked, current) == want
    assert all(s.acts or s == HOLD for s in plan.values())
