"""Lab path emulation: the pure command builders, then each mechanism on real namespaces.

Namespace tests build edge <-> router <-> client (hpa-tp-*), documentation addresses only:
htb + u32 put an IPv4 /24 and two IPv6 /56 destinations into their own classes; the BPF
filter drops about its fraction; the relay adds its delay to ICMP echo (IPv4 and IPv6) while a
zero-delay prefix stays under 2 ms; the teardown commands remove what the builders added.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import os
import re
import shutil
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dyncc.lab import bpf_build, paths
from dyncc.lab.delay import TUN_PATH, DelayRelay, Uplink
from dyncc.lab.paths import PathClass, PathError, PathSpec
from tests.support.lab_util import delay_teardown_commands, shaping_teardown_commands
from tests.support.netns_util import namespaces, new_ns_name, require_root, sh, veth_pair

DOC_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")]
SLOW = PathSpec(rate_bps=2_000_000, delay_ms=30, loss=0.01)
FAST = PathSpec(rate_bps=50_000_000, delay_ms=20, queue="bfifo", limit=200_000)


# ------------------------------------------------------------------ pure


def test_spec_validation():
    for bad in (
        dict(rate_bps=1000),
        dict(rate_bps=10**6, delay_ms=-1),
        dict(rate_bps=10**6, loss=0.6),
        dict(rate_bps=10**6, queue="fq"),
        dict(rate_bps=10**6, limit=0),
        dict(rate_bps=10**6, uplink_busy_ms=-1),
        dict(rate_bps=10**6, uplink_busy_ms=100, uplink_quiet_s=0),
    ):
        with pytest.raises(PathError):
            PathSpec(**bad)


def test_default_classes():
    assert set(paths.CLASSES) == {"lossy", "deep", "alternating", "fine", "lowrtt"}
    for c in paths.CLASSES.values():
        for spec in c.specs:
            assert (spec.delay_ms >= 20) == (c.name != "lowrtt")  # every class but lowrtt has >= 20 ms RTT
    assert paths.CLASSES["lossy"].spec().loss > 0
    deep = paths.CLASSES["deep"]
    # a bloated access link per prefix: a deep FIFO of its own and a busy uplink (not one FIFO for the class)
    assert not deep.shared and deep.spec().queue == "bfifo" and deep.spec().limit * 8 / deep.spec().rate_bps >= 0.5
    assert deep.spec().uplink() is not None and deep.spec().delayed
    assert all(c.spec().uplink() is None for name, c in paths.CLASSES.items() if name != "deep")
    fine, lowrtt = paths.CLASSES["fine"].spec(), paths.CLASSES["lowrtt"].spec()
    assert fine.rate_bps >= 30_000_000 and lowrtt.rate_bps <= 5_000_000 and lowrtt.delay_ms == 0
    alt = paths.CLASSES["alternating"]
    assert alt.alternating and alt.spec(0, 0) == paths.ALTERNATING_SLOW and alt.spec(1, 0) == paths.ALTERNATING_FAST
    assert alt.spec(0, 1) == paths.ALTERNATING_FAST and alt.spec(3, 1) == paths.ALTERNATING_SLOW
    assert paths.path_class("fine") is paths.CLASSES["fine"]
    with pytest.raises(PathError):
        paths.path_class("nope")


def test_class_rules():
    with pytest.raises(PathError, match="share the delay"):
        PathClass("x", (SLOW, FAST))  # different delays, and SLOW is lossy
    with pytest.raises(PathError):
        PathClass("x", ())
    ok = PathClass("x", (PathSpec(2_000_000, 20), PathSpec(40_000_000, 20)))
    with pytest.raises(PathError, match="cannot be shared"):
        PathClass("x", ok.specs, shared=True)
    assert ok.entries(["2001:db8:1::/56", "2001:db8:2::/56"], round_no=4, phases=[0, 1]) == [
        ("2001:db8:1::/56", ok.specs[0]),
        ("2001:db8:2::/56", ok.specs[1]),
    ]
    shared = PathClass("d", (FAST,), shared=True)
    assert shared.entries(["198.51.100.0/24", "2001:db8:1::/56"]) == [(("198.51.100.0/24", "2001:db8:1::/56"), FAST)]
    assert shared.entries([]) == []
    with pytest.raises(PathError):
        ok.entries(["2001:db8:1::/56"], phases=[0, 1])


def _all_words_documentation(cmds: list[list[str]]) -> None:
    for cmd in cmds:
        for word in cmd:
            try:
                net = ipaddress.ip_network(word, strict=False)
            except ValueError:
                continue
            if net.prefixlen == 0 or word.isdigit():
                continue
            assert any(net.version == d.version and net.subnet_of(d) for d in DOC_NETS), cmd  # type: ignore[arg-type]


def test_shaping_commands():
    entries: list[paths.Entry] = [
        ("198.51.100.0/24", SLOW),
        ("2001:db8:101:100::/56", FAST),
        (("2001:db8:101:200::/56", "2001:db8:101:300::/56"), SLOW),
    ]
    cmds = paths.shaping_commands("hpa-r", "p0lossy", entries)
    assert all(c[:3] == ["tc", "-n", "hpa-r"] for c in cmds)
    _all_words_documentation(cmds)
    assert cmds[0][3:] == ["qdisc", "replace", "dev", "p0lossy", "root", "handle", "1:", "htb", "default", "1"]
    classes = [c for c in cmds if c[3] == "class" and c[4] == "add"]
    assert [c[c.index("classid") + 1] for c in classes] == ["1:1", "1:100", "1:101", "1:102"]
    assert classes[1][classes[1].index("rate") + 1] == "2000000bit" == classes[1][classes[1].index("ceil") + 1]
    leaves = [c for c in cmds if c[3] == "qdisc" and "parent" in c]
    assert [c[c.index("parent") + 1 :] for c in leaves] == [
        ["1:1", "handle", "2:", "pfifo", "limit", "1000"],
        ["1:100", "pfifo", "limit", "100"],
        ["1:101", "bfifo", "limit", "200000"],
        ["1:102", "pfifo", "limit", "100"],
    ]
    assert leaves[2][-3:] == ["bfifo", "limit", "200000"]
    filters = [c for c in cmds if c[3] == "filter"]
    assert [c[c.index("flowid") + 1] for c in filters] == ["1:100", "1:101", "1:102", "1:102"]
    assert filters[0][filters[0].index("protocol") :][:7] == ["protocol", "ip", "prio", "1", "u32", "match", "ip"]
    assert "ip6" in filters[1] and filters[1][filters[1].index("ip6") + 2] == "2001:db8:101:100::/56"
    assert paths.delay_map(entries) == {
        "198.51.100.0/24": 30.0,
        "2001:db8:101:100::/56": 20.0,
        "2001:db8:101:200::/56": 30.0,
        "2001:db8:101:300::/56": 30.0,
    }
    assert paths.uplink_map(entries) == {}
    busy = PathSpec(rate_bps=4_000_000, delay_ms=30.0, uplink_busy_ms=400.0, uplink_quiet_s=3.0, uplink_busy_s=2.0)
    shared = (("2001:db8:101:200::/56", "2001:db8:101:300::/56"), busy)
    assert paths.uplink_map([*entries[:2], shared]) == {  # one uplink per prefix, even in a shared class
        "2001:db8:101:200::/56": Uplink(400.0, 3.0, 2.0),
        "2001:db8:101:300::/56": Uplink(400.0, 3.0, 2.0),
    }
    assert PathSpec(rate_bps=10**6, uplink_busy_ms=100).delayed and not PathSpec(rate_bps=10**6).delayed
    with pytest.raises(PathError, match="twice"):
        paths.shaping_commands("n", "d", [("198.51.100.0/24", SLOW), ("198.51.100.0/24", FAST)])
    with pytest.raises(PathError, match="canonical"):
        paths.shaping_commands("n", "d", [("198.51.100.7/24", SLOW)])


def test_change_loss_delay_teardown_commands():
    change = paths.change_class_commands("hpa-r", "p0alt", 2, FAST)
    assert change[0][3:9] == ["class", "change", "dev", "p0alt", "parent", "1:"]
    assert change[0][change[0].index("classid") + 1] == "1:102"
    assert change[1][3:] == ["qdisc", "replace", "dev", "p0alt", "parent", "1:102", "bfifo", "limit", "200000"]
    loss = paths.loss_commands("hpa-r", "p0lossy", "/x/random_drop-1.o")
    assert loss[0][3:] == ["qdisc", "replace", "dev", "p0lossy", "clsact"]
    assert loss[1][loss[1].index("egress") :] == [
        "egress", "pref", "1", "handle", "1", "bpf", "da", "obj", "/x/random_drop-1.o", "sec", "tc",
    ]  # fmt: skip
    delay = paths.delay_commands("hpa-r", ["p0lossy", "p0deep"], tun="dly0", table=7, pref=70)
    assert delay[0] == ["ip", "-n", "hpa-r", "tuntap", "add", "dev", "dly0", "mode", "tun"]
    rules = [c for c in delay if "rule" in c]
    assert len(rules) == 4 and {c[3] for c in rules} == {"-4", "-6"}
    assert all(c[c.index("lookup") + 1] == "7" and c[c.index("pref") + 1] == "70" for c in rules)
    routes = [c for c in delay if "route" in c]
    assert len(routes) == 2 and all(c[-4:] == ["dev", "dly0", "table", "7"] for c in routes)
    down = delay_teardown_commands("hpa-r", ["p0lossy", "p0deep"], tun="dly0", table=7, pref=70)
    assert [c[4:5] for c in down[:4]] == [["rule"]] * 4 and down[-1][3:6] == ["tuntap", "del", "dev"]
    assert paths.sender_commands("hpa-e", "eth0") == [["ip", "-n", "hpa-e", "link", "set", "dev", "eth0",
                                                       "gso_max_segs", "1"]]  # fmt: skip
    assert [c[3:5] for c in shaping_teardown_commands("n", "d")] == [["qdisc", "del"]] * 2
    assert paths.classid(0) == "1:100" and paths.classid(0xFF) == "1:1ff"
    with pytest.raises(PathError):
        paths.classid(-1)
    with pytest.raises(PathError):
        paths.classid(paths.MAX_CLASSES)


def test_bpf_threshold_and_command(tmp_path):
    assert bpf_build.drop_threshold(0) == 0
    assert bpf_build.drop_threshold(0.5) == 2**31
    assert bpf_build.drop_threshold(0.01) == round(0.01 * 2**32)
    with pytest.raises(bpf_build.BpfBuildError):
        bpf_build.drop_threshold(0.51)
    cmd = bpf_build.clang_command(Path("a.c"), Path("a.o"), {"B": "2", "A": "1U"})
    assert cmd[:4] == ["clang", "-O2", "-target", "bpf"] and cmd.index("-DA=1U") < cmd.index("-DB=2")
    with pytest.raises(bpf_build.BpfBuildError, match="not found"):
        bpf_build.build_random_drop(0.1, tmp_path, clang="no-such-clang-hpa")
    assert "DROP_THRESHOLD" in bpf_build.source_text(bpf_build.RANDOM_DROP)


def test_bpf_build_cached(tmp_path):
    if not shutil.which("clang"):
        pytest.skip("needs clang")
    a = bpf_build.build_random_drop(0.1, tmp_path)
    mtime = a.stat().st_mtime_ns
    assert bpf_build.build_random_drop(0.1, tmp_path) == a and a.stat().st_mtime_ns == mtime
    b = bpf_build.build_random_drop(0.2, tmp_path)
    assert b != a and b.read_bytes() != a.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a.name, b.name])  # no temporary left


# ------------------------------------------------------------------ namespaces

EDGE_V4, EDGE_V6 = "192.0.2.1", "2001:db8:ff00::1"
CLIENT_V4 = "198.51.100.2"
V6_PREFIXES = ("2001:db8:101:100::/56", "2001:db8:101:200::/56")
V6_CLIENTS = ("2001:db8:101:100::2", "2001:db8:101:200::2")


@dataclass
class Lab:
    edge: str
    rtr: str
    cli: str


def _tools() -> None:
    require_root()
    missing = [t for t in ("ip", "tc") if not shutil.which(t)]
    if missing:
        pytest.skip(f"needs {' '.join(missing)}")


@contextlib.contextmanager
def three_namespaces() -> Iterator[Lab]:
    """edge (eth0) -- (edge) router (cli) -- (eth0) client; static neighbours, so no ND in the counts."""
    names = [new_ns_name("hpa-tpe"), new_ns_name("hpa-tpr"), new_ns_name("hpa-tpc")]
    with namespaces(names) as (e, r, c):
        veth_pair(e, "eth0", r, "edge")
        veth_pair(r, "cli", c, "eth0")
        sh("ip", "netns", "exec", r, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
        for ns, dev, addrs in (
            (e, "eth0", (f"{EDGE_V4}/24", f"{EDGE_V6}/64")),
            (r, "edge", ("192.0.2.2/24", "2001:db8:ff00::2/64")),
            (r, "cli", ("198.51.100.1/24", "2001:db8:ff01::1/64")),
            (c, "eth0", (f"{CLIENT_V4}/24", "2001:db8:ff01::2/64", *(f"{a}/128" for a in V6_CLIENTS))),
        ):
            for a in addrs:
                sh("ip", "-n", ns, "addr", "add", a, "dev", dev, *(["nodad"] if ":" in a else []))
        sh("ip", "-n", e, "route", "add", "default", "via", "192.0.2.2")
        sh("ip", "-n", e, "-6", "route", "add", "2001:db8::/32", "via", "2001:db8:ff00::2")
        sh("ip", "-n", c, "route", "add", "default", "via", "198.51.100.1")
        sh("ip", "-n", c, "-6", "route", "add", "default", "via", "2001:db8:ff01::1")
        for p in V6_PREFIXES:
            sh("ip", "-n", r, "-6", "route", "add", p, "via", "2001:db8:ff01::2", "dev", "cli")
        mac = {(ns, dev): _mac(ns, dev) for ns, dev in ((e, "eth0"), (r, "edge"), (r, "cli"), (c, "eth0"))}
        for ns, dev, addr, peer in (
            (r, "cli", CLIENT_V4, (c, "eth0")),
            (r, "cli", "2001:db8:ff01::2", (c, "eth0")),
            (r, "edge", EDGE_V4, (e, "eth0")),
            (r, "edge", EDGE_V6, (e, "eth0")),
            (e, "eth0", "192.0.2.2", (r, "edge")),
            (e, "eth0", "2001:db8:ff00::2", (r, "edge")),
            (c, "eth0", "198.51.100.1", (r, "cli")),
            (c, "eth0", "2001:db8:ff01::1", (r, "cli")),
        ):
            sh("ip", "-n", ns, "neigh", "replace", addr, "lladdr", mac[peer], "dev", dev, "nud", "permanent")
        yield Lab(e, r, c)
    for ns in names:
        assert not os.path.exists(f"/run/netns/{ns}")


def _mac(ns: str, dev: str) -> str:
    out = sh("ip", "-n", ns, "-o", "link", "show", "dev", dev)
    m = re.search(r"link/ether ([0-9a-f:]{17})", out)
    assert m, out
    return m.group(1)


def _py(ns: str, code: str, timeout: float = 60) -> str:
    return sh("ip", "netns", "exec", ns, sys.executable, "-c", code, timeout=timeout)


SEND_UDP = """
import socket, sys, time
for dst, n in {targets!r}:
    fam = socket.AF_INET6 if ':' in dst else socket.AF_INET
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        for i in range(n):
            s.sendto(b'p' * 100, (dst, 9))
            if i % 50 == 49:
                time.sleep(0.01)
"""


def _class_packets(ns: str, dev: str) -> dict[str, int]:
    out = sh("tc", "-n", ns, "-s", "class", "show", "dev", dev)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"class htb (\S+) .*?\n\s*Sent \d+ bytes (\d+) pkt", out)}


@pytest.mark.netns
def test_htb_u32_one_class_per_prefix():
    _tools()
    with three_namespaces() as lab:
        entries: list[paths.Entry] = [
            ("198.51.100.0/24", PathSpec(20_000_000)),
            (V6_PREFIXES[0], PathSpec(20_000_000, queue="bfifo", limit=100_000)),
            (V6_PREFIXES[1], PathSpec(20_000_000)),
        ]
        for cmd in paths.shaping_commands(lab.rtr, "cli", entries):
            sh(*cmd)
        _py(lab.edge, SEND_UDP.format(targets=[(CLIENT_V4, 30), (V6_CLIENTS[0], 50), (V6_CLIENTS[1], 70)]))
        counts = _class_packets(lab.rtr, "cli")
        assert (counts["1:100"], counts["1:101"], counts["1:102"]) == (30, 50, 70), counts
        # a class change takes effect in place (rate and leaf), counters stay with the class
        for cmd in paths.change_class_commands(lab.rtr, "cli", 1, PathSpec(3_000_000, limit=10)):
            sh(*cmd)
        show = sh("tc", "-n", lab.rtr, "class", "show", "dev", "cli", "classid", "1:101")
        assert "rate 3Mbit" in show, show
        assert "limit 10p" in sh("tc", "-n", lab.rtr, "qdisc", "show", "dev", "cli", "parent", "1:101")
        for cmd in shaping_teardown_commands(lab.rtr, "cli"):
            sh(*cmd, check=False)
        assert "htb" not in sh("tc", "-n", lab.rtr, "qdisc", "show", "dev", "cli")


@pytest.mark.netns
def test_bpf_drops_about_the_fraction(tmp_path):
    _tools()
    if not shutil.which("clang"):
        pytest.skip("needs clang")
    loss, n = 0.2, 3000
    obj = bpf_build.build_random_drop(loss, tmp_path)
    with three_namespaces() as lab:
        for cmd in paths.loss_commands(lab.rtr, "cli", str(obj)):
            sh(*cmd)
        _py(lab.edge, SEND_UDP.format(targets=[(CLIENT_V4, n // 2), (V6_CLIENTS[0], n // 2)]))
        out = sh("tc", "-n", lab.rtr, "-s", "qdisc", "show", "dev", "cli")
        m = re.search(r"qdisc clsact.*?Sent \d+ bytes (\d+) pkt \(dropped (\d+)", out, re.S)
        assert m, out
        seen, dropped = int(m.group(1)), int(m.group(2))
        assert seen >= n
        sd = math.sqrt(n * loss * (1 - loss))
        assert abs(dropped - n * loss) < 5 * sd, (dropped, n * loss)  # ~1e-6 to fail by chance
        for cmd in shaping_teardown_commands(lab.rtr, "cli"):
            sh(*cmd, check=False)
        assert "clsact" not in sh("tc", "-n", lab.rtr, "qdisc", "show", "dev", "cli")


PING = """
import json, os, socket, struct, time
def ping(dst, src, count):
    v6 = ':' in dst
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                      socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
    s.bind((src, 0))
    s.settimeout(2)
    ident, out = os.getpid() & 0xffff, []
    for seq in range(count):
        msg = struct.pack('!BBHHH', 128 if v6 else 8, 0, 0, ident, seq) + b'x' * 32
        if not v6:
            c = sum(struct.unpack('!%dH' % (len(msg) // 2), msg))
            c = (c >> 16) + (c & 0xffff)
            c += c >> 16
            msg = msg[:2] + struct.pack('!H', ~c & 0xffff) + msg[4:]
        t0 = time.monotonic()
        s.sendto(msg, (dst, 0))
        while True:
            try:
                data = s.recv(2048)
            except socket.timeout:
                out.append(None)
                break
            if not v6:
                data = data[(data[0] & 15) * 4:]
            t, _, _, i, sq = struct.unpack('!BBHHH', data[:8])
            if t == (129 if v6 else 0) and i == ident and sq == seq:
                out.append((time.monotonic() - t0) * 1000)
                break
        time.sleep(0.05)
    return out
print(json.dumps([ping(d, s, {count}) for d, s in {pairs!r}]))
"""


@contextlib.contextmanager
def relay_in(lab: Lab, delays: dict[str, float], log: Path, uplinks: dict[str, Uplink] | None = None) -> Iterator[None]:
    """The delay relay in the router of `lab` for `delays` (and `uplinks`); stopped and its policy
    routing removed on the way out, on failure too."""
    _tools()
    if not os.path.exists(TUN_PATH):
        pytest.skip(f"needs {TUN_PATH}")
    relay = DelayRelay()
    try:
        for cmd in paths.delay_commands(lab.rtr, ["cli"]):
            sh(*cmd)
        relay.start(lab.rtr, paths.DELAY_DEV, delays, uplinks=uplinks, log_path=log)
        yield
    finally:
        assert relay.stop() in (0, None)
        for cmd in delay_teardown_commands(lab.rtr, ["cli"]):
            sh(*cmd, check=False)


@pytest.mark.netns
def test_relay_delays_by_source_prefix(tmp_path):
    with three_namespaces() as lab:
        delays = {"198.51.100.0/24": 30.0, V6_PREFIXES[0]: 45.0, V6_PREFIXES[1]: 0.0}
        with relay_in(lab, delays, tmp_path / "relay.log"):
            pairs = [(EDGE_V4, CLIENT_V4), (EDGE_V6, V6_CLIENTS[0]), (EDGE_V6, V6_CLIENTS[1])]
            rtts = json.loads(_py(lab.cli, PING.format(count=15, pairs=pairs)))
            got = [statistics.median(x for x in r if x is not None) for r in rtts]
            assert all(len([x for x in r if x is not None]) >= 13 for r in rtts), rtts
            assert 30 <= got[0] < 36, got
            assert 45 <= got[1] < 51, got
            assert got[2] < 2, got
        assert paths.DELAY_DEV not in sh("ip", "-n", lab.rtr, "link", "show")
        for fam in ("-4", "-6"):
            assert "lookup 100" not in sh("ip", "-n", lab.rtr, fam, "rule", "show")
        # without the relay's policy routing the path is direct again
        rtts = json.loads(_py(lab.cli, PING.format(count=3, pairs=[(EDGE_V4, CLIENT_V4)])))
        assert max(rtts[0]) < 5, rtts
    log = (tmp_path / "relay.log").read_text()
    assert "stopped" in log and " 0 dropped" in log


@pytest.mark.netns
def test_relay_busy_uplink_adds_its_delay_in_busy_phases_only(tmp_path):
    """A prefix with a busy uplink sees its delay jump by the uplink's busy delay now and then; another
    prefix behind the same relay keeps its own delay."""
    with three_namespaces() as lab:
        delays = {V6_PREFIXES[0]: 20.0, V6_PREFIXES[1]: 20.0}
        uplinks = {V6_PREFIXES[0]: Uplink(busy_ms=200.0, quiet_s=0.5, busy_s=0.5)}
        with relay_in(lab, delays, tmp_path / "relay.log", uplinks):
            pairs = [(EDGE_V6, V6_CLIENTS[0]), (EDGE_V6, V6_CLIENTS[1])]
            busy, other = json.loads(_py(lab.cli, PING.format(count=50, pairs=pairs)))
    busy_rtts = [x for x in busy if x is not None]
    assert len(busy_rtts) >= 45 and min(busy_rtts) >= 20, busy
    quiet_phase = [x for x in busy_rtts if x < 60]
    busy_phase = [x for x in busy_rtts if 200 <= x < 260]
    assert len(quiet_phase) >= 5 and len(busy_phase) >= 5, busy  # both phases seen
    assert len(quiet_phase) + len(busy_phase) >= len(busy_rtts) - 3, busy  # little in between
    other_rtts = [x for x in other if x is not None]
    assert len(other_rtts) >= 45 and 20 <= statistics.median(other_rtts) < 26 and max(other_rtts) < 60, other
    assert "1 uplinks" in (tmp_path / "relay.log").read_text()
