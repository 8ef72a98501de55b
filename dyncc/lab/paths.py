"""Path emulation for the lab without netem: rate, queue, random loss and delay per client prefix.

Pure: the path classes and the tc / ip commands; running them is the caller's business.
All shaping sits in the router namespace.  Data (edge -> client) is shaped on the router's
egress towards a client namespace:

* rate and queue: an htb root with one class per entry (`classid(i)`, rate = ceil = the
  spec's rate) holding a pfifo/bfifo leaf of the spec's limit, and a u32 filter per
  destination prefix (IPv4 /24 or IPv6 /56).  An entry is one prefix, or several that share
  the class (one FIFO: a shared bottleneck, `PathClass.shared`).  Anything else (neighbour
  discovery, ARP, unknown destinations) goes to the unshaped default class 1:1;
* random loss: a cls_bpf program in direct-action mode on that device's clsact egress
  (bpf/random_drop.c, built by bpf_build), one loss fraction per device;
* delay: policy routing sends every packet arriving from a delayed client link (the
  client -> edge direction: requests and ACKs) into a tun device read by the relay
  (dyncc.lab.delay), which holds it for its source prefix's delay and writes it back; it
  then follows the main table.  `delay_ms` is therefore the round-trip time added.

Loss is decided per skb, so the edge must send one MTU-sized packet per skb
(`sender_commands`: gso_max_segs 1 on the edge device); otherwise one drop removes a whole
GSO burst (up to 64 KB).  The alternating class switches each round between two specs that
share their delay and have no loss (only the htb class and its leaf change:
`change_class_commands`).  The classes' parameters and what they were measured to do are in
docs/performance.md ("Lab paths").
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dyncc.lab.delay import Uplink
from dyncc_common.errors import DynccError

Command = list[str]
QueueKind = Literal["pfifo", "bfifo"]

ROOT = "1:"
DEFAULT_CLASS = "1:1"
DEFAULT_RATE_BPS = 10_000_000_000
DEFAULT_LIMIT = 1000
FIRST_MINOR = 0x100
MAX_CLASSES = 0xFFFF - FIRST_MINOR
MAX_QUANTUM = 60_000
DELAY_TABLE = 100
DELAY_PREF = 100
DELAY_DEV = "dlytun"


class PathError(DynccError):
    """A path spec or shaping request is invalid; str() is one line."""


@dataclass(frozen=True)
class PathSpec:
    """One path: htb rate, added round-trip delay, random loss of the data direction, leaf queue."""

    rate_bps: int  # bits per second
    delay_ms: float = 0.0  # added to the round-trip time (the relay)
    loss: float = 0.0  # fraction of data packets dropped at random (0..0.5)
    queue: QueueKind = "pfifo"
    limit: int = 100  # leaf queue limit: packets (pfifo) or bytes (bfifo)
    # a busy uplink (the relay's Uplink): the client -> edge direction waits this much more while
    # the client uploads (quiet and busy phases of these mean lengths, per prefix); 0: never busy
    uplink_busy_ms: float = 0.0
    uplink_quiet_s: float = 4.0
    uplink_busy_s: float = 2.0

    def __post_init__(self) -> None:
        if self.rate_bps < 8_000:
            raise PathError(f"rate {self.rate_bps} bit/s is below 8 kbit/s")
        if not 0.0 <= self.delay_ms <= 10_000.0:
            raise PathError(f"delay {self.delay_ms} ms outside 0..10000")
        if not 0.0 <= self.loss <= 0.5:
            raise PathError(f"loss {self.loss} outside 0..0.5")
        if self.queue not in ("pfifo", "bfifo"):
            raise PathError(f"queue kind {self.queue!r}: pfifo or bfifo")
        if self.limit < 1:
            raise PathError(f"queue limit {self.limit} must be positive")
        if not 0.0 <= self.uplink_busy_ms <= 10_000.0:
            raise PathError(f"uplink delay {self.uplink_busy_ms} ms outside 0..10000")
        if not (0.05 <= self.uplink_quiet_s <= 3600 and 0.05 <= self.uplink_busy_s <= 3600):
            raise PathError("uplink phases must be 0.05..3600 s")

    @property
    def delayed(self) -> bool:
        """Whether the client -> edge direction goes through the relay."""
        return self.delay_ms > 0 or self.uplink_busy_ms > 0

    def uplink(self) -> Uplink | None:
        if self.uplink_busy_ms <= 0:
            return None
        return Uplink(self.uplink_busy_ms, self.uplink_quiet_s, self.uplink_busy_s)


# ------------------------------------------------------------------ the classes


@dataclass(frozen=True)
class PathClass:
    """A lab path class: one spec, or (slow, fast) for an alternating class; `shared`: the prefixes
    of one client link share one htb class (one FIFO, one bottleneck) instead of one class each."""

    name: str
    specs: tuple[PathSpec, ...]
    shared: bool = False

    def __post_init__(self) -> None:
        if len(self.specs) not in (1, 2):
            raise PathError(f"class {self.name}: one spec, or two (slow, fast)")
        if len(self.specs) == 2:
            slow, fast = self.specs
            if slow.delay_ms != fast.delay_ms or slow.loss or fast.loss:
                raise PathError(f"class {self.name}: alternating specs must share the delay and have no loss")
            if self.shared:
                raise PathError(f"class {self.name}: an alternating class cannot be shared")

    @property
    def alternating(self) -> bool:
        return len(self.specs) == 2

    def spec(self, round_no: int = 0, phase: int = 0) -> PathSpec:
        """The spec in round `round_no`: an alternating class is slow when round % 2 == phase."""
        if not self.alternating:
            return self.specs[0]
        return self.specs[0] if round_no % 2 == phase else self.specs[1]

    def entries(
        self, prefixes: Sequence[str], round_no: int = 0, phases: Sequence[int] | None = None
    ) -> list[tuple[str | tuple[str, ...], PathSpec]]:
        """shaping_commands entries for `prefixes` on one client link (phases: per prefix, alternating)."""
        if self.shared:
            return [(tuple(prefixes), self.specs[0])] if prefixes else []
        ph = list(phases) if phases is not None else [0] * len(prefixes)
        if len(ph) != len(prefixes):
            raise PathError("one phase per prefix")
        return [(p, self.spec(round_no, f)) for p, f in zip(prefixes, ph, strict=True)]


#: Long path, a few Mbit/s, random loss: BBR beats CUBIC clearly.
LOSSY = PathSpec(rate_bps=6_000_000, delay_ms=50.0, loss=0.01, queue="pfifo", limit=100)
#: A bloated access link: a deep FIFO downstream (800 ms at its rate) and an uplink whose queue
#: fills while the client uploads (600 ms more on the ACKs for about 1 s, every 2.5 s or so,
#: each prefix on its own schedule).  CUBIC's window covers the longer round trip out of the deep
#: FIFO; BBR keeps about two BDPs of the minimum RTT in flight, so the downlink idles while the
#: ACKs wait (docs/performance.md, "Lab paths").
DEEP = PathSpec(
    rate_bps=3_000_000,
    delay_ms=30.0,
    loss=0.0,
    queue="bfifo",
    limit=300_000,
    uplink_busy_ms=600.0,
    uplink_quiet_s=1.5,
    uplink_busy_s=1.0,
)
#: Fast, no loss, >= 20 ms RTT.
FINE = PathSpec(rate_bps=40_000_000, delay_ms=20.0, loss=0.0, queue="pfifo", limit=300)
#: Rate-limited like a poor path but no added delay (min_rtt < 2 ms).
LOWRTT = PathSpec(rate_bps=3_000_000, delay_ms=0.0, loss=0.0, queue="pfifo", limit=100)
#: Alternating: a slow round (a few Mbit/s, a 300 ms buffer of its own, no loss) and a fine round;
#: both leaves are pfifo, so a round's switch changes them in place.
ALTERNATING_SLOW = PathSpec(rate_bps=4_000_000, delay_ms=20.0, loss=0.0, queue="pfifo", limit=100)
#: The fast round: well above the POP's poor paths but not so fast that a 1 MB response ends
#: between two collector polls (a class whose fast rounds leave no qualifying samples is only
#: counted in its slow rounds and looks consistently poor).
ALTERNATING_FAST = PathSpec(rate_bps=12_000_000, delay_ms=20.0, loss=0.0, queue="pfifo", limit=100)

CLASSES: Mapping[str, PathClass] = {
    c.name: c
    for c in (
        PathClass("lossy", (LOSSY,)),
        PathClass("deep", (DEEP,)),
        PathClass("alternating", (ALTERNATING_SLOW, ALTERNATING_FAST)),
        PathClass("fine", (FINE,)),
        PathClass("lowrtt", (LOWRTT,)),
    )
}


def path_class(name: str) -> PathClass:
    try:
        return CLASSES[name]
    except KeyError as exc:
        raise PathError(f"unknown path class {name!r}") from exc


# ------------------------------------------------------------------ commands (pure)


def _tc(ns: str, *args: str) -> Command:
    return ["tc", "-n", ns, *args]


def _ip(ns: str, *args: str) -> Command:
    return ["ip", "-n", ns, *args]


def classid(index: int) -> str:
    """The htb class of the index-th entry on a device."""
    if not 0 <= index < MAX_CLASSES:
        raise PathError(f"prefix index {index} outside 0..{MAX_CLASSES - 1}")
    return f"1:{FIRST_MINOR + index:x}"


def _network(prefix: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(prefix)
    except ValueError as exc:
        raise PathError(f"bad client prefix {prefix!r} (must be canonical)") from exc


def _quantum(rate_bps: int) -> str:
    # htb's default (rate / r2q) is out of range at both ends; one MTU .. MAX_QUANTUM bytes
    return str(max(1514, min(MAX_QUANTUM, rate_bps // 8 // 100)))


def _class(ns: str, dev: str, verb: str, cid: str, spec: PathSpec) -> Command:
    rate = f"{spec.rate_bps}bit"
    return _tc(
        ns,
        "class",
        verb,
        "dev",
        dev,
        "parent",
        ROOT,
        "classid",
        cid,
        "htb",
        "rate",
        rate,
        "ceil",
        rate,
        "quantum",
        _quantum(spec.rate_bps),
    )


def _leaf(ns: str, dev: str, cid: str, spec: PathSpec) -> Command:
    # no handle: `replace` then changes a leaf of the same kind in place and grafts a new one
    # (dropping what the old one held) when the kind differs; with a handle the kernel refuses that
    return _tc(ns, "qdisc", "replace", "dev", dev, "parent", cid, spec.queue, "limit", str(spec.limit))


Entry = tuple[str | Sequence[str], PathSpec]


def _prefixes(entry: Entry) -> list[str]:
    target = entry[0]
    return [target] if isinstance(target, str) else list(target)


def shaping_commands(ns: str, dev: str, entries: Sequence[Entry]) -> list[Command]:
    """htb root, then per entry one class + leaf (the i-th entry gets classid(i)) and one u32 filter
    per destination prefix; an entry is (prefix, spec) or (prefixes, spec) for a shared class."""
    if len(entries) > MAX_CLASSES:
        raise PathError(f"{len(entries)} prefixes on {dev}: at most {MAX_CLASSES}")
    seen: set[str] = set()
    cmds: list[Command] = [
        _tc(ns, "qdisc", "replace", "dev", dev, "root", "handle", ROOT, "htb", "default", DEFAULT_CLASS.split(":")[1]),
        _tc(
            ns,
            "class",
            "add",
            "dev",
            dev,
            "parent",
            ROOT,
            "classid",
            DEFAULT_CLASS,
            "htb",
            "rate",
            f"{DEFAULT_RATE_BPS}bit",
            "quantum",
            str(MAX_QUANTUM),
        ),
        _tc(
            ns,
            "qdisc",
            "add",
            "dev",
            dev,
            "parent",
            DEFAULT_CLASS,
            "handle",
            "2:",
            "pfifo",
            "limit",
            str(DEFAULT_LIMIT),
        ),
    ]
    for i, entry in enumerate(entries):
        spec = entry[1]
        cid = classid(i)
        cmds.append(_class(ns, dev, "add", cid, spec))
        cmds.append(_leaf(ns, dev, cid, spec))
        for prefix in _prefixes(entry):
            net = _network(prefix)
            if str(net) in seen:
                raise PathError(f"prefix {net} twice on {dev}")
            seen.add(str(net))
            if net.version == 4:
                match = ["protocol", "ip", "prio", "1", "u32", "match", "ip", "dst", str(net)]
            else:
                match = ["protocol", "ipv6", "prio", "2", "u32", "match", "ip6", "dst", str(net)]
            cmds.append(_tc(ns, "filter", "add", "dev", dev, "parent", ROOT, *match, "flowid", cid))
    return cmds


def change_class_commands(ns: str, dev: str, index: int, spec: PathSpec) -> list[Command]:
    """Switch the index-th prefix's class on `dev` to `spec` (rate and leaf; loss and delay stay)."""
    cid = classid(index)
    return [_class(ns, dev, "change", cid, spec), _leaf(ns, dev, cid, spec)]


def loss_commands(ns: str, dev: str, program: str) -> list[Command]:
    """Attach the random-drop object `program` (bpf_build.build_random_drop) to `dev`'s egress."""
    return [
        _tc(ns, "qdisc", "replace", "dev", dev, "clsact"),
        _tc(
            ns,
            "filter",
            "replace",
            "dev",
            dev,
            "egress",
            "pref",
            "1",
            "handle",
            "1",
            "bpf",
            "da",
            "obj",
            program,
            "sec",
            "tc",
        ),
    ]


def sender_commands(ns: str, dev: str) -> list[Command]:
    """On the sending edge's device: one MTU-sized segment per skb, so loss and queues act per packet."""
    return [_ip(ns, "link", "set", "dev", dev, "gso_max_segs", "1")]


def delay_commands(
    ns: str, devices: Sequence[str], *, tun: str = DELAY_DEV, table: int = DELAY_TABLE, pref: int = DELAY_PREF
) -> list[Command]:
    """The tun device and policy routing that send what arrives from `devices` through the relay."""
    cmds: list[Command] = [
        _ip(ns, "tuntap", "add", "dev", tun, "mode", "tun"),
        _ip(ns, "link", "set", "dev", tun, "up"),
        ["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv4.conf.{tun}.rp_filter=0"],
        _ip(ns, "route", "add", "default", "dev", tun, "table", str(table)),
        _ip(ns, "-6", "route", "add", "default", "dev", tun, "table", str(table)),
    ]
    for dev in devices:
        for fam in ("-4", "-6"):
            cmds.append(_ip(ns, fam, "rule", "add", "iif", dev, "lookup", str(table), "pref", str(pref)))
    return cmds


def delay_map(entries: Sequence[Entry]) -> dict[str, float]:
    """prefix -> delay in ms, for the relay (dyncc.lab.delay)."""
    return {str(_network(p)): entry[1].delay_ms for entry in entries for p in _prefixes(entry)}


def uplink_map(entries: Sequence[Entry]) -> dict[str, Uplink]:
    """prefix -> its busy uplink, for the relay (the entries whose spec has one; each prefix its own)."""
    out: dict[str, Uplink] = {}
    for entry in entries:
        up = entry[1].uplink()
        if up is not None:
            out.update((str(_network(p)), up) for p in _prefixes(entry))
    return out
