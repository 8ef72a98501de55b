"""Pure agent logic: config verdicts, entry validation, covering lookup, plan/diff, read-back."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from collector.agent.plan import (
    ACCEPT,
    IGNORE,
    REFUSE,
    UNCHANGED,
    InvalidConfig,
    Wanted,
    check_config,
    diff_owned,
    make_plan,
    parse_wanted,
    route_of,
    split_table,
    verify_readback,
)
from collector.netlink.rtnetlink import RouteRecord
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry
from schemas.signing import generate_keypair, load_private_key, sign

OURS = 250
V4, V6 = socket.AF_INET, socket.AF_INET6


def rec(
    prefix: str,
    *,
    proto: int = 4,
    gateway: str | None = None,
    oif: int | None = 2,
    cc: str | None = None,
    priority: int | None = None,
    rtype: int = 1,
    **kw,
) -> RouteRecord:
    dst, length = prefix.split("/")
    family = V6 if ":" in dst else V4
    return RouteRecord(
        family=family,
        dst=dst,
        dst_len=int(length),
        table=254,
        proto=proto,
        scope=0,
        rtype=rtype,
        gateway=gateway,
        oif=oif,
        cc_algo=cc,
        priority=priority,
        **kw,
    )


def table() -> list[RouteRecord]:
    return [
        rec("0.0.0.0/0", proto=3, gateway="192.0.2.1", cc="cubic", metrics=((2, 1400),)),
        rec("192.0.2.0/24", proto=2, oif=2, prefsrc="192.0.2.2"),
        rec("203.0.113.0/25", proto=4, gateway="192.0.2.9"),
        rec("::/0", proto=3, gateway="2001:db8:1::1", priority=1024),
        rec("::/0", proto=3, gateway="2001:db8:1::7", priority=2048),
        rec("2001:db8:dead::/48", proto=4, rtype=6, oif=None),  # blackhole
    ]


def wanted(*prefixes: str, algo: str = "bbr") -> dict[str, Wanted]:
    return {p: Wanted(p, algo, False) for p in prefixes}


def test_plan_copies_the_covering_nexthop_and_metrics() -> None:
    plan = make_plan(split_table(table(), OURS), wanted("198.51.100.0/24", "2001:db8:100::/56"))
    v4, v6 = plan.target["198.51.100.0/24"], plan.target["2001:db8:100::/56"]
    assert (v4.nexthop.gateway, v4.nexthop.oif, v4.nexthop.metrics) == ("192.0.2.1", 2, ((2, 1400),))
    assert v4.algorithm == "bbr"  # the covering route's cubic is not copied
    assert (v6.nexthop.gateway, v6.nexthop.priority) == ("2001:db8:1::1", 1024)  # lowest metric wins
    assert [r.prefix for r in plan.add] == ["198.51.100.0/24", "2001:db8:100::/56"]
    assert plan.remove == [] and plan.skipped == {}


def test_longest_match_and_connected_routes() -> None:
    plan = make_plan(split_table(table(), OURS), wanted("203.0.113.0/26", "192.0.2.128/25"))
    assert plan.target["203.0.113.0/26"].nexthop.gateway == "192.0.2.9"  # the /25, not the default
    connected = plan.target["192.0.2.128/25"].nexthop
    assert connected.gateway is None and connected.prefsrc == "192.0.2.2"


def test_foreign_route_for_same_prefix_is_a_conflict_and_unusable_covers_are_skipped() -> None:
    routes = [*table(), rec("198.51.100.0/24", proto=4, gateway="192.0.2.5")]
    plan = make_plan(split_table(routes, OURS), wanted("198.51.100.0/24", "2001:db8:dead:100::/56"))
    assert "conflict" in plan.skipped["198.51.100.0/24"]
    assert "blackhole" in plan.skipped["2001:db8:dead:100::/56"]
    assert plan.add == [] and plan.target == {}
    no_v6 = [r for r in table() if r.family == V4]
    assert make_plan(split_table(no_v6, OURS), wanted("2001:db8:5::/56")).skipped == {
        "2001:db8:5::/56": "no covering route"
    }


def test_owned_routes_keep_follow_and_go() -> None:
    first = make_plan(split_table(table(), OURS), wanted("198.51.100.0/24", "2001:db8:100::/56"))
    installed = [
        replace(
            rec(
                r.prefix,
                proto=OURS,
                gateway=r.nexthop.gateway,
                oif=r.nexthop.oif,
                cc="bbr",
                priority=r.nexthop.priority,
                metrics=r.nexthop.metrics,
            )
        )
        for r in first.target.values()
    ]
    view = split_table(table() + installed, OURS)
    assert set(view.owned) == {"198.51.100.0/24", "2001:db8:100::/56"}
    same = make_plan(view, wanted("198.51.100.0/24", "2001:db8:100::/56"))
    assert same.changes == 0 and len(same.keep) == 2
    # covering gateway moves: the owned v4 route is replaced, v6 kept; a dropped prefix goes
    moved = [replace(r, gateway="192.0.2.3") if r.prefix == "0.0.0.0/0" else r for r in table()]
    plan = make_plan(split_table(moved + installed, OURS), wanted("198.51.100.0/24"))
    assert plan.replaced == 1 and plan.removed == 1 and plan.added == 0
    assert plan.target["198.51.100.0/24"].nexthop.gateway == "192.0.2.3"
    # an algorithm change is a replace too
    assert make_plan(view, wanted("198.51.100.0/24", "2001:db8:100::/56", algo="cubic")).replaced == 2


def test_owned_route_that_lost_its_covering_route_is_removed_and_duplicates_go() -> None:
    owned = rec("2001:db8:100::/56", proto=OURS, gateway="2001:db8:1::1", cc="bbr", priority=1024)
    dup = replace(owned, priority=2048)
    v4_only = [r for r in table() if r.family == V4]
    plan = make_plan(split_table([*v4_only, owned, dup], OURS), wanted("2001:db8:100::/56"))
    assert {r.nexthop.priority for r in plan.remove} == {1024, 2048} and plan.add == []


def test_diff_owned_is_exact() -> None:
    a = route_of(rec("198.51.100.0/24", proto=OURS, gateway="192.0.2.1", cc="bbr"))
    b = route_of(rec("203.0.113.0/24", proto=OURS, gateway="192.0.2.1", cc="bbr"))
    b2 = replace(b, algorithm="cubic")
    remove, add, keep = diff_owned({a.prefix: a, b.prefix: b}, {b.prefix: b2})
    assert remove == [a, b] and add == [b2] and keep == []


def test_verify_readback_catches_missing_algorithm_and_extras() -> None:
    want = route_of(rec("198.51.100.0/24", proto=OURS, gateway="192.0.2.1", cc="bbr"))
    no_algo = rec("198.51.100.0/24", proto=OURS, gateway="192.0.2.1", cc=None)
    extra = rec("203.0.113.0/24", proto=OURS, gateway="192.0.2.1", cc="bbr")
    errors = verify_readback({want.prefix: want}, split_table([no_algo, extra], OURS))
    assert any("RTAX_CC_ALGO" in e for e in errors) and any("unexpected" in e for e in errors)
    good = rec("198.51.100.0/24", proto=OURS, gateway="192.0.2.1", cc="bbr")
    assert verify_readback({want.prefix: want}, split_table([good], OURS)) == []
    wrong_gw = rec("198.51.100.0/24", proto=OURS, gateway="192.0.2.7", cc="bbr")
    assert verify_readback({want.prefix: want}, split_table([wrong_gw], OURS))


@pytest.fixture
def keys(tmp_path: Path):
    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    return load_private_key(tmp_path / "k")


def cfg(version: int = 5, pop: str = "lax", *entries: tuple[str, str]) -> CongestionConfig:
    config = CongestionConfig(schema_version=1, pop=pop, version=version)
    config.entries.extend(PrefixEntry(prefix=p, algorithm=a) for p, a in entries)
    return config


def test_check_config_verdicts(keys) -> None:
    signed = sign(cfg(5), keys)
    base: dict[str, Any] = {
        "pop": "lax",
        "host": "edge-1",
        "signature_error": None,
        "applied_version": 4,
        "applied_signature": b"",
    }
    assert check_config(signed, **base).action == ACCEPT
    assert check_config(cfg(5), **base).reason == "unsigned"
    assert check_config(signed, **{**base, "signature_error": "bad"}).reason == "bad_signature"
    assert check_config(signed, **{**base, "pop": "fra"}).reason == "wrong_pop"
    stale = check_config(signed, **{**base, "applied_version": 5})
    assert (stale.action, stale.reason) == (REFUSE, "stale")
    assert check_config(signed, **{**base, "applied_version": 9}).reason == "stale"
    again = check_config(signed, **{**base, "applied_version": 5, "applied_signature": signed.signature})
    assert again.action == UNCHANGED
    wave = cfg(6)
    wave.target_hosts.extend(["edge-2", "edge-3"])
    sign(wave, keys)
    assert check_config(wave, **base).action == IGNORE
    assert check_config(wave, **{**base, "host": "edge-3"}).action == ACCEPT
    assert check_config(wave, **{**base, "pop": "fra"}).reason == "wrong_pop"


@pytest.mark.parametrize(
    "prefix,why",
    [
        ("198.51.100.1/24", "bad prefix"),
        ("2001:db8:0:100:0::/56", "not canonical"),
        ("0.0.0.0/0", "default route"),
        ("198.51.100.7/32", "host route"),
        ("nonsense", "bad prefix"),
    ],
)
def test_parse_wanted_rejects_bad_prefixes(prefix: str, why: str) -> None:
    with pytest.raises(InvalidConfig, match=why):
        parse_wanted(cfg(1, "lax", (prefix, "bbr")), ["bbr", "cubic"])


def test_parse_wanted_duplicates_algorithms_and_kill_switch() -> None:
    with pytest.raises(InvalidConfig, match="duplicate"):
        parse_wanted(cfg(1, "lax", ("198.51.100.0/24", "bbr"), ("198.51.100.0/24", "bbr")), None)
    with pytest.raises(InvalidConfig, match="not available"):
        parse_wanted(cfg(1, "lax", ("198.51.100.0/24", "bbr2")), ["bbr", "cubic"])
    two = cfg(1, "lax", ("198.51.100.0/24", "bbr"), ("2001:db8:100::/56", "cubic"))
    ok = parse_wanted(two, ["bbr", "cubic"])
    assert ok == {
        "198.51.100.0/24": Wanted("198.51.100.0/24", "bbr", False),
        "2001:db8:100::/56": Wanted("2001:db8:100::/56", "cubic", False),
    }
    kill = cfg(2, "lax", ("198.51.100.0/24", "bbr"))
    kill.kill_switch = True
    assert parse_wanted(kill, ["bbr"]) == {}
