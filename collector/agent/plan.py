"""Pure decisions of the edge agent: which config to accept, which routes to write.

No I/O here.  The agent's route I/O (collector/agent/routes.py) dumps the main
table; these functions turn that dump plus a desired config into:

- `check_config`: accept / unchanged / refuse a signed CongestionConfig (also one signed
  longer ago than the maximum age, unless it is a kill switch);
- `parse_wanted`: the config's entries as canonical prefixes (refusing bad ones);
- `EdgePolicy`: the prefixes this edge never routes, whoever signed them: the contract's
  built-in ranges (schemas/prefix_rules.py, the controller's), the agent's `--deny` ranges,
  and with `--allow` everything outside the allowed ranges.  `split` keeps the others; a
  refused prefix gets no route (its traffic stays on its covering route), the rest of the
  config applies;
- `CoveringIndex`: longest-prefix match over the routes we do NOT own, i.e. the
  route the kernel uses today for a prefix once our own routes are ignored;
- `make_plan`: desired owned set (same nexthop as the covering route, plus the
  algorithm), prefixes skipped with a reason, and the add/remove/keep diff;
- `diff_owned`, `verify_readback`: exact set comparison used for apply,
  rollback and the read-back check.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from collector.netlink.rtnetlink import (
    CC_ALGO_LOCK_BIT,
    RT_TABLE_MAIN,
    RTM_F_CLONED,
    RTN_NAMES,
    RTN_UNICAST,
    RouteRecord,
)
from dyncc_common.errors import DynccError
from schemas.congestion_pb2 import CongestionConfig
from schemas.prefix_rules import RangeSet, builtin_problem, parse_ranges, shape_problem

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
NetKey = tuple[int, int, int]  # (address family, network address as int, prefix length)


def net_key(prefix: str) -> NetKey:
    """A canonical "addr/len" prefix -> NetKey, without ipaddress objects (hot path)."""
    addr, _, length = prefix.partition("/")
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    return family, int.from_bytes(socket.inet_pton(family, addr)), int(length)


@dataclass(frozen=True)
class Nexthop:
    """Everything copied from the covering route onto an owned route."""

    family: int
    gateway: str | None
    oif: int | None
    prefsrc: str | None
    nh_id: int | None
    scope: int
    priority: int | None
    metrics: tuple[tuple[int, int], ...]
    lock: int  # RTAX_LOCK bits other than the cc_algo bit

    def describe(self) -> str:
        parts = [f"via {self.gateway}" if self.gateway else "direct"]
        if self.nh_id is not None:
            parts.append(f"nhid {self.nh_id}")
        if self.oif is not None:
            parts.append(f"oif {self.oif}")
        if self.prefsrc:
            parts.append(f"src {self.prefsrc}")
        return " ".join(parts)


@dataclass(frozen=True)
class Route:
    """An owned route: desired (computed) or installed (read back)."""

    prefix: str
    nexthop: Nexthop
    algorithm: str  # "" when the kernel route has no RTAX_CC_ALGO
    lock: bool


@dataclass(frozen=True)
class Wanted:
    prefix: str
    algorithm: str
    lock: bool
    threshold: int = 0  # the config's switch_threshold_bytes (enforce bpf only; 0 = default)


@dataclass
class Plan:
    target: dict[str, Route]
    remove: list[Route]
    add: list[Route]
    keep: list[Route]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def replaced(self) -> int:
        removed = {r.prefix for r in self.remove}
        return sum(1 for r in self.add if r.prefix in removed)

    @property
    def added(self) -> int:
        return len(self.add) - self.replaced

    @property
    def removed(self) -> int:
        return len(self.remove) - self.replaced

    @property
    def changes(self) -> int:
        return len(self.add) + len(self.remove)


# ---------------------------------------------------------------- config checks


ACCEPT, UNCHANGED, REFUSE, IGNORE = "accept", "unchanged", "refuse", "ignore"


@dataclass(frozen=True)
class Verdict:
    action: str  # ACCEPT / UNCHANGED / REFUSE / IGNORE
    reason: str = ""  # short label for metrics (unsigned, bad_signature, wrong_pop, stale, too_old, invalid)
    detail: str = ""


def check_config(
    config: CongestionConfig,
    *,
    pop: str,
    host: str,
    signature_error: str | None,
    applied_version: int,
    applied_signature: bytes,
    now_ns: int = 0,
    max_age_ns: int = 0,
) -> Verdict:
    """Decide on a config whose signature check gave `signature_error` (None = valid).

    A config with `target_hosts` not naming `host` is ignored: no route change and
    the applied version does not move (it is another wave of a staged rollout).
    With `max_age_ns` > 0 a new config whose `created_at_ns` is more than that before
    `now_ns` is refused (`too_old`), except a kill switch: it only takes prefixes off, so
    an old one is as safe as a new one.  The config in force read again is never too old.
    """
    if not config.signature:
        return Verdict(REFUSE, "unsigned", "config is unsigned")
    if signature_error is not None:
        return Verdict(REFUSE, "bad_signature", signature_error)
    if config.pop != pop:
        return Verdict(REFUSE, "wrong_pop", f"config is for POP {config.pop!r}, this agent serves {pop!r}")
    if config.target_hosts and host not in config.target_hosts:  # a staged-rollout wave for other hosts
        return Verdict(IGNORE, "not_targeted", f"config v{config.version} targets other hosts of {pop}")
    if config.version == applied_version and config.signature == applied_signature:
        return Verdict(UNCHANGED, "", f"version {config.version} already applied")
    if config.version <= applied_version:
        return Verdict(REFUSE, "stale", f"config version {config.version} is not newer than applied {applied_version}")
    if max_age_ns > 0 and not config.kill_switch and now_ns - config.created_at_ns > max_age_ns:
        age = (now_ns - config.created_at_ns) / 1e9
        return Verdict(
            REFUSE,
            "too_old",
            f"config v{config.version} was signed {_age_text(age)} ago, more than --max-config-age "
            f"{_age_text(max_age_ns / 1e9)} (created_at_ns {config.created_at_ns})",
        )
    return Verdict(ACCEPT)


def _age_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


class InvalidConfig(DynccError, ValueError):
    """A config entry the agent will not turn into a route."""


def canonical_prefix(text: str) -> IPNetwork:
    """The network of a prefix's canonical text; InvalidConfig (the contract's shape rule) otherwise."""
    problem, net = shape_problem(text)
    if net is None:
        assert problem is not None
        raise InvalidConfig(f"bad prefix: {problem[1]}")
    return net


#: EdgePolicy's refusal reasons (metric labels)
REFUSAL_REASONS = ("builtin", "denied", "not_allowed")


@dataclass(frozen=True)
class EdgePolicy:
    """The prefixes this edge refuses to route, whoever signed the config."""

    allow: RangeSet = field(default_factory=lambda: RangeSet(()))
    deny: RangeSet = field(default_factory=lambda: RangeSet(()))

    @classmethod
    def from_texts(cls, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> EdgePolicy:
        """From CIDR texts (the agent's --allow / --deny); ValueError names a bad one."""
        return cls(RangeSet(parse_ranges(allow, "--allow range")), RangeSet(parse_ranges(deny, "--deny range")))

    def problem(self, prefix: str) -> tuple[str, str] | None:
        """(reason, why) when this edge refuses the canonical `prefix`, else None."""
        net = ipaddress.ip_network(prefix)
        builtin = builtin_problem(net)
        if builtin is not None:
            return "builtin", builtin[1]
        hit = self.deny.overlapping(net)
        if hit is not None:
            return "denied", f"{prefix} overlaps --deny range {hit}"
        if self.allow and self.allow.covering(net) is None:
            shown = ", ".join(str(r) for r in self.allow.ranges[:5]) + (", ..." if len(self.allow) > 5 else "")
            return "not_allowed", f"{prefix} is outside the --allow ranges ({shown})"
        return None

    def split(self, wanted: Mapping[str, Wanted]) -> tuple[dict[str, Wanted], dict[str, tuple[str, str]]]:
        """(the prefixes this edge routes, {refused prefix: (reason, why)})."""
        kept: dict[str, Wanted] = {}
        refused: dict[str, tuple[str, str]] = {}
        for prefix, want in wanted.items():
            problem = self.problem(prefix)
            if problem is None:
                kept[prefix] = want
            else:
                refused[prefix] = problem
        return kept, refused


def parse_wanted(config: CongestionConfig, available_algorithms: Iterable[str] | None) -> dict[str, Wanted]:
    """The desired prefixes of an accepted config; InvalidConfig on the first bad entry."""
    if config.kill_switch:
        return {}
    available = set(available_algorithms) if available_algorithms is not None else None
    wanted: dict[str, Wanted] = {}
    for entry in config.entries:
        canonical_prefix(entry.prefix)
        if entry.prefix in wanted:
            raise InvalidConfig(f"duplicate prefix {entry.prefix}")
        if not entry.algorithm or not entry.algorithm.isascii() or not entry.algorithm.isprintable():
            raise InvalidConfig(f"bad algorithm {entry.algorithm!r} for {entry.prefix}")
        if available is not None and entry.algorithm not in available:
            raise InvalidConfig(
                f"algorithm {entry.algorithm!r} for {entry.prefix} is not available on this host "
                f"(available: {' '.join(sorted(available)) or 'none'})"
            )
        wanted[entry.prefix] = Wanted(entry.prefix, entry.algorithm, entry.lock, config.switch_threshold_bytes)
    return wanted


# ------------------------------------------------------------- route derivation


def nexthop_of(rec: RouteRecord) -> Nexthop:
    return Nexthop(
        family=rec.family,
        gateway=rec.gateway,
        oif=rec.oif,
        prefsrc=rec.prefsrc,
        nh_id=rec.nh_id,
        scope=rec.scope,
        priority=rec.priority,
        metrics=rec.metrics,
        lock=rec.lock & ~CC_ALGO_LOCK_BIT,
    )


def route_of(rec: RouteRecord) -> Route:
    """An installed owned route as the agent models it."""
    return Route(rec.prefix, nexthop_of(rec), rec.cc_algo or "", bool(rec.lock & CC_ALGO_LOCK_BIT))


@dataclass
class TableView:
    """The main table split into our routes and everyone else's."""

    owned: dict[str, Route]
    duplicates: list[Route]  # a second owned route for an already-seen prefix
    foreign: list[RouteRecord]


def split_table(records: Iterable[RouteRecord], proto: int, table: int = RT_TABLE_MAIN) -> TableView:
    view = TableView({}, [], [])
    for rec in records:
        if rec.table != table or rec.flags & RTM_F_CLONED:
            continue
        if rec.proto == proto:
            route = route_of(rec)
            if route.prefix in view.owned:
                view.duplicates.append(route)
            else:
                view.owned[route.prefix] = route
        else:
            view.foreign.append(rec)
    return view


def _priority(rec: RouteRecord) -> int:
    return rec.priority or 0


class CoveringIndex:
    """Longest-prefix match over foreign (not owned) routes, per family."""

    def __init__(self, foreign: Iterable[RouteRecord]) -> None:
        self._by_len: dict[int, dict[int, dict[int, RouteRecord]]] = {
            socket.AF_INET: {},
            socket.AF_INET6: {},
        }
        for rec in foreign:
            if rec.tos or rec.src_len or rec.family not in self._by_len:
                continue
            key = int.from_bytes(socket.inet_pton(rec.family, rec.dst))
            slot = self._by_len[rec.family].setdefault(rec.dst_len, {})
            best = slot.get(key)
            if best is None or _priority(rec) < _priority(best):
                slot[key] = rec
        self._lengths = {fam: sorted(d, reverse=True) for fam, d in self._by_len.items()}

    def exact(self, net: NetKey) -> RouteRecord | None:
        family, addr, prefixlen = net
        return self._by_len[family].get(prefixlen, {}).get(addr)

    def covering(self, net: NetKey) -> RouteRecord | None:
        """The longest strictly shorter foreign route containing `net`."""
        family, addr, prefixlen = net
        width = 32 if family == socket.AF_INET else 128
        for length in self._lengths[family]:
            if length >= prefixlen:
                continue
            mask = ((1 << length) - 1) << (width - length) if length else 0
            rec = self._by_len[family][length].get(addr & mask)
            if rec is not None:
                return rec
        return None


def make_plan(view: TableView, wanted: Mapping[str, Wanted]) -> Plan:
    """Desired owned set for `wanted` given today's table, and the diff to get there."""
    index = CoveringIndex(view.foreign)
    target: dict[str, Route] = {}
    skipped: dict[str, str] = {}
    for prefix, want in wanted.items():
        net = net_key(prefix)
        clash = index.exact(net)
        if clash is not None:
            skipped[prefix] = f"conflict: foreign route for {prefix} (proto {clash.proto})"
            continue
        cover = index.covering(net)
        if cover is None:
            skipped[prefix] = "no covering route"
            continue
        if cover.rtype != RTN_UNICAST:
            skipped[prefix] = f"covering route {cover.prefix} is {RTN_NAMES.get(cover.rtype, cover.rtype)}"
            continue
        if cover.unsupported:
            uses = "/".join(cover.unsupported)
            skipped[prefix] = f"covering route {cover.prefix} uses {uses} (unsupported)"
            continue
        target[prefix] = Route(prefix, nexthop_of(cover), want.algorithm, want.lock)
    remove, add, keep = diff_owned(view.owned, target)
    remove.extend(view.duplicates)
    return Plan(target=target, remove=remove, add=add, keep=keep, skipped=skipped)


def diff_owned(
    current: Mapping[str, Route], target: Mapping[str, Route]
) -> tuple[list[Route], list[Route], list[Route]]:
    """(remove, add, keep) turning `current` into exactly `target`; a changed route is removed then added."""
    remove = [route for prefix, route in current.items() if target.get(prefix) != route]
    add = [route for prefix, route in target.items() if current.get(prefix) != route]
    keep = [route for prefix, route in target.items() if current.get(prefix) == route]
    return remove, add, keep


def verify_readback(expected: Mapping[str, Route], view: TableView, limit: int = 20) -> list[str]:
    """Differences between what we meant to install and what the kernel holds (empty = OK)."""
    errors: list[str] = []
    for prefix, want in expected.items():
        got = view.owned.get(prefix)
        if got is None:
            errors.append(f"{prefix}: owned route missing after write")
        elif not got.algorithm:
            errors.append(f"{prefix}: route has no congestion control (RTAX_CC_ALGO dropped)")
        elif got != want:
            errors.append(
                f"{prefix}: read back {got.algorithm} {got.nexthop.describe()}, "
                f"wanted {want.algorithm} {want.nexthop.describe()}"
            )
    errors.extend(f"{prefix}: unexpected owned route" for prefix in view.owned if prefix not in expected)
    errors.extend(f"{r.prefix}: duplicate owned route" for r in view.duplicates)
    if len(errors) > limit:
        errors = [*errors[:limit], f"... and {len(errors) - limit} more"]
    return errors
