"""`--enforce bpf` against the kernel: a sock_ops program on a cgroup this test creates, real transfers.

Topology (documentation addresses only):

    client 198.51.100.10, 203.0.113.10, 2001:db8:100::10, 2001:db8:200::10 (on lo)
      192.0.2.1 / 2001:db8:1::1  --veth--  edge 192.0.2.2 / 2001:db8:1::2
                                           default routes `congctl cubic` (the lab's covering routes)

The edge's server runs inside the test's cgroup (/sys/fs/cgroup/unified/dyncc-test-*): port 8080
is dual-stack (IPv4 clients appear as IPv4-mapped peers), 8081 IPv4 only.  Each client connection
asks for N bytes and stays open until the test has looked at it with `ss -ti` and the collector.
The program's pins live in /sys/fs/bpf/dyncc-test-*.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.agent.bpf.apply import BpfApplier, netns_cookie
from collector.agent.bpf.build import build_object
from collector.agent.bpf.plan import MAP_V4, MAP_V6
from collector.agent.bpf.prog import BPFFS, BpfProgram, default_cgroup, mounts
from collector.agent.core import Agent
from collector.agent.plan import Wanted
from collector.agent.state import AgentState
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig, PrefixEntry
from schemas.signing import generate_keypair, load_private_key, load_public_key, sign
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, sh, veth_pair

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[3]
POP = "lax"
SIGNED_AT_NS = time.time_ns()  # the configs' created_at_ns: within the agent's --max-config-age
SMALL, LARGE = 50 * 1024, 1024 * 1024
A4, A6, B4, B6 = "198.51.100.10", "2001:db8:100::10", "203.0.113.10", "2001:db8:200::10"
SELECT_A = ["198.51.100.0/24", "2001:db8:100::/56"]
SELECT_B = ["203.0.113.0/24", "2001:db8:200::/56"]

SERVER = textwrap.dedent("""
    import socket, sys, threading
    def serve(conn):
        want = b""
        while not want.endswith(b"\\n"):
            chunk = conn.recv(64)
            if not chunk:
                return
            want += chunk
        conn.sendall(b"x" * int(want))
        while conn.recv(4096):  # until the client closes
            pass
        conn.close()
    def listen(family, port, v6only):
        lst = socket.socket(family, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            lst.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
        lst.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
        lst.listen(64)
        while True:
            conn, _ = lst.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=listen, args=(socket.AF_INET, 8081, 0), daemon=True).start()
    threading.Thread(target=listen, args=(socket.AF_INET6, 8080, 0), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()
""")

PY_SERVER = [sys.executable, "-c", SERVER]

CLIENT = textwrap.dedent("""
    import json, socket, sys
    conns, ports = [], []
    for spec in sys.argv[1:]:
        src, dst, port, size = spec.split(",")
        family = socket.AF_INET6 if ":" in dst else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind((src, 0))
        sock.connect((dst, int(port)))
        sock.sendall(size.encode() + b"\\n")
        got = 0
        while got < int(size):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            got += len(chunk)
        assert got == int(size), (spec, got)
        conns.append(sock)
        ports.append(sock.getsockname()[1])
    print(json.dumps(ports), flush=True)
    sys.stdin.read()
""")


@dataclass
class Edge:
    edge: str
    client: str
    cgroup: Path
    keys: tuple[Path, Path]


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    require_root()
    root = default_cgroup()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    tmp = tmp_path_factory.mktemp("bpf-keys")
    generate_keypair(tmp / "signing.key", tmp / "signing.pub")
    cgroup = root / f"dyncc-test-{uuid.uuid4().hex[:8]}"
    names = [new_ns_name("dbpf-e"), new_ns_name("dbpf-c")]
    server = None
    bpffs_before = BPFFS in mounts("bpf")  # the agent mounts bpffs when it is missing
    try:
        with namespaces(names) as (edge_ns, client_ns):
            veth_pair(edge_ns, "eth0", client_ns, "eth0")
            ns_sh(edge_ns, "ip", "addr", "add", "192.0.2.2/24", "dev", "eth0")
            ns_sh(edge_ns, "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "eth0", "nodad")
            ns_sh(client_ns, "ip", "addr", "add", "192.0.2.1/24", "dev", "eth0")
            ns_sh(client_ns, "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "eth0", "nodad")
            for addr in (A4, B4):
                ns_sh(client_ns, "ip", "addr", "add", f"{addr}/32", "dev", "lo")
            for addr in (A6, B6):
                ns_sh(client_ns, "ip", "-6", "addr", "add", f"{addr}/128", "dev", "lo", "nodad")
            ns_sh(edge_ns, "ip", "route", "add", "default", "via", "192.0.2.1", "congctl", "cubic")
            ns_sh(edge_ns, "ip", "-6", "route", "add", "default", "via", "2001:db8:1::1", "congctl", "cubic")
            cgroup.mkdir()
            # join the cgroup before `ip netns exec` (which remounts /sys): the listeners are created inside it
            server = subprocess.Popen(
                ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec ip netns exec "$0" "$@"', edge_ns, *PY_SERVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "ready"
            yield Edge(edge_ns, client_ns, cgroup, (tmp / "signing.key", tmp / "signing.pub"))
            server.kill()
            server.wait(10)
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(10)
        if cgroup.exists():
            cgroup.rmdir()
        if not bpffs_before and BPFFS in mounts("bpf") and not list(BPFFS.glob("dyncc*")):
            sh("umount", str(BPFFS), check=False)  # mounted by these tests and empty again


@dataclass
class Enforcer:
    edge: Edge
    program: BpfProgram
    state_dir: Path

    def agent(self, *, fail_after: int | None = None) -> Agent:
        """A fresh agent process's view: state from disk, program and maps from bpffs."""
        cookie = netns_cookie(self.edge.edge)
        return Agent(
            pop=POP,
            host="edge-1",
            netns=self.edge.edge,
            public_key=load_public_key(self.edge.keys[1]),
            state=AgentState(self.state_dir, POP).load(),
            applier=BpfApplier(self.program, netns_cookie=cookie, fail_after=fail_after),
        )

    def config(
        self, version: int, prefixes: list[str], *, threshold: int = 0, kill: bool = False, pop: str = POP
    ) -> CongestionConfig:
        config = CongestionConfig(
            schema_version=1, pop=pop, version=version, kill_switch=kill, created_at_ns=SIGNED_AT_NS
        )
        config.switch_threshold_bytes = threshold
        config.entries.extend(PrefixEntry(prefix=p, algorithm="bbr", reason="test") for p in prefixes)
        return sign(config, load_private_key(self.edge.keys[0]))


@pytest.fixture
def enforcer(edge: Edge, tmp_path: Path) -> Iterator[Enforcer]:
    pin_dir = Path("/sys/fs/bpf") / f"dyncc-test-{uuid.uuid4().hex[:8]}"
    program = BpfProgram(pin_dir, edge.cgroup, build_object(tmp_path / "bpf"))
    try:
        yield Enforcer(edge, program, tmp_path / "state")
    finally:
        program.remove()
        assert not pin_dir.exists()


# ------------------------------------------------------------------ observation


def transfer(edge: Edge, specs: list[tuple[str, int, int]]) -> dict[tuple[str, int], str]:
    """Run (client address, server port, bytes) transfers; (client address, client port) -> cc per `ss -ti`.

    Every connection is still open when `ss` and the collector look at it (after the last byte was acked).
    """
    args = []
    for src, port, size in specs:
        dst = "2001:db8:1::2" if ":" in src else "192.0.2.2"
        args.append(f"{src},{dst},{port},{size}")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", edge.client, sys.executable, "-c", CLIENT, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "client failed"
        ports = json.loads(line)
        by_ss = ss_algorithms(edge.edge)
        by_collector = collector_algorithms(edge.edge)
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(10)
    out = {}
    for (src, _port, _size), cport in zip(specs, ports, strict=True):
        key = (src, cport)
        assert by_ss[key] == by_collector[key], f"ss says {by_ss[key]}, the collector {by_collector[key]} for {key}"
        out[key] = by_ss[key]
    return out


_SS_HEAD = re.compile(r"^\d+\s+\d+\s+\S+:(8080|8081)\s+(\S+):(\d+)")


def ss_algorithms(ns: str) -> dict[tuple[str, int], str]:
    """`ss -Htin` on the edge: (peer address, peer port) -> congestion control (IPv4-mapped shown as IPv4)."""
    found: dict[tuple[str, int], str] = {}
    peer: tuple[str, int] | None = None
    for line in ns_sh(ns, "ss", "-Htin", "state", "established").splitlines():
        if not line[:1].isspace():
            m = _SS_HEAD.match(line)
            peer = (m.group(2).strip("[]").removeprefix("::ffff:"), int(m.group(3))) if m else None
        elif peer is not None:
            found[peer] = line.split()[0]
            peer = None
    return found


def collector_algorithms(ns: str) -> dict[tuple[str, int], str]:
    """One `dyncc collect --once --sink stdout` poll of the edge namespace: (peer, peer port) -> cc."""
    out = sh(
        sys.executable, "-m", "dyncc.cli", "collect", "--once", "--sink", "stdout", "--netns", ns,
        "--port", "8080", "--port", "8081", timeout=60,
    )  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {(row["dst"], int(row["dst_port"])): row["cc"] for row in rows}


def algorithms(result: dict[tuple[str, int], str]) -> list[str]:
    return list(result.values())


def map_prefixes(program: BpfProgram) -> dict[str, tuple[str, int]]:
    """The maps per `bpftool map dump` (an independent reader): prefix -> (algorithm, threshold)."""
    out: dict[str, tuple[str, int]] = {}
    for name in (MAP_V4, MAP_V6):
        path = program.map_path(name)
        if not path.exists():
            continue
        for entry in json.loads(sh("bpftool", "-j", "map", "dump", "pinned", str(path))):
            key, value = entry["formatted"]["key"], entry["formatted"]["value"]
            addr = bytes(key["addr"])
            text = ".".join(map(str, addr)) if len(addr) == 4 else str(_v6(addr))
            out[f"{text}/{key['prefixlen']}"] = (value["algorithm"], int(value["threshold"]))
    return out


def _v6(raw: bytes) -> str:
    import ipaddress

    return str(ipaddress.IPv6Address(raw))


def attached(program: BpfProgram) -> list[str]:
    data = json.loads(sh("bpftool", "-j", "cgroup", "show", str(program.cgroup)).strip() or "[]")
    return [p["name"] for p in data]


# ------------------------------------------------------------------------ tests


def test_selected_large_flows_switch_small_and_unselected_stay_cubic(enforcer: Enforcer) -> None:
    agent = enforcer.agent()
    status = agent.handle(enforcer.config(1, SELECT_A))
    assert status.result == ApplyStatus.APPLIED, status.errors
    assert status.routes_added == 2 and status.health.enforce == "bpf" and status.health.bpf_attached
    assert map_prefixes(enforcer.program) == {p: ("bbr", 102400) for p in SELECT_A}
    assert attached(enforcer.program) == ["dyncc_cc_switch"]

    specs = [
        (A4, 8080, SMALL), (A4, 8080, LARGE), (A4, 8081, SMALL), (A4, 8081, LARGE),  # v4-mapped, plain v4
        (A6, 8080, SMALL), (A6, 8080, LARGE),
        (B4, 8080, SMALL), (B4, 8080, LARGE), (B6, 8080, SMALL), (B6, 8080, LARGE),
    ]  # fmt: skip
    result = transfer(enforcer.edge, specs)
    want = ["bbr" if src in (A4, A6) and size == LARGE else "cubic" for src, _, size in specs]
    assert algorithms(result) == want
    counts = BpfApplier(enforcer.program).counters()
    assert counts["switched"] == 3 and counts["selected"] == 6 and counts["failed"] == 0


def test_config_change_restart_and_kill_switch(enforcer: Enforcer) -> None:
    agent = enforcer.agent()
    assert agent.handle(enforcer.config(1, SELECT_A)).result == ApplyStatus.APPLIED
    status = agent.handle(enforcer.config(2, SELECT_B, threshold=200 * 1024))
    assert status.result == ApplyStatus.APPLIED, status.errors
    assert (status.routes_added, status.routes_removed) == (2, 2)
    assert map_prefixes(enforcer.program) == {p: ("bbr", 200 * 1024) for p in SELECT_B}
    specs = [(A4, 8080, LARGE), (B4, 8080, LARGE), (B6, 8080, LARGE), (B4, 8080, 150 * 1024)]
    assert algorithms(transfer(enforcer.edge, specs)) == ["cubic", "bbr", "bbr", "cubic"]

    # a new agent (restart): the stored config reconciles to the same maps; enforcement never stopped
    agent.close()
    restarted = enforcer.agent()
    status = restarted.reconcile("start")
    assert status.result == ApplyStatus.UNCHANGED and status.routes_kept == 2, status.errors
    assert status.applied_version == 2 and status.health.bpf_attached
    assert algorithms(transfer(enforcer.edge, [(B4, 8080, LARGE)])) == ["bbr"]

    status = restarted.handle(enforcer.config(3, [], kill=True))
    assert status.result == ApplyStatus.APPLIED and status.routes_removed == 2, status.errors
    assert attached(enforcer.program) == [] and not enforcer.program.pin_dir.exists()
    assert status.health.owned_routes == 0 and not status.health.bpf_attached
    assert algorithms(transfer(enforcer.edge, [(B4, 8080, LARGE), (A6, 8080, LARGE)])) == ["cubic", "cubic"]
    # and after the kill switch a restart enforces nothing
    assert enforcer.agent().reconcile("start").result == ApplyStatus.UNCHANGED
    assert attached(enforcer.program) == []


def test_unsigned_tampered_and_foreign_configs_change_nothing(enforcer: Enforcer) -> None:
    agent = enforcer.agent()
    assert agent.handle(enforcer.config(1, SELECT_A)).result == ApplyStatus.APPLIED
    before = map_prefixes(enforcer.program)
    unsigned = enforcer.config(2, SELECT_B)
    unsigned.ClearField("signature")
    tampered = enforcer.config(2, SELECT_A)
    tampered.entries[0].prefix = "203.0.113.0/24"
    lowered = enforcer.config(2, SELECT_A, threshold=10 * 1024 * 1024)
    lowered.switch_threshold_bytes = 1  # the threshold is signed too
    for bad in (unsigned, tampered, lowered, enforcer.config(2, SELECT_B, pop="fra"), enforcer.config(1, SELECT_B)):
        status = agent.handle(bad)
        assert status.result == ApplyStatus.REFUSED, status.errors
        assert status.applied_version == 1
    assert map_prefixes(enforcer.program) == before
    specs = [(A4, 8080, LARGE), (B4, 8080, LARGE)]
    assert algorithms(transfer(enforcer.edge, specs)) == ["bbr", "cubic"]


def test_failed_map_write_restores_the_previous_maps(enforcer: Enforcer) -> None:
    assert enforcer.agent().handle(enforcer.config(1, SELECT_A)).result == ApplyStatus.APPLIED
    before = map_prefixes(enforcer.program)
    agent = enforcer.agent(fail_after=2)  # 2 deletes pass, the first update fails
    status = agent.handle(enforcer.config(2, SELECT_B))
    assert status.result == ApplyStatus.FAILED_ROLLED_BACK
    assert any("injected" in e for e in status.errors) and not any("rollback incomplete" in e for e in status.errors)
    assert map_prefixes(enforcer.program) == before
    assert agent.state.version == 1
    assert agent.handle(enforcer.config(2, SELECT_B)).result == ApplyStatus.APPLIED


def test_threshold_above_the_transfer_keeps_cubic(enforcer: Enforcer) -> None:
    status = enforcer.agent().handle(enforcer.config(1, SELECT_A, threshold=2 * 1024 * 1024))
    assert status.result == ApplyStatus.APPLIED, status.errors
    assert algorithms(transfer(enforcer.edge, [(A4, 8080, LARGE), (A6, 8080, LARGE)])) == ["cubic", "cubic"]


def test_cli_once_leaves_enforcement_running(enforcer: Enforcer, tmp_path: Path) -> None:
    """`dyncc agent --enforce bpf --from-file --once`: the process exits, the program keeps switching."""
    cfg = tmp_path / "v1.pb"
    cfg.write_bytes(enforcer.config(1, SELECT_A).SerializeToString())
    obj = build_object(tmp_path / "bpf")
    base = [
        sys.executable, "-m", "dyncc.cli", "agent", "--from-file", str(cfg), "--once", "--pop", POP,
        "--public-key", str(enforcer.edge.keys[1]), "--netns", enforcer.edge.edge, "--host", "edge-1",
        "--state-dir", str(enforcer.state_dir), "--enforce", "bpf", "--bpf-cgroup", str(enforcer.edge.cgroup),
        "--bpf-pin-dir", str(enforcer.program.pin_dir), "--bpf-object", str(obj),
    ]  # fmt: skip
    for expect in ("APPLIED", "UNCHANGED"):
        proc = subprocess.run(base, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        status = json.loads(proc.stdout)
        assert status["result"] == expect and status["health"]["enforce"] == "bpf", status
    assert algorithms(transfer(enforcer.edge, [(A4, 8080, LARGE), (A4, 8080, SMALL)])) == ["bbr", "cubic"]


def test_selected_connections_start_on_cubic_and_unselected_are_untouched(enforcer: Enforcer) -> None:
    """With the namespace's own default (bbr, no congctl route), only selected connections are changed."""
    ns = enforcer.edge.edge
    for family, gw in (("-4", "192.0.2.1"), ("-6", "2001:db8:1::1")):
        ns_sh(ns, "ip", family, "route", "replace", "default", "via", gw)
    try:
        assert enforcer.agent().handle(enforcer.config(1, SELECT_A)).result == ApplyStatus.APPLIED
        specs = [(A4, 8080, SMALL), (A6, 8080, LARGE), (B4, 8080, SMALL), (B6, 8080, LARGE)]
        assert algorithms(transfer(enforcer.edge, specs)) == ["cubic", "bbr", "bbr", "bbr"]
        assert BpfApplier(enforcer.program).counters()["start_failed"] == 0
    finally:
        for family, gw in (("-4", "192.0.2.1"), ("-6", "2001:db8:1::1")):
            ns_sh(ns, "ip", family, "route", "replace", "default", "via", gw, "congctl", "cubic")


def test_entries_of_another_namespace_switch_nothing(enforcer: Enforcer) -> None:
    """Entries carry the agent's namespace cookie: another namespace's agent on the same cgroup is inert here."""
    other = BpfApplier(enforcer.program, netns_cookie=netns_cookie(enforcer.edge.client))
    assert other.apply({p: Wanted(p, "bbr", False) for p in SELECT_A}).ok
    assert algorithms(transfer(enforcer.edge, [(A4, 8080, LARGE), (A6, 8080, LARGE)])) == ["cubic", "cubic"]
    counts = other.counters()
    assert counts["selected"] == 0 and counts["switched"] == 0 and counts["other_netns"] == 2


@pytest.mark.kafka
def test_kafka_agent_reports_bpf_health_and_sigterm_keeps_enforcement(
    enforcer: Enforcer, kafka_brokers: str, kafka_topic: str, tmp_path: Path
) -> None:
    from confluent_kafka import Consumer, Producer

    config_topic, status_topic = f"{kafka_topic}_cfg", f"{kafka_topic}_status"
    producer = Producer({"bootstrap.servers": kafka_brokers})
    producer.produce(config_topic, key=POP.encode(), value=enforcer.config(1, SELECT_A).SerializeToString())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka_brokers, "group.id": f"g-{status_topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([status_topic])
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "dyncc.cli", "agent", "--kafka", kafka_brokers, "--pop", POP,
            "--public-key", str(enforcer.edge.keys[1]), "--netns", enforcer.edge.edge, "--host", "edge-1",
            "--state-dir", str(enforcer.state_dir), "--config-topic", config_topic, "--status-topic", status_topic,
            "--enforce", "bpf", "--bpf-cgroup", str(enforcer.edge.cgroup),
            "--bpf-pin-dir", str(enforcer.program.pin_dir), "--bpf-object", str(build_object(tmp_path / "bpf")),
        ],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        applied = None
        deadline = time.monotonic() + 60
        while applied is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                status = ApplyStatus.FromString(msg.value() or b"")
                if status.version == 1 and status.result == ApplyStatus.APPLIED:
                    applied = status
        assert applied is not None, "no APPLIED status for v1"
        assert applied.health.enforce == "bpf" and applied.health.bpf_attached and applied.health.owned_routes == 2
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
        assert agent.returncode == 0, err
        assert "the attached program and its maps stay in place" in err
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
        consumer.close()
    assert attached(enforcer.program) == ["dyncc_cc_switch"]
    assert algorithms(transfer(enforcer.edge, [(A6, 8080, LARGE), (A6, 8080, SMALL)])) == ["bbr", "cubic"]


def test_other_edges_programs_on_the_same_cgroup_do_not_stop_a_switch(enforcer: Enforcer) -> None:
    """Several agents' programs on one cgroup (the lab: one per edge namespace, all on the root):
    programs attached first, holding the same prefixes for another namespace (the POP's other edge)
    or other prefixes (another POP's edge), must not turn off the RTT callback the selecting
    program needs: the socket's callback flags are shared by every program."""
    client_cookie = netns_cookie(enforcer.edge.client)
    others = [
        BpfProgram(
            Path("/sys/fs/bpf") / f"dyncc-test-{uuid.uuid4().hex[:8]}", enforcer.edge.cgroup, enforcer.program.obj
        )
        for _ in range(2)
    ]
    try:
        same = BpfApplier(others[0], netns_cookie=client_cookie)
        assert same.apply({p: Wanted(p, "bbr", False) for p in SELECT_A}).ok
        other_pop = BpfApplier(others[1], netns_cookie=client_cookie)
        assert other_pop.apply({p: Wanted(p, "bbr", False) for p in SELECT_B}).ok
        assert enforcer.agent().handle(enforcer.config(1, SELECT_A)).result == ApplyStatus.APPLIED  # attached last
        specs = [(A4, 8080, LARGE), (A6, 8080, LARGE), (A4, 8080, SMALL)]
        assert algorithms(transfer(enforcer.edge, specs)) == ["bbr", "bbr", "cubic"]
        assert BpfApplier(enforcer.program).counters()["switched"] == 2
        assert same.counters()["other_netns"] >= 3 and other_pop.counters()["released"] >= 1
    finally:
        for program in others:
            program.remove()
