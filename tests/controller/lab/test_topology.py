"""Pure parts of the lab: topology description and commands, threshold choice, table, recording."""

from __future__ import annotations

import ipaddress
from collections import Counter

import pytest

from controller.lab import table as lab_table
from controller.lab import topology as lab_topology
from controller.lab.loop import threshold_for
from controller.lab.telemetry import NewSockets, Recorder, read_recording, shift_batch
from tests.support.recording import make_batch

DOC_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")]


def _in_doc(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    return any(ip.version == n.version and ip in n for n in DOC_NETS)


def test_describe_layout_and_addresses():
    topo = lab_topology.describe("ab12", slow=2, alternating=2, fine=4)
    assert [c.profile for c in topo.clients] == ["slow"] * 2 + ["alternating"] * 2 + ["fine"] * 4
    assert all(ns.startswith("dlab-ab12-") for ns in topo.namespaces)
    assert len(set(topo.namespaces)) == 10
    prefixes = [ipaddress.ip_network(c.prefix) for c in topo.clients]
    assert len(set(prefixes)) == 8
    v4 = [p for p in prefixes if p.version == 4]
    assert sorted(map(str, v4)) == ["198.51.100.0/24", "203.0.113.0/24"]
    for c, net in zip(topo.clients, prefixes, strict=True):
        assert net.prefixlen == (24 if net.version == 4 else 56)
        assert str(net) == c.prefix  # canonical
        assert ipaddress.ip_address(c.addr) in net and ipaddress.ip_address(c.gateway) in net
        assert _in_doc(c.addr) and _in_doc(c.gateway)
    # one slow and one fine prefix are IPv4, so both families are covered on both sides
    assert {c.family for c in topo.by_profile("slow")} == {4, 6}
    assert {c.family for c in topo.by_profile("fine")} == {4, 6}
    # the two alternating clients are in opposite phases: the shaped count is constant
    assert sorted(c.phase for c in topo.by_profile("alternating")) == [0, 1]
    for r in range(4):
        assert sum(c.slow_in_round(r) for c in topo.clients) == 3


@pytest.mark.parametrize(
    "bad",
    [
        dict(run_id=""),
        dict(run_id="has-dash"),
        dict(run_id="x" * 9),
        dict(slow=0, alternating=0, fine=0),
        dict(slow=-1),
        dict(port=0),
    ],
)
def test_describe_rejects(bad):
    kwargs = {"run_id": "r1", **bad}
    with pytest.raises(lab_topology.TopologyError):
        lab_topology.describe(**kwargs)


def test_build_commands_only_lab_namespaces_and_doc_addresses():
    topo = lab_topology.describe("r1", slow=1, alternating=1, fine=1)
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
    # covering routes on the edge carry cubic, so that the agent's bbr routes are the exception
    cover = [c for c in cmds if c[2] == topo.edge_ns and "route" in c and "congctl" in c]
    assert len(cover) == 2 and all(c[c.index("congctl") + 1] == "cubic" for c in cover)
    # veths are created inside the namespaces, never left in the caller's
    assert all(c[:2] == ["ip", "-n"] for c in cmds if "veth" in c)
    assert ["ip", "netns", "add", topo.edge_ns] in cmds


def test_shaping_commands_follow_rounds():
    topo = lab_topology.describe("r1", slow=1, alternating=2, fine=1)
    for r in range(3):
        cmds = lab_topology.shaping_commands(topo, r)
        by_if = {c[c.index("dev") + 1]: c for c in cmds}
        assert set(by_if) == {c.router_if for c in topo.clients if c.profile != "fine"}
        for c in topo.clients:
            if c.profile == "fine":
                continue
            assert ("tbf" in by_if[c.router_if]) == c.slow_in_round(r)
            assert by_if[c.router_if][2] == topo.router_ns
    assert "netem" not in str([lab_topology.shaping_commands(topo, r) for r in range(2)])


def test_threshold_selects_exactly_the_shaped_count():
    for slow, alt, fine in [(2, 2, 4), (1, 0, 5), (3, 2, 6), (2, 0, 2)]:
        topo = lab_topology.describe("q", slow=slow, alternating=alt, fine=fine)
        n = len(topo.clients)
        q = threshold_for(topo)
        shaped = sum(c.slow_in_round(0) for c in topo.clients)
        # quantileExact(q) = sorted[floor(q * n)]; strictly-below count == shaped
        assert int(q * n) == shaped


def _rows():
    return [
        lab_table.PrefixRow("198.51.100.0/24", "slow", 4, 1.0, 0.0, "select", "bbr", {"bbr": 5, "cubic": 1}),
        lab_table.PrefixRow("2001:db8:0:200::/56", "alt (fast)", 4, 0.5, 1.0, "skip", "", {"cubic": 4}),
        lab_table.PrefixRow("203.0.113.0/24", "fine", None, None, None, "", "", {}),
    ]


def test_table_render_and_shares():
    rows = _rows()
    header = lab_table.RoundHeader(
        3, 61.2, 20, 1, 3, 1, lab_table.bbr_share(rows, True), lab_table.bbr_share(rows, False)
    )
    text = lab_table.render(header, rows)
    lines = text.splitlines()
    assert lines[0].startswith("round 3  t=+61s  bucket 20s  selected 1/3  routes 1")
    assert "routed 83%" in lines[0] and "others 0%" in lines[0]
    assert lines[1].split()[:3] == ["prefix", "shaping", "buckets"]
    assert len(lines) == 2 + len(rows)
    slow = lines[2].split()
    assert slow[:7] == ["198.51.100.0/24", "slow", "4", "1.00", "0.00", "select", "bbr"]
    assert lines[2].endswith("bbr 5 cubic 1")
    assert lines[4].split()[1:7] == ["fine", "-", "-", "-", "-", "-"]
    # share over nothing is unknown, not 0
    assert lab_table.bbr_share([rows[2]], True) is None
    assert "n/a" in lab_table.render(lab_table.RoundHeader(1, 0, 20, 0, 1, 0, None, None), [rows[2]])


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
