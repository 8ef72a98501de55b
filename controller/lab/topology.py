"""The lab's network: a pure description of namespaces, links, addresses and shaping,
plus the iproute2/tc commands that build, shape and remove it.

    client c0 --veth-- router --veth-- edge (TCP server, collector, agent)
    client c1 --veth--/
    ...

Every name starts with `dlab-<run id>-`; only documentation addresses are used:
192.0.2.0/24 and 2001:db8:ff00::/64 for the edge-router link, client prefixes
from 198.51.100.0/24, 203.0.113.0/24 and IPv6 /56s under 2001:db8::/32.  The
edge reaches clients through covering routes that carry `congctl cubic` (the
namespace default is bbr and cannot be changed), so an owned per-prefix route
with `congctl bbr` visibly changes new sockets.  Client links are shaped on
the router (tbf on the router->client egress, the direction the data flows):
"slow" always, "alternating" on every other round (two phases, so the share of
slow prefixes is the same every round), "fine" never.

`describe()` and the `*_commands()` functions are pure (unit-tested); `build()`,
`apply_shaping()` and `destroy()` run the commands.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dyncc_common.errors import DynccError

log = logging.getLogger("dyncc.lab")

NS_PREFIX = "dlab-"
NETNS_DIR = "/run/netns"
PROFILES = ("slow", "alternating", "fine")

EDGE_V4, ROUTER_V4, LINK_V4_LEN = "192.0.2.1", "192.0.2.2", 24
EDGE_V6, ROUTER_V6, LINK_V6_LEN = "2001:db8:ff00::1", "2001:db8:ff00::2", 64
LINK_V4_NET, LINK_V6_NET = "192.0.2.0/24", "2001:db8:ff00::/64"
COVER_V4 = "default"  # isolated namespaces: nothing past the router
COVER_V6 = "2001:db8::/32"
CLIENT_V4 = ("198.51.100.0/24", "203.0.113.0/24")  # the only spare documentation /24s


class TopologyError(DynccError):
    """A lab topology could not be described or built; str() is one line."""


@dataclass(frozen=True)
class Shaping:
    rate: str = "4mbit"  # tbf rate of a slow link
    burst: str = "16kb"
    latency: str = "60ms"  # tbf queue limit expressed as delay


@dataclass(frozen=True)
class Client:
    index: int
    ns: str
    prefix: str  # canonical CIDR the controller scores: x.y.z.0/24 or 2001:db8:0:N00::/56
    family: int  # 4 or 6
    addr: str  # the client host's address
    gateway: str  # the router's address on this link
    link_len: int  # prefix length of the router-client link
    profile: str  # slow | alternating | fine
    phase: int  # alternating: slow on rounds where round % 2 == phase
    router_if: str  # the router's interface towards this client

    def slow_in_round(self, round_no: int) -> bool:
        if self.profile == "slow":
            return True
        if self.profile == "alternating":
            return round_no % 2 == self.phase
        return False


@dataclass(frozen=True)
class Topology:
    run_id: str
    edge_ns: str
    router_ns: str
    clients: tuple[Client, ...]
    port: int = 8080
    shaping: Shaping = Shaping()

    @property
    def namespaces(self) -> list[str]:
        return [self.edge_ns, self.router_ns, *(c.ns for c in self.clients)]

    def edge_addr(self, family: int) -> str:
        return EDGE_V4 if family == 4 else EDGE_V6

    def by_profile(self, profile: str) -> list[Client]:
        return [c for c in self.clients if c.profile == profile]


def _v6_prefix(n: int) -> tuple[str, str, str]:
    """The n-th client /56 (n >= 1): (prefix, router address, client address) on a /64 inside it."""
    net = ipaddress.IPv6Network(f"2001:db8:0:{n:x}00::/56")
    base = int(net.network_address)
    return str(net), str(ipaddress.IPv6Address(base + 1)), str(ipaddress.IPv6Address(base + 2))


def describe(
    run_id: str,
    slow: int = 2,
    alternating: int = 2,
    fine: int = 4,
    *,
    port: int = 8080,
    shaping: Shaping | None = None,
) -> Topology:
    """The lab layout: the first slow and the first fine client get the two IPv4 /24s, the rest /56s."""
    if not run_id or not run_id.isalnum() or len(run_id) > 8:
        raise TopologyError(f"bad run id {run_id!r}: 1-8 letters or digits")
    if min(slow, alternating, fine) < 0 or slow + alternating + fine == 0:
        raise TopologyError("need at least one client; counts must not be negative")
    if slow + alternating + fine > 60:
        raise TopologyError("at most 60 clients")
    if not 1 <= port <= 65535:
        raise TopologyError(f"bad port {port}")
    base = f"{NS_PREFIX}{run_id}"
    profiles = ["slow"] * slow + ["alternating"] * alternating + ["fine"] * fine
    v4_for = {0: CLIENT_V4[0]} if slow else {}
    if fine:
        v4_for[slow + alternating] = CLIENT_V4[1] if slow else CLIENT_V4[0]
    elif slow and alternating:
        v4_for[slow] = CLIENT_V4[1]
    clients: list[Client] = []
    v6_n = 0
    alt_seen = 0
    for i, profile in enumerate(profiles):
        phase = 0
        if profile == "alternating":
            phase = alt_seen % 2
            alt_seen += 1
        if i in v4_for:
            net = ipaddress.IPv4Network(v4_for[i])
            first = int(net.network_address)
            prefix, gw, addr = str(net), str(net.network_address + 1), str(ipaddress.IPv4Address(first + 2))
            family, link_len = 4, 24
        else:
            v6_n += 1
            prefix, gw, addr = _v6_prefix(v6_n)
            family, link_len = 6, 64
        clients.append(Client(i, f"{base}-c{i}", prefix, family, addr, gw, link_len, profile, phase, f"c{i}"))
    return Topology(run_id, f"{base}-edge", f"{base}-rtr", tuple(clients), port, shaping or Shaping())


# ------------------------------------------------------------------ commands (pure)

Command = list[str]


def _ns(ns: str, *args: str) -> Command:
    return ["ip", "-n", ns, *args]


def build_commands(topo: Topology) -> list[Command]:
    """Every iproute2 command that builds the topology, in order."""
    edge, rtr = topo.edge_ns, topo.router_ns
    cmds: list[Command] = [["ip", "netns", "add", ns] for ns in topo.namespaces]
    cmds += [_ns(ns, "link", "set", "lo", "up") for ns in topo.namespaces]
    # edge <-> router
    cmds.append(_ns(edge, "link", "add", "eth0", "type", "veth", "peer", "name", "edge", "netns", rtr))
    cmds.append(_ns(edge, "addr", "add", f"{EDGE_V4}/{LINK_V4_LEN}", "dev", "eth0"))
    cmds.append(_ns(edge, "addr", "add", f"{EDGE_V6}/{LINK_V6_LEN}", "dev", "eth0", "nodad"))
    cmds.append(_ns(rtr, "addr", "add", f"{ROUTER_V4}/{LINK_V4_LEN}", "dev", "edge"))
    cmds.append(_ns(rtr, "addr", "add", f"{ROUTER_V6}/{LINK_V6_LEN}", "dev", "edge", "nodad"))
    cmds.append(_ns(edge, "link", "set", "eth0", "up"))
    cmds.append(_ns(rtr, "link", "set", "edge", "up"))
    # covering routes on the edge: cubic, so that bbr is the visible exception
    cmds.append(_ns(edge, "route", "add", COVER_V4, "via", ROUTER_V4, "dev", "eth0", "congctl", "cubic"))
    cmds.append(_ns(edge, "-6", "route", "add", COVER_V6, "via", ROUTER_V6, "dev", "eth0", "congctl", "cubic"))
    cmds.append(
        ["ip", "netns", "exec", rtr, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]
    )
    for c in topo.clients:
        cmds.append(_ns(rtr, "link", "add", c.router_if, "type", "veth", "peer", "name", "eth0", "netns", c.ns))
        v6 = ["-6"] if c.family == 6 else []
        nodad = ["nodad"] if c.family == 6 else []
        cmds.append(_ns(rtr, *v6, "addr", "add", f"{c.gateway}/{c.link_len}", "dev", c.router_if, *nodad))
        cmds.append(_ns(c.ns, *v6, "addr", "add", f"{c.addr}/{c.link_len}", "dev", "eth0", *nodad))
        cmds.append(_ns(rtr, "link", "set", c.router_if, "up"))
        cmds.append(_ns(c.ns, "link", "set", "eth0", "up"))
        edge_net = LINK_V4_NET if c.family == 4 else LINK_V6_NET
        cmds.append(_ns(c.ns, *v6, "route", "add", edge_net, "via", c.gateway, "dev", "eth0"))
    return cmds


def shaping_commands(topo: Topology, round_no: int) -> list[Command]:
    """tc commands that put every client link in its state for `round_no`."""
    cmds: list[Command] = []
    s = topo.shaping
    for c in topo.clients:
        if c.profile == "fine":
            continue
        if c.slow_in_round(round_no):
            cmds.append(
                [
                    "tc",
                    "-n",
                    topo.router_ns,
                    "qdisc",
                    "replace",
                    "dev",
                    c.router_if,
                    "root",
                    "tbf",
                    "rate",
                    s.rate,
                    "burst",
                    s.burst,
                    "latency",
                    s.latency,
                ]
            )
        else:
            cmds.append(
                ["tc", "-n", topo.router_ns, "qdisc", "replace", "dev", c.router_if, "root", "pfifo", "limit", "1000"]
            )
    return cmds


# ------------------------------------------------------------------ I/O


def run_cmd(cmd: Sequence[str], *, check: bool = True, timeout: float = 20.0) -> str:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TopologyError(f"{' '.join(cmd)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise TopologyError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def build(topo: Topology) -> None:
    """Create the topology; on failure remove whatever was made and raise TopologyError."""
    existing = [ns for ns in topo.namespaces if os.path.exists(os.path.join(NETNS_DIR, ns))]
    if existing:
        raise TopologyError(f"namespace {existing[0]} already exists (run 'dyncc lab --cleanup')")
    try:
        for cmd in build_commands(topo):
            run_cmd(cmd)
    except TopologyError:
        destroy(topo.namespaces)
        raise
    log.info(
        "lab %s: %d namespaces (edge %s, router, %d clients)",
        topo.run_id,
        len(topo.namespaces),
        topo.edge_ns,
        len(topo.clients),
    )


def apply_shaping(topo: Topology, round_no: int) -> None:
    for cmd in shaping_commands(topo, round_no):
        run_cmd(cmd)


def lab_namespaces(prefix: str = NS_PREFIX) -> list[str]:
    """Existing namespaces whose name starts with `prefix`."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def _ns_pids(ns: str) -> list[int]:
    out = run_cmd(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def destroy(namespaces: Sequence[str]) -> list[str]:
    """Kill the processes inside each namespace, then delete it; returns the ones that remain."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [ns for ns in namespaces if os.path.exists(os.path.join(NETNS_DIR, ns))]
        pids = [pid for ns in live for pid in _ns_pids(ns)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if pids and sig == signal.SIGTERM:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.05)
    for ns in namespaces:
        if os.path.exists(os.path.join(NETNS_DIR, ns)):
            run_cmd(["ip", "netns", "del", ns], check=False)
    return [ns for ns in namespaces if os.path.exists(os.path.join(NETNS_DIR, ns))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
