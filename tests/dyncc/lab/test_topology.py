"""Pure parts of the lab: fleet topology and commands, threshold choice, ASN table, class table, recording."""

from __future__ import annotations

import ipaddress
from collections import Counter

import pytest

from dyncc.lab import table as lab_table
from dyncc.lab import topology as lab_topology
from dyncc.lab.loop import class_rows, threshold_for
from dyncc.lab.model import ControlOutcome, PrefixScore
from dyncc.lab.telemetry import NewSockets, Recorder, read_recording, shift_batch
from tests.support.recording import make_batch

DOC_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")]


def _in_doc(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    return any(ip.version == n.version and ip in n for n in DOC_NETS)


def test_describe_fleet_layout_and_addresses():
    topo = lab_topology.describe("ab12")
    assert topo.pops == ("lab-a", "lab-b")
    assert [e.host for e in topo.edges] == ["lab-a-e0", "lab-a-e1", "lab-b-e0", "lab-b-e1"]
    assert all(ns.startswith("dlab-ab12-") for ns in topo.namespaces)
    assert len(set(topo.namespaces)) == len(topo.namespaces) == 1 + 4 + 10
    # every router interface name fits IFNAMSIZ
    links = [e.link for e in topo.edges] + [c.link for c in topo.clients]
    assert all(len(link.router_if) <= 15 for link in links)
    for pop in topo.pops:
        mine = [p for p in topo.prefixes if p.pop == pop]
        assert len(mine) == 64
        assert Counter(p.klass for p in mine) == {"lossy": 10, "deep": 6, "alternating": 6, "lowrtt": 4, "fine": 38}
    prefixes = [ipaddress.ip_network(p.prefix) for p in topo.prefixes]
    assert len(set(prefixes)) == len(prefixes) == 128
    v4 = sorted(str(p) for p in prefixes if p.version == 4)
    assert v4 == ["198.51.100.0/24", "203.0.113.0/24"]
    assert {p.klass for p in topo.prefixes if p.family == 4} == {"lossy"}
    assert sum(p.family == 6 for p in topo.prefixes) == 126  # mostly IPv6 /56s
    for p, net in zip(topo.prefixes, prefixes, strict=True):
        assert net.prefixlen == (24 if net.version == 4 else 56)
        assert str(net) == p.prefix  # canonical
        assert ipaddress.ip_address(p.addr) in net and _in_doc(p.addr)
    for link in links:
        for addr in (link.router_v4, link.host_v4, link.router_v6, link.host_v6):
            assert _in_doc(addr)
    # the (POP, class) /48s do not overlap, and each client namespace holds one class of one POP
    nets = [lab_topology.class_network(i, k) for i in range(2) for k in lab_topology.CLASSES]
    assert len({str(n) for n in nets}) == len(nets)
    for c in topo.clients:
        assert {(p.pop, p.klass) for p in c.prefixes} == {(c.pop, c.klass)}
    # alternating prefixes are in opposite phases: the poor-path count is the same every round
    for pop in topo.pops:
        mine = [p for p in topo.prefixes if p.pop == pop]
        assert len({sum(p.slow_in_round(r) for p in mine) for r in range(4)}) == 1


@pytest.mark.parametrize(
    "bad",
    [
        dict(run_id=""),
        dict(run_id="has-dash"),
        dict(run_id="x" * 9),
        dict(layout=lab_topology.Layout(pops=3)),
        dict(layout=lab_topology.Layout(hosts_per_pop=0)),
        dict(layout=lab_topology.Layout(per_pop=20)),
        dict(layout=lab_topology.Layout(per_pop=0, lossy=0, deep=0, alternating=0, lowrtt=0)),
        dict(port=0),
    ],
)
def test_describe_rejects(bad):
    kwargs = {"run_id": "r1", **bad}
    with pytest.raises(lab_topology.TopologyError):
        lab_topology.describe(**kwargs)


def test_build_commands_only_lab_namespaces_and_doc_addresses():
    topo = lab_topology.describe("r1", lab_topology.Layout(per_pop=8, lossy=2, deep=1, alternating=2, lowrtt=1))
    cmds = lab_topology.build_commands(topo)
    for cmd in cmds:
        if cmd[:2] == ["ip", "-n"]:
            assert cmd[2] in topo.namespaces
        for word in cmd:
            head = word.split("/")[0]
            try:
                ipaddress.ip_address(head)
            except ValueError:
                continue
            assert _in_doc(head), cmd
    # covering routes on every edge carry cubic, so that the agent's bbr routes are the exception
    for e in topo.edges:
        cover = [c for c in cmds if c[2] == e.ns and "route" in c and "congctl" in c]
        assert len(cover) == 2 and all(c[c.index("congctl") + 1] == "cubic" for c in cover)
    # veths are created inside the namespaces, never left in the caller's
    assert all(c[:2] == ["ip", "-n"] for c in cmds if "veth" in c)
    # the router routes every client prefix (v4 /24s, v6 via the class /48) to its namespace
    routed = " ".join(" ".join(c) for c in cmds if c[2] == topo.router_ns and "route" in c)
    for p in topo.prefixes:
        if p.family == 4:
            assert p.prefix in routed
        else:
            assert str(ipaddress.ip_network(p.prefix).supernet(new_prefix=48)) in routed


def test_threshold_covers_the_poor_paths_of_a_round():
    for layout in (lab_topology.Layout(), lab_topology.Layout(per_pop=80, lossy=12, deep=8, alternating=8)):
        topo = lab_topology.describe("q", layout)
        mine = [p for p in topo.prefixes if p.pop == topo.pops[0]]
        n = len(mine)
        q = threshold_for(topo)
        poor = sum(p.slow_in_round(0) for p in mine)
        # quantileExact(q) = sorted[floor(q * n)]: the prefixes strictly below are the poor ones
        assert int(q * n) == poor


def test_asn_rows_use_documentation_asns():
    topo = lab_topology.describe("q")
    rows = lab_topology.asn_rows([(p.prefix, p.klass) for p in topo.prefixes])
    assert len(rows) == len(topo.prefixes)
    assert all(64496 <= asn <= 64511 for _p, asn, _n in rows)
    by_class = {p.klass: asn for p, (_x, asn, _n) in zip(topo.prefixes, rows, strict=True) if p.klass != "fine"}
    assert len(set(by_class.values())) == 4  # one ISP per poor class


def test_class_rows_and_table_render():
    topo = lab_topology.describe("t1", lab_topology.Layout(pops=1, per_pop=4, lossy=2, deep=1, alternating=0, lowrtt=0))
    lossy = [p.prefix for p in topo.by_class("lossy")]
    scores = {
        lossy[0]: PrefixScore("lab-a", 4, 1.0, 0.0, 30.0, "select"),
        lossy[1]: PrefixScore("lab-a", 4, 1.0, 0.0, 30.0, "holdout"),
    }
    routes = {"lab-a-e0": {lossy[0]: "bbr"}, "lab-a-e1": {}}
    new = {lossy[0]: Counter(bbr=3), lossy[1]: Counter(cubic=2)}
    rows = class_rows(topo, ControlOutcome(scores, routes), new)
    assert [(r.pop, r.klass, r.prefixes) for r in rows] == [
        ("lab-a", "lossy", 2),
        ("lab-a", "deep", 1),
        ("lab-a", "fine", 1),
    ]
    assert rows[0].decisions == Counter(select=1, holdout=1) and rows[0].routes == [1, 0]
    assert lab_table.bbr_count(rows[0].new_sockets) == (3, 5)
    text = lab_table.render(lab_table.RoundHeader(3, 61.2, 15, 1, 4, 1, "lab-a published v1"), rows)
    lines = text.splitlines()
    assert lines[0].startswith("round 3  t=+61s  bucket 15s  on bbr 1/4  holdout 1  (lab-a published v1)")
    assert lines[1].split()[:4] == ["pop", "class", "prefixes", "scored"]
    # columns: select, trial, keep, holdout, revert, skip
    assert lines[2].split() == ["lab-a", "lossy", "2", "2", "1", "0", "0", "1", "0", "0", "1", "0", "3/5", "(60%)"]
    assert lines[4].endswith("-")


def test_new_sockets_counts_first_sightings_only():
    ns = NewSockets()
    ns.observe([make_batch([1, 2], ["198.51.100.0/24", "2001:db8:0:100::/56"], ["cubic", "cubic"])])
    assert ns.take() == {}  # baseline: sockets open at start are not new
    ns.observe([make_batch([1, 3, 4], ["198.51.100.0/24"] * 3, ["cubic", "bbr", "bbr"])])
    ns.observe([make_batch([3, 5], ["198.51.100.0/24", "2001:db8:0:100::/56"], ["bbr", "cubic"])])
    got = ns.take()
    assert got == {"198.51.100.0/24": Counter(bbr=2), "2001:db8:0:100::/56": Counter(cubic=1)}
    assert ns.take() == {}
    ns.observe([b"\x08\x09garbage"])
    assert ns.malformed == 1


def test_recording_roundtrip_and_shift(tmp_path):
    from schemas.tcpinfo_decode import decode_batch

    path = tmp_path / "rec.bin.gz"
    rec = Recorder(path)
    batches = [make_batch([i], ["198.51.100.0/24"], ["cubic"], start_ns=10**18 + i) for i in range(3)]
    rec.write(batches)
    rec.close({"round_seconds": 20})
    records, meta = read_recording(path)
    assert records == batches
    assert meta == {"round_seconds": 20, "records": 3}
    moved = decode_batch(shift_batch(records[1], 5_000))
    orig = decode_batch(records[1])
    assert moved.poll_start_ns == orig.poll_start_ns + 5_000
    assert moved.poll_end_ns == orig.poll_end_ns + 5_000
    assert (moved.columns["cookie"] == orig.columns["cookie"]).all()
