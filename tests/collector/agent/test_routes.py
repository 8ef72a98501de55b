"""The edge agent against real kernel routing tables in namespaces this test creates.

Topology (documentation addresses only):

    client-a 198.51.100.10 / 2001:db8:100::10 --+
                                                 router 192.0.2.1 (+ .3) / 2001:db8:1::1 (+ ::3)
    client-b 203.0.113.10 / 2001:db8:200::10 ---+        |
                                                 edge 192.0.2.2 / 2001:db8:1::2
                                                 default routes `congctl cubic`
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from collector.agent.routes import RouteOp, RouteTable
from collector.agent.state import AgentState
from schemas.congestion_pb2 import ApplyStatus
from schemas.signing import generate_keypair, load_private_key, sign
from tests.support.agent_lab import POP, Lab, build_lab
from tests.support.netns_util import ns_sh

pytestmark = pytest.mark.netns


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with build_lab(tmp_path) as made:
        yield made


def two_hundred() -> list[str]:
    """198.51.100.0/24 + 2001:db8:100::/56 (client-a) + 198 more /56s; client-b's prefixes excluded."""
    base = int(ipaddress.IPv6Address("2001:db8:1000::"))
    extra = [str(ipaddress.IPv6Network((base + (i << 72), 56))) for i in range(198)]
    return ["198.51.100.0/24", "2001:db8:100::/56", *extra]


def address_in(prefix: str) -> str:
    return str(ipaddress.ip_network(prefix).network_address + 10)


def route_get(lab: Lab, addresses: list[str]) -> dict[str, tuple[str | None, str]]:
    from pyroute2 import IPRoute

    out: dict[str, tuple[str | None, str]] = {}
    with IPRoute(netns=lab.edge) as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        for addr in addresses:
            route = ipr.route("get", dst=addr)[0]
            out[addr] = (route.get_attr("RTA_GATEWAY"), names[route.get_attr("RTA_OIF")])
    return out


SERVER = textwrap.dedent("""
    import json, socket, sys
    fams = {"4": socket.AF_INET, "6": socket.AF_INET6}
    lst = socket.socket(fams[sys.argv[1]], socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((sys.argv[2], 8080)); lst.listen(8); lst.settimeout(20)
    print("ready", flush=True)
    for _ in range(int(sys.argv[3])):
        conn, peer = lst.accept()
        algo = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\\0")[0].decode()
        print(json.dumps([peer[0], algo]), flush=True)
        conn.close()
""")


def accepted_algorithms(lab: Lab, family: str, listen: str, clients: list[tuple[str, str]]) -> dict[str, str]:
    """A server on the edge accepts one connection per (client ns, client address)."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", lab.edge, sys.executable, "-c", SERVER, family, listen, str(len(clients))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for ns, _addr in clients:
            ns_sh(
                ns,
                sys.executable,
                "-c",
                f"import socket; socket.create_connection(({listen!r}, 8080), timeout=10).close()",
            )
        result = dict(json.loads(proc.stdout.readline()) for _ in clients)
    finally:
        proc.kill()
        proc.wait()
    return {addr: result[addr] for _ns, addr in clients}


def test_apply_200_prefixes_keeps_forwarding_and_sets_bbr(lab: Lab) -> None:
    prefixes = two_hundred()
    probes = [address_in(p) for p in prefixes]
    before = route_get(lab, probes)
    agent = lab.agent()
    status = agent.handle(lab.config(1, prefixes))
    assert status.result == ApplyStatus.APPLIED, status.errors
    assert (status.routes_added, status.applied_version, status.health.owned_routes) == (200, 1, 200)
    assert status.health.mem_available_bytes > 0 and "bbr" in status.health.available_congestion_controls

    owned = lab.owned_json()
    assert sorted(r["dst"] for r in owned) == sorted(prefixes)
    assert all(r["metrics"] == [{"congestion": "bbr"}] for r in owned)
    after = route_get(lab, probes)
    assert after == before  # same gateway and device for every prefix
    assert after[address_in("198.51.100.0/24")] == ("192.0.2.1", "up0")

    # new connections from a selected prefix get bbr, from another prefix the default (cubic)
    v4 = accepted_algorithms(lab, "4", "192.0.2.2", [(lab.client_a, "198.51.100.10"), (lab.client_b, "203.0.113.10")])
    assert v4 == {"198.51.100.10": "bbr", "203.0.113.10": "cubic"}
    v6 = accepted_algorithms(
        lab, "6", "2001:db8:1::2", [(lab.client_a, "2001:db8:100::10"), (lab.client_b, "2001:db8:200::10")]
    )
    assert v6 == {"2001:db8:100::10": "bbr", "2001:db8:200::10": "cubic"}

    # the same config again (e.g. re-read from Kafka): unchanged, nothing written
    again = agent.handle(lab.config(1, prefixes))
    assert again.result == ApplyStatus.UNCHANGED and again.routes_kept == 200 and again.routes_added == 0
    # state survives a restart of the agent
    assert AgentState(lab.state_dir, POP).load().version == 1


def test_foreign_route_is_left_alone_and_kill_switch_removes_only_owned(lab: Lab) -> None:
    lab.sh("ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.1", "proto", "static", "congctl", "reno")
    foreign_before = lab.sh("ip", "route", "show", "203.0.113.0/24")
    agent = lab.agent()
    status = agent.handle(lab.config(1, ["198.51.100.0/24", "203.0.113.0/24", "2001:db8:100::/56"]))
    assert status.result == ApplyStatus.APPLIED
    assert status.routes_added == 2
    assert any("203.0.113.0/24" in e and "conflict" in e for e in status.errors)
    assert lab.sh("ip", "route", "show", "203.0.113.0/24") == foreign_before
    assert sorted(r["dst"] for r in lab.owned_json()) == ["198.51.100.0/24", "2001:db8:100::/56"]

    kill = agent.handle(lab.config(2, [], kill=True))
    assert kill.result == ApplyStatus.APPLIED and kill.routes_removed == 2
    assert lab.owned_json() == []
    assert lab.sh("ip", "route", "show", "203.0.113.0/24") == foreign_before
    assert agent.metrics.registry.get_sample_value("dyncc_agent_owned_routes") == 0


def test_bad_configs_are_refused_and_change_nothing(lab: Lab) -> None:
    agent = lab.agent()
    assert agent.handle(lab.config(5, ["198.51.100.0/24", "2001:db8:100::/56"])).result == ApplyStatus.APPLIED
    before = lab.owned_text()
    assert "bbr" in before

    tampered = lab.config(6, ["198.51.100.0/24"])
    tampered.entries[0].algorithm = "cubic"
    wrong_key = lab.config(6, ["198.51.100.0/24"])
    other = Path(str(lab.private_key_path) + ".other")
    generate_keypair(other, Path(str(other) + ".pub"))
    sign(wrong_key, load_private_key(other))
    cases = {
        "unsigned": lab.config(6, ["198.51.100.0/24"], signed=False),
        "bad_signature": tampered,
        "wrong_pop": lab.config(6, ["198.51.100.0/24"], pop="fra"),
        "stale": lab.config(4, ["198.51.100.0/24"]),
        "invalid": lab.config(6, ["198.51.100.0/24", "0.0.0.0/0"]),
    }
    for reason, config in cases.items():
        status = agent.handle(config)
        assert status.result == ApplyStatus.REFUSED, reason
        assert status.applied_version == 5 and status.errors and status.errors[0].startswith("refused")
        assert lab.owned_text() == before, reason
        assert agent.metrics.registry.get_sample_value("dyncc_agent_configs_refused_total", {"reason": reason}) == 1
    status = agent.handle(wrong_key)
    assert status.result == ApplyStatus.REFUSED and "signature" in status.errors[0]
    # an equal version with different content is refused too
    assert agent.handle(lab.config(5, ["203.0.113.0/24"])).result == ApplyStatus.REFUSED
    assert lab.owned_text() == before and AgentState(lab.state_dir, POP).load().version == 5


def test_failure_mid_apply_restores_the_previous_owned_set(lab: Lab) -> None:
    first = two_hundred()[:120]
    agent = lab.agent()
    assert agent.handle(lab.config(1, first)).result == ApplyStatus.APPLIED
    lab.sh("ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.1", "proto", "static")
    before = lab.owned_text()
    # v2: drop 60, change the algorithm of 30, add 80 new -> 60 + 30 deletes, 30 + 80 adds
    second = two_hundred()[60:] + [str(ipaddress.IPv6Network(f"2001:db8:9:{i:x}00::/56")) for i in range(20)]
    config = lab.config(2, second)
    for entry in config.entries[:30]:
        entry.algorithm = "cubic"
    sign(config, load_private_key(lab.private_key_path))
    agent.table.fail_after = 100  # after the 90 deletes and 10 adds
    status = agent.handle(config)
    assert status.result == ApplyStatus.FAILED_ROLLED_BACK
    assert any("injected failure after 100" in e for e in status.errors)
    assert not any("rollback incomplete" in e for e in status.errors)
    assert lab.owned_text() == before
    assert status.applied_version == 1 and AgentState(lab.state_dir, POP).load().version == 1
    assert "203.0.113.0/24 via 192.0.2.1 dev up0 proto static" in lab.sh("ip", "route", "show")
    # the same config applies cleanly once the fault is gone
    ok = agent.handle(config)
    assert ok.result == ApplyStatus.APPLIED and ok.applied_version == 2
    owned = {r["dst"]: r["metrics"] for r in lab.owned_json()}
    assert len(owned) == 160 and owned[second[0]] == [{"congestion": "cubic"}]


def test_owned_routes_follow_the_covering_gateway_and_stale_ones_go(lab: Lab) -> None:
    agent = lab.agent()
    prefixes = ["198.51.100.0/24", "2001:db8:100::/56", "2001:db8:1000::/56"]
    assert agent.handle(lab.config(1, prefixes)).result == ApplyStatus.APPLIED
    lab.sh("ip", "route", "replace", "default", "via", "192.0.2.3", "dev", "up0", "congctl", "cubic")
    lab.sh("ip", "-6", "route", "replace", "default", "via", "2001:db8:1::3", "dev", "up0", "congctl", "cubic")
    # a stale owned route (e.g. left by a crashed earlier run) goes on reconcile
    lab.sh("ip", "route", "add", "192.0.2.128/25", "dev", "up0", "proto", "250", "congctl", "bbr")
    status = agent.reconcile("test")
    assert status.result == ApplyStatus.APPLIED, status.errors
    gateways = {r["dst"]: r.get("gateway") for r in lab.owned_json()}
    assert gateways == {
        "198.51.100.0/24": "192.0.2.3",
        "2001:db8:100::/56": "2001:db8:1::3",
        "2001:db8:1000::/56": "2001:db8:1::3",
    }
    assert route_get(lab, ["198.51.100.10"])["198.51.100.10"] == ("192.0.2.3", "up0")
    # covering route gone -> the owned routes under it go (never a route to nowhere)
    lab.sh("ip", "-6", "route", "del", "default")
    agent.reconcile("test")
    assert [r["dst"] for r in lab.owned_json()] == ["198.51.100.0/24"]


def test_route_event_watcher_sees_covering_changes_but_not_our_writes(lab: Lab) -> None:
    from collector.agent.events import RouteEventWatcher

    watcher = RouteEventWatcher(lab.edge, 250).start()
    try:
        agent = lab.agent()
        assert agent.handle(lab.config(1, ["198.51.100.0/24"])).result == ApplyStatus.APPLIED
        time.sleep(0.3)
        assert not watcher.changed.is_set()
        lab.sh("ip", "route", "replace", "default", "via", "192.0.2.3", "dev", "up0")
        assert watcher.changed.wait(5)
    finally:
        watcher.stop()


def test_health_counts_sockets_in_the_target_namespace(lab: Lab) -> None:
    from collector.agent.health import read_health

    assert read_health(lab.edge, 0).tcp_sockets == 0
    proc = subprocess.Popen(
        ["ip", "netns", "exec", lab.edge, sys.executable, "-c", SERVER, "6", "::", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert read_health(lab.edge, 3).tcp_sockets == 1
    finally:
        proc.kill()
        proc.wait()


def test_locked_algorithm_is_installed_locked(lab: Lab) -> None:
    config = lab.config(1, ["198.51.100.0/24"])
    config.entries[0].lock = True
    sign(config, load_private_key(lab.private_key_path))
    assert lab.agent().handle(config).result == ApplyStatus.APPLIED
    assert "congctl lock bbr" in lab.sh("ip", "route", "show", "proto", "250")


class AlgorithmDroppingTable(RouteTable):
    """Writes routes without RTAX_CC_ALGO, like an old pyroute2 silently dropping the metric."""

    def _encode(self, seq: int, op: RouteOp) -> bytes:
        return super()._encode(seq, RouteOp(op.kind, replace(op.route, algorithm="")))


def test_a_route_read_back_without_its_algorithm_fails_the_apply(lab: Lab) -> None:
    status = lab.agent(AlgorithmDroppingTable).handle(lab.config(1, ["198.51.100.0/24", "2001:db8:100::/56"]))
    assert status.result == ApplyStatus.FAILED_ROLLED_BACK
    assert any("RTAX_CC_ALGO" in e for e in status.errors)
    assert lab.owned_json() == [] and status.applied_version == 0


def test_a_wave_for_other_hosts_is_ignored_and_the_version_does_not_move(lab: Lab) -> None:
    agent = lab.agent()
    assert agent.handle(lab.config(1, ["198.51.100.0/24"])).result == ApplyStatus.APPLIED
    before = lab.owned_text()
    canary = lab.config(2, ["2001:db8:100::/56"])
    canary.target_hosts.append("edge-canary")
    sign(canary, load_private_key(lab.private_key_path))
    status = agent.handle(canary)
    assert (status.result, status.version, status.applied_version) == (ApplyStatus.UNCHANGED, 1, 1)
    assert lab.owned_text() == before
    # the promotion (every host) with a newer version applies
    assert agent.handle(lab.config(3, ["2001:db8:100::/56"])).result == ApplyStatus.APPLIED
    assert [r["dst"] for r in lab.owned_json()] == ["2001:db8:100::/56"]
    # a wave naming this host applies on it
    mine = lab.config(4, ["198.51.100.0/24"])
    mine.target_hosts.extend(["edge-1", "edge-9"])
    sign(mine, load_private_key(lab.private_key_path))
    assert agent.handle(mine).result == ApplyStatus.APPLIED and agent.state.version == 4
