"""The fleet lab's network: a pure description of namespaces, links, addresses and client
prefixes, plus the iproute2 commands that build it and the code that runs and removes them.

    p0e0  p0e1  p1e0  p1e1        edge hosts (nginx, collector, agent), two per POP
       \\    |     |    /
              rtr                  one router; shaping, loss and delay of every path
       /  /  |  |  \\  ...
    p0-lossy p0-deep ... p1-fine   one client namespace per (POP, path class), holding
                                   many client prefixes as source addresses

Every name starts with `dlab-<run id>-`; only documentation addresses are used: 192.0.2.0/24
for the router's links (a /30 each), 2001:db8:ff00::/40 for their IPv6 /64s, client prefixes
as IPv6 /56s (one /48 per POP and class: 2001:db8:<pop+1><class>::/48, client address ::2 of
each /56) plus the only two spare documentation /24s, 198.51.100.0/24 and 203.0.113.0/24 (a
lossy prefix of the first and of the second POP).  Edges reach clients through covering routes
that carry `congctl cubic` (the namespace default is bbr and cannot be changed), so an owned
per-prefix route with `congctl bbr` visibly changes new sockets.  How each class's paths are
shaped (rate, queue, loss, delay) is dyncc/lab/paths.py; this module says which prefix
belongs to which class.

`describe()` and `build_commands()` are pure (unit-tested); `build()` and `destroy()` run
commands.
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

from dyncc.lab.settings import LabSettings
from dyncc_common.errors import DynccError

log = logging.getLogger("dyncc.lab")

NS_PREFIX = "dlab-"
NETNS_DIR = "/run/netns"
# path classes, in the order their /48s are numbered (class index + 1 in the /48)
CLASSES = ("lossy", "deep", "alternating", "lowrtt", "fine")
CLASS_TAG = {"lossy": "lossy", "deep": "deep", "alternating": "alt", "lowrtt": "lowrtt", "fine": "fine"}
CLIENT_V4 = ("198.51.100.0/24", "203.0.113.0/24")  # the only spare documentation /24s
COVER_V4 = "default"  # isolated namespaces: nothing past the router
COVER_V6 = "2001:db8::/32"
MAX_POPS = 2  # two IPv4 /24s and 15 /48 digits per POP keep this small on purpose
MAX_HOSTS_PER_POP = 4
MAX_PER_CLASS = 250  # /56s numbered inside one /48: 1..250
WEB_PORT = 80


class TopologyError(DynccError):
    """A lab topology could not be described or built; str() is one line."""


@dataclass(frozen=True)
class ClientPrefix:
    """One client network: the prefix the controller scores and the address its clients use."""

    pop: str
    klass: str  # one of CLASSES
    prefix: str  # canonical: x.y.z.0/24 or 2001:db8:...::/56
    family: int  # 4 or 6
    addr: str  # the clients' source address inside the prefix
    phase: int  # alternating: slow on rounds where round % 2 == phase

    def slow_in_round(self, round_no: int) -> bool:
        """Alternating prefixes are on their slow path every other round; other classes keep theirs."""
        if self.klass == "alternating":
            return round_no % 2 == self.phase
        return self.klass != "fine"


@dataclass(frozen=True)
class Link:
    """A veth between the router (`router_if`, its addresses) and a host's eth0."""

    router_if: str
    router_v4: str
    host_v4: str
    router_v6: str
    host_v6: str


@dataclass(frozen=True)
class EdgeHost:
    pop: str
    host: str  # host name in telemetry, configs and statuses
    ns: str
    link: Link

    @property
    def addr4(self) -> str:
        return self.link.host_v4

    @property
    def addr6(self) -> str:
        return self.link.host_v6

    def addr(self, family: int) -> str:
        return self.addr4 if family == 4 else self.addr6


@dataclass(frozen=True)
class ClientHost:
    """A client namespace: all prefixes of one (POP, class), as addresses on its eth0."""

    pop: str
    klass: str
    ns: str
    link: Link
    prefixes: tuple[ClientPrefix, ...]


@dataclass(frozen=True)
class Layout:
    """How many prefixes of each class one POP has (the rest of `per_pop` are fine); defaults: LabSettings'."""

    pops: int = LabSettings.pops
    hosts_per_pop: int = LabSettings.hosts_per_pop
    per_pop: int = LabSettings.prefixes_per_pop
    lossy: int = LabSettings.lossy
    deep: int = LabSettings.deep
    alternating: int = LabSettings.alternating
    lowrtt: int = LabSettings.lowrtt

    def counts(self) -> dict[str, int]:
        shaped = self.lossy + self.deep + self.alternating + self.lowrtt
        return {
            "lossy": self.lossy,
            "deep": self.deep,
            "alternating": self.alternating,
            "lowrtt": self.lowrtt,
            "fine": self.per_pop - shaped,
        }

    def check(self) -> None:
        if not 1 <= self.pops <= MAX_POPS:
            raise TopologyError(f"pops must be 1-{MAX_POPS}, got {self.pops}")
        if not 1 <= self.hosts_per_pop <= MAX_HOSTS_PER_POP:
            raise TopologyError(f"hosts per POP must be 1-{MAX_HOSTS_PER_POP}, got {self.hosts_per_pop}")
        counts = self.counts()
        if min(counts.values()) < 0:
            raise TopologyError(
                f"{self.per_pop} prefixes per POP cannot hold {self.per_pop - counts['fine']} shaped ones"
            )
        if max(counts.values()) > MAX_PER_CLASS:
            raise TopologyError(f"at most {MAX_PER_CLASS} prefixes per class and POP")
        if self.per_pop < 1:
            raise TopologyError("need at least one client prefix per POP")


@dataclass(frozen=True)
class Topology:
    run_id: str
    router_ns: str
    pops: tuple[str, ...]
    edges: tuple[EdgeHost, ...]
    clients: tuple[ClientHost, ...]
    port: int = WEB_PORT

    @property
    def namespaces(self) -> list[str]:
        return [self.router_ns, *(e.ns for e in self.edges), *(c.ns for c in self.clients)]

    @property
    def prefixes(self) -> list[ClientPrefix]:
        return [p for c in self.clients for p in c.prefixes]

    def edges_of(self, pop: str) -> list[EdgeHost]:
        return [e for e in self.edges if e.pop == pop]

    def by_class(self, klass: str) -> list[ClientPrefix]:
        return [p for p in self.prefixes if p.klass == klass]

    def classes(self) -> dict[str, str]:
        """prefix -> class."""
        return {p.prefix: p.klass for p in self.prefixes}

    def prefix_pops(self) -> dict[str, str]:
        return {p.prefix: p.pop for p in self.prefixes}


def pop_names(n: int) -> tuple[str, ...]:
    return tuple(f"lab-{chr(ord('a') + i)}" for i in range(n))


def _link(index: int, router_if: str) -> Link:
    """The index-th router link: 192.0.2.(4i)/30 and 2001:db8:ff00:i::/64 (router first)."""
    if not 0 <= index < 64:
        raise TopologyError("at most 64 router links")
    base = int(ipaddress.IPv4Address("192.0.2.0")) + 4 * index
    v6 = int(ipaddress.IPv6Address("2001:db8:ff00::")) + (index << 64)
    return Link(
        router_if,
        str(ipaddress.IPv4Address(base + 1)),
        str(ipaddress.IPv4Address(base + 2)),
        str(ipaddress.IPv6Address(v6 + 1)),
        str(ipaddress.IPv6Address(v6 + 2)),
    )


def class_network(pop_index: int, klass: str) -> ipaddress.IPv6Network:
    """The /48 holding the /56s of one (POP, class): 2001:db8:<pop+1><class index+1>::/48."""
    tag = (pop_index + 1) * 0x100 + CLASSES.index(klass) + 1
    return ipaddress.IPv6Network(f"2001:db8:{tag:x}::/48")


def _v6_prefix(pop_index: int, klass: str, n: int) -> tuple[str, str]:
    """The n-th (1-based) /56 of a (POP, class) and its client address (::2)."""
    net = class_network(pop_index, klass)
    sub = ipaddress.IPv6Network((int(net.network_address) + (n << 72), 56))
    return str(sub), str(sub.network_address + 2)


def describe(run_id: str, layout: Layout | None = None, *, port: int = WEB_PORT) -> Topology:
    """The lab layout; the first lossy prefix of POP i (i < 2) is the IPv4 /24 CLIENT_V4[i]."""
    layout = layout or Layout()
    if not run_id or not run_id.isalnum() or len(run_id) > 8:
        raise TopologyError(f"bad run id {run_id!r}: 1-8 letters or digits")
    if not 1 <= port <= 65535:
        raise TopologyError(f"bad port {port}")
    layout.check()
    base = f"{NS_PREFIX}{run_id}"
    pops = pop_names(layout.pops)
    edges: list[EdgeHost] = []
    clients: list[ClientHost] = []
    link_no = 0
    for p, pop in enumerate(pops):
        for h in range(layout.hosts_per_pop):
            tag = f"p{p}e{h}"
            edges.append(EdgeHost(pop, f"{pop}-e{h}", f"{base}-{tag}", _link(link_no, tag)))
            link_no += 1
    for p, pop in enumerate(pops):
        alt_seen = 0
        for klass, count in layout.counts().items():
            if count == 0:
                continue
            prefixes: list[ClientPrefix] = []
            for n in range(1, count + 1):
                phase = 0
                if klass == "alternating":
                    phase = alt_seen % 2
                    alt_seen += 1
                if klass == "lossy" and n == 1 and p < len(CLIENT_V4):
                    net = ipaddress.IPv4Network(CLIENT_V4[p])
                    prefixes.append(ClientPrefix(pop, klass, str(net), 4, str(net.network_address + 2), phase))
                else:
                    prefix, addr = _v6_prefix(p, klass, n)
                    prefixes.append(ClientPrefix(pop, klass, prefix, 6, addr, phase))
            tag = f"p{p}{CLASS_TAG[klass]}"
            clients.append(
                ClientHost(pop, klass, f"{base}-p{p}-{CLASS_TAG[klass]}", _link(link_no, tag), tuple(prefixes))
            )
            link_no += 1
    return Topology(run_id, f"{base}-rtr", pops, tuple(edges), tuple(clients), port)


# ------------------------------------------------------------------ commands (pure)

Command = list[str]


def _ns(ns: str, *args: str) -> Command:
    return ["ip", "-n", ns, *args]


def _link_commands(rtr: str, host_ns: str, link: Link) -> list[Command]:
    r = link.router_if
    return [
        _ns(rtr, "link", "add", r, "type", "veth", "peer", "name", "eth0", "netns", host_ns),
        _ns(rtr, "addr", "add", f"{link.router_v4}/30", "dev", r),
        _ns(rtr, "-6", "addr", "add", f"{link.router_v6}/64", "dev", r, "nodad"),
        _ns(host_ns, "addr", "add", f"{link.host_v4}/30", "dev", "eth0"),
        _ns(host_ns, "-6", "addr", "add", f"{link.host_v6}/64", "dev", "eth0", "nodad"),
        _ns(rtr, "link", "set", r, "up"),
        _ns(host_ns, "link", "set", "eth0", "up"),
    ]


def build_commands(topo: Topology) -> list[Command]:
    """Every iproute2 command that builds the topology (links, addresses, routes), in order."""
    rtr = topo.router_ns
    cmds: list[Command] = [["ip", "netns", "add", ns] for ns in topo.namespaces]
    cmds += [_ns(ns, "link", "set", "lo", "up") for ns in topo.namespaces]
    cmds.append(
        ["ip", "netns", "exec", rtr, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]
    )
    for e in topo.edges:
        cmds += _link_commands(rtr, e.ns, e.link)
        # covering routes: cubic, so that bbr is the visible exception
        cmds.append(_ns(e.ns, "route", "add", COVER_V4, "via", e.link.router_v4, "dev", "eth0", "congctl", "cubic"))
        cmds.append(
            _ns(e.ns, "-6", "route", "add", COVER_V6, "via", e.link.router_v6, "dev", "eth0", "congctl", "cubic")
        )
    for c in topo.clients:
        cmds += _link_commands(rtr, c.ns, c.link)
        cmds.append(_ns(c.ns, "route", "add", "default", "via", c.link.router_v4, "dev", "eth0"))
        cmds.append(_ns(c.ns, "-6", "route", "add", COVER_V6, "via", c.link.router_v6, "dev", "eth0"))
        for p in c.prefixes:
            if p.family == 4:
                cmds.append(_ns(c.ns, "addr", "add", f"{p.addr}/32", "dev", "eth0"))
                cmds.append(_ns(rtr, "route", "add", p.prefix, "via", c.link.host_v4, "dev", c.link.router_if))
            else:
                cmds.append(_ns(c.ns, "-6", "addr", "add", f"{p.addr}/128", "dev", "eth0", "nodad"))
        for net in sorted({str(_covering_48(p)) for p in c.prefixes if p.family == 6}):
            cmds.append(_ns(rtr, "-6", "route", "add", net, "via", c.link.host_v6, "dev", c.link.router_if))
    return cmds


def _covering_48(p: ClientPrefix) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network(p.prefix).supernet(new_prefix=48)


ISP_NAMES = {
    "lossy": "long-haul mobile ISP",
    "deep": "bufferbloated cable ISP",
    "alternating": "congested-at-peak ISP",
    "lowrtt": "back office",
}


def asn_rows(prefixes: Sequence[tuple[str, str]]) -> list[tuple[str, int, str]]:
    """A lab prefix -> ASN table from (prefix, class) pairs, with documentation ASNs 64496-64511:
    one 'ISP' per path class (both POPs), the fine prefixes spread over three more."""
    rows = []
    fine = 0
    for prefix, klass in prefixes:
        if klass in ISP_NAMES:
            rows.append((prefix, 64496 + CLASSES.index(klass), ISP_NAMES[klass]))
        else:
            rows.append((prefix, 64500 + fine % 3, f"broadband ISP {fine % 3 + 1}"))
            fine += 1
    return rows


def write_asn_file(path: str | os.PathLike[str], prefixes: Sequence[tuple[str, str]]) -> None:
    """The CSV the report reads (`prefix,asn,name`)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("prefix,asn,name\n")
        for prefix, asn, name in asn_rows(prefixes):
            fh.write(f"{prefix},{asn},{name}\n")


# ------------------------------------------------------------------ I/O


def run_cmd(cmd: Sequence[str], *, check: bool = True, timeout: float = 20.0, input_text: str | None = None) -> str:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, input=input_text)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TopologyError(f"{' '.join(cmd)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise TopologyError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def run_all(cmds: Sequence[Command]) -> None:
    """Run the commands in order; the first failure raises TopologyError."""
    for cmd in cmds:
        run_cmd(cmd)


def build(topo: Topology) -> None:
    """Create the topology; on failure remove whatever was made and raise TopologyError."""
    existing = [ns for ns in topo.namespaces if os.path.exists(os.path.join(NETNS_DIR, ns))]
    if existing:
        raise TopologyError(f"namespace {existing[0]} already exists (run 'dyncc lab --cleanup')")
    try:
        run_all(build_commands(topo))
    except TopologyError:
        destroy(topo.namespaces)
        raise
    log.info(
        "lab %s: %d namespaces (router, %d edge hosts in %d POPs, %d client namespaces with %d prefixes)",
        topo.run_id,
        len(topo.namespaces),
        len(topo.edges),
        len(topo.pops),
        len(topo.clients),
        len(topo.prefixes),
    )


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
