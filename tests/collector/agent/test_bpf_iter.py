"""Open connections follow the config (issue 25): the TCP iterator on real, rate-limited transfers.

Topology (documentation addresses only; namespaces dit-srv-*, dit-cli-*, cgroup and pins dit-*):

    client 198.51.100.10, 203.0.113.10, 2001:db8:100::10, 2001:db8:200::10 (on lo)
      192.0.2.1 / 2001:db8:1::1  --veth--  edge 192.0.2.2 / 2001:db8:1::2, tbf 40 Mbit/s towards the client
                                           default routes `congctl cubic`

The edge's server (tests/support/bpf_iter_util.py) runs in the test's cgroup; port 8080 is
dual-stack (IPv4 clients are IPv4-mapped peers), 8081 IPv4 only.  Every assertion is on the
algorithm `ss -tin` shows for the edge's sockets, and every transfer must complete with its bytes.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.agent.bpf.apply import BpfApplier, netns_cookie
from collector.agent.bpf.build import build_object
from collector.agent.bpf.iter_plan import ITER_PROGRAM
from collector.agent.bpf.iterate import OpenConnections
from collector.agent.bpf.prog import BPFFS, BpfProgram, default_cgroup, mounts
from collector.agent.core import Agent
from collector.agent.routes import RouteTable
from collector.agent.state import AgentState
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig, PrefixEntry
from schemas.signing import generate_keypair, load_private_key, load_public_key, sign
from tests.support.bpf_iter_util import Conn, Fetch, ss_connections
from tests.support.netns_util import REPO, namespaces, new_ns_name, ns_sh, require_root, sh, veth_pair

pytestmark = pytest.mark.netns
POP = "lax"
SRV4, SRV6 = "192.0.2.2", "2001:db8:1::2"
A4, A6, B4, B6 = "198.51.100.10", "2001:db8:100::10", "203.0.113.10", "2001:db8:200::10"
SELECT_A = ["198.51.100.0/24", "2001:db8:100::/56"]
SELECT_B = ["203.0.113.0/24", "2001:db8:200::/56"]
KB = 1024


@dataclass
class Lab:
    edge: str
    client: str
    cgroup: Path
    keys: tuple[Path, Path]
    build_dir: Path

    def config(self, version: int, prefixes: list[str], *, threshold: int = 0, kill: bool = False) -> CongestionConfig:
        config = CongestionConfig(schema_version=1, pop=POP, version=version, kill_switch=kill)
        config.switch_threshold_bytes = threshold
        config.entries.extend(PrefixEntry(prefix=p, algorithm="bbr", reason="test") for p in prefixes)
        return sign(config, load_private_key(self.keys[0]))

    def fetch(self, transfers: list[tuple[str, int, int]]) -> Fetch:
        """Start (client address, server port, bytes) transfers; they stay open once complete."""
        return Fetch(self.client, [(src, SRV6 if ":" in src else SRV4, port, size) for src, port, size in transfers])

    def iterator(self, mode: str) -> OpenConnections:
        return OpenConnections(mode, self.edge, build_object(self.build_dir, program=ITER_PROGRAM))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_root()
    root = default_cgroup()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    tmp = tmp_path_factory.mktemp("dit")
    generate_keypair(tmp / "signing.key", tmp / "signing.pub")
    cgroup = root / f"dit-{uuid.uuid4().hex[:8]}"
    server = None
    bpffs_before = BPFFS in mounts("bpf")
    try:
        with namespaces([new_ns_name("dit-srv"), new_ns_name("dit-cli")]) as (edge, client):
            veth_pair(edge, "eth0", client, "eth0")
            for ns, v4, v6 in ((edge, SRV4, SRV6), (client, "192.0.2.1", "2001:db8:1::1")):
                ns_sh(ns, "ip", "addr", "add", f"{v4}/24", "dev", "eth0")
                ns_sh(ns, "ip", "-6", "addr", "add", f"{v6}/64", "dev", "eth0", "nodad")
            for addr in (A4, B4):
                ns_sh(client, "ip", "addr", "add", f"{addr}/32", "dev", "lo")
            for addr in (A6, B6):
                ns_sh(client, "ip", "-6", "addr", "add", f"{addr}/128", "dev", "lo", "nodad")
            ns_sh(edge, "ip", "route", "add", "default", "via", "192.0.2.1", "congctl", "cubic")
            ns_sh(edge, "ip", "-6", "route", "add", "default", "via", "2001:db8:1::1", "congctl", "cubic")
            ns_sh(edge, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "40mbit", "burst", "64kb",
                  "latency", "1s")  # fmt: skip
            cgroup.mkdir()
            server = subprocess.Popen(
                ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec ip netns exec "$0" "$@"', edge,
                 sys.executable, "-m", "tests.support.bpf_iter_util", "serve"],
                cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            yield Lab(edge, client, cgroup, (tmp / "signing.key", tmp / "signing.pub"), tmp / "bpf")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(10)
        if cgroup.exists():
            cgroup.rmdir()
        if not bpffs_before and BPFFS in mounts("bpf") and not list(BPFFS.glob("dyncc*")):
            sh("umount", str(BPFFS), check=False)


@pytest.fixture
def program(lab: Lab) -> Iterator[BpfProgram]:
    pin_dir = BPFFS / f"dit-{uuid.uuid4().hex[:8]}"
    program = BpfProgram(pin_dir, lab.cgroup, build_object(lab.build_dir))
    try:
        yield program
    finally:
        program.remove()


def bpf_agent(lab: Lab, program: BpfProgram, state_dir: Path) -> Agent:
    return Agent(
        pop=POP,
        host="edge-1",
        netns=lab.edge,
        public_key=load_public_key(lab.keys[1]),
        state=AgentState(state_dir, POP).load(),
        applier=BpfApplier(program, netns_cookie=netns_cookie(lab.edge)),
        open_connections=lab.iterator("bpf"),
    )


def route_agent(lab: Lab, state_dir: Path, open_connections: OpenConnections | str | None = "build") -> Agent:
    return Agent(
        pop=POP,
        host="edge-1",
        netns=lab.edge,
        public_key=load_public_key(lab.keys[1]),
        state=AgentState(state_dir, POP).load(),
        table=RouteTable(lab.edge),
        open_connections=open_connections,  # type: ignore[arg-type]
    )


def algorithms(lab: Lab, fetch: Fetch) -> list[str]:
    """The algorithm of each of `fetch`'s connections on the edge, in order ("gone" if not found)."""
    seen = ss_connections(lab.edge)
    return [seen.get(peer, Conn("gone", 0)).cc for peer in fetch.peers()]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `check` until true; the seconds it took (fails after `timeout`)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout:g}s"
        time.sleep(0.02)
    return time.monotonic() - started


def switched(agent: Agent, result: str = "switched") -> float:
    value = agent.metrics.registry.get_sample_value("dyncc_agent_open_connections_total", {"result": result})
    return value or 0.0


# ------------------------------------------------------------------------ tests


def test_kill_switch_puts_fifty_open_bbr_transfers_on_cubic_within_a_second(
    lab: Lab, program: BpfProgram, tmp_path: Path
) -> None:
    agent = bpf_agent(lab, program, tmp_path / "state")
    assert agent.handle(lab.config(1, SELECT_A, threshold=1)).result == ApplyStatus.APPLIED
    size = 400 * KB  # 50 x 400 KB at 40 Mbit/s: about 4 s
    transfers = [(A4, 8080 if i % 2 else 8081, size) for i in range(25)] + [(A6, 8080, size) for _ in range(25)]
    fetch = lab.fetch(transfers)
    try:
        wait_for(lambda: algorithms(lab, fetch) == ["bbr"] * 50, 3, "all 50 on bbr")
        started = time.monotonic()
        status = agent.handle(lab.config(2, [], kill=True))
        wait_for(lambda: algorithms(lab, fetch) == ["cubic"] * 50, 1.0 - (time.monotonic() - started), "all on cubic")
        print(f"kill switch: 50 open transfers on cubic {time.monotonic() - started:.3f}s after it arrived")
        assert status.result == ApplyStatus.APPLIED and status.routes_removed == 2, status.errors
        assert not status.errors
        assert switched(agent) == 50 and switched(agent, "failed") == 0
        assert not program.pin_dir.exists()  # the kill switch still removes the sock_ops program
        running = [c for c in ss_connections(lab.edge).values() if c.bytes_acked < size]
        assert running, "the transfers ended before the kill switch: nothing was switched mid-transfer"
        assert fetch.results() == [size] * 50
        assert algorithms(lab, fetch) == ["cubic"] * 50
        assert set(collector_algorithms(lab.edge, fetch).values()) == {"cubic"}
    finally:
        fetch.close()


def test_revert_of_one_prefix_leaves_the_other_prefix_on_bbr(lab: Lab, program: BpfProgram, tmp_path: Path) -> None:
    agent = bpf_agent(lab, program, tmp_path / "state")
    assert agent.handle(lab.config(1, SELECT_A + SELECT_B, threshold=1)).result == ApplyStatus.APPLIED
    size = 1024 * KB
    fetch = lab.fetch([(A4, 8080, size), (A6, 8080, size), (B4, 8081, size), (B6, 8080, size)] * 2)
    try:
        wait_for(lambda: algorithms(lab, fetch) == ["bbr"] * 8, 3, "all 8 on bbr")
        status = agent.handle(lab.config(2, SELECT_B, threshold=1))
        assert status.result == ApplyStatus.APPLIED and status.routes_removed == 2, status.errors
        assert algorithms(lab, fetch) == ["cubic", "cubic", "bbr", "bbr"] * 2
        assert switched(agent) == 4
        assert fetch.results() == [size] * 8
        assert algorithms(lab, fetch) == ["cubic", "cubic", "bbr", "bbr"] * 2
    finally:
        fetch.close()


def test_selection_reaches_connections_opened_before_it_past_the_threshold_and_watches_the_others(
    lab: Lab, program: BpfProgram, tmp_path: Path
) -> None:
    agent = bpf_agent(lab, program, tmp_path / "state")
    assert agent.handle(lab.config(1, SELECT_B)).result == ApplyStatus.APPLIED
    large, small = 1536 * KB, 20 * KB  # the threshold is the default, 100 KB
    fetch = lab.fetch([(A4, 8080, large), (A6, 8080, large), (A4, 8081, small), (A6, 8080, small)] * 2)
    try:

        def ready() -> bool:
            seen = ss_connections(lab.edge)
            conns = [seen.get(peer, Conn("gone", 0)) for peer in fetch.peers()]
            return all(c.bytes_acked > 150 * KB for c in conns[0::4] + conns[1::4]) and all(
                c.bytes_acked == small for c in conns[2::4] + conns[3::4]
            )

        wait_for(ready, 3, "the large transfers past the threshold, the small ones done")
        assert algorithms(lab, fetch) == ["cubic"] * 8  # unselected: the covering routes' cubic
        status = agent.handle(lab.config(2, SELECT_A + SELECT_B))
        assert status.result == ApplyStatus.APPLIED and status.routes_added == 2, status.errors
        assert algorithms(lab, fetch) == ["bbr", "bbr", "cubic", "cubic"] * 2
        assert switched(agent) == 4
        assert fetch.results() == [large, large, small, small] * 2
        assert algorithms(lab, fetch) == ["bbr", "bbr", "cubic", "cubic"] * 2
        # the small ones were left watched: the sock_ops program switches them once they pass 100 KB
        more = 300 * KB
        fetch.more([2, 3, 6, 7], more)
        assert fetch.results() == [0, 0, more, more] * 2
        assert algorithms(lab, fetch) == ["bbr"] * 8
        assert switched(agent) == 4  # by the sock_ops program, not by another iterator run
    finally:
        fetch.close()


def test_route_mode_kill_switch_with_and_without_the_toolchain(lab: Lab, tmp_path: Path) -> None:
    state = tmp_path / "state"
    no_toolchain = OpenConnections("route", lab.edge, None, "no BPF toolchain (clang not found)")
    agent = route_agent(lab, state, no_toolchain)
    assert agent.handle(lab.config(1, SELECT_A)).result == ApplyStatus.APPLIED
    size = 1024 * KB
    fetch = lab.fetch([(A4, 8080, size), (A6, 8080, size), (B4, 8081, size)] * 2)
    try:
        assert algorithms(lab, fetch) == ["bbr", "bbr", "cubic"] * 2  # the routes' congctl
        status = agent.handle(lab.config(2, [], kill=True))
        assert status.result == ApplyStatus.APPLIED and status.routes_removed == 2
        assert [e for e in status.errors if "keep their algorithm until they close" in e], status.errors
        assert algorithms(lab, fetch) == ["bbr", "bbr", "cubic"] * 2
        assert (
            agent.metrics.registry.get_sample_value("dyncc_agent_open_connection_runs_total", {"result": "unavailable"})
            == 1
        )
        agent.close()

        agent = route_agent(lab, state)  # the default: the iterator built into STATE_DIR/bpf
        assert agent.open_connections is not None and agent.open_connections.available
        assert agent.handle(lab.config(3, SELECT_A)).result == ApplyStatus.APPLIED
        assert switched(agent) == 0  # the route mode leaves open connections alone on a selection
        status = agent.handle(lab.config(4, [], kill=True))
        assert status.result == ApplyStatus.APPLIED and not status.errors, status.errors
        assert algorithms(lab, fetch) == ["cubic"] * 6
        assert switched(agent) == 4
        assert ns_sh(lab.edge, "ip", "route", "show", "proto", "250") == ""
        assert fetch.results() == [size] * 6
    finally:
        fetch.close()
        agent.close()


def collector_algorithms(ns: str, fetch: Fetch) -> dict[tuple[str, int], str]:
    """One `dyncc collect --once` poll of the edge: (peer, peer port) -> cc for `fetch`'s connections."""
    import json

    out = sh(
        sys.executable, "-m", "dyncc.cli", "collect", "--once", "--sink", "stdout", "--netns", ns,
        "--port", "8080", "--port", "8081", timeout=60,
    )  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    found = {(row["dst"], int(row["dst_port"])): row["cc"] for row in rows}
    return {peer: found.get(peer, "gone") for peer in fetch.peers()}
