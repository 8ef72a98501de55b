"""Validation of a generated config before anything is published.

Pure functions, no I/O.  The generated config is treated as untrusted input:
`validate()` returns every reason it must not be published (empty = valid).
Each reason is "code: detail"; the codes are stable (tests and dashboards use
them):

    bad_pop                  POP name empty or not [A-Za-z0-9_.-]
    version_not_increasing   version <= the last published version of the POP
    kill_switch_with_entries a kill-switch config must be empty
    invalid_prefix           not an IP network at all
    not_canonical            host bits set / non-canonical spelling (ip_network(strict=True) + str())
    default_route            /0
    host_route               /32 (IPv4) or /128 (IPv6)
    bad_length               not the configured length (default /24 IPv4, /56 IPv6)
    denied                   overlaps a denied range (configured --deny, or built in)
    duplicate                the same prefix more than once (a duplicated query row)
    algorithm_not_allowed    algorithm outside the allowed set
    algorithm_not_available  some agent of the POP does not report the algorithm available
    over_cap                 more entries than the per-POP cap
    change_too_large         more changes than allowed this round (see below)

Change limit: the number of changed prefixes (added + removed + algorithm/lock
changed, against the last published POP-wide config; a trial's or a watch's switchback toggles
of prefixes that passed a canary not counted) must be
<= floor(max_change_fraction * max(previous entry count, change_floor)).
Defaults 0.5 and 200: from an empty POP at most 100 prefixes go in per round,
after that at most half of the current set changes per round.  A rejected
round publishes nothing, so a larger change needs the operator to raise the
limits (`--max-change-fraction`, `--change-floor`) for that round.

Availability: the algorithms every agent of the POP reports available
(intersection of their latest `available_congestion_controls`).  When no agent
of the POP has reported yet (`available=None`) only the allowed set applies:
the first config is what brings agents to report, and an agent lacking an
algorithm fails the whole apply (all-or-nothing) and reports it.

Deny overlap is checked both ways: a prefix inside a denied range, or a
denied range (e.g. an anycast /32) inside a prefix.  Built-in denied ranges
(loopback, link-local, multicast, unspecified, reserved, IPv4-mapped) can never
be client prefixes.  The prefix shape and the built-in ranges are the contract's
(schemas/prefix_rules.py): the edge agent refuses the same prefixes again.
"""

from __future__ import annotations

import functools
import ipaddress
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controller.rollout.generate import diff_entries
from controller.rollout.settings import RolloutSettings, parse_deny
from dyncc_common.names import POP_NAME
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry
from schemas.prefix_rules import BUILTIN_DENY, RangeSet, shape_problem

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
__all__ = ["BUILTIN_DENY", "ValidationPolicy", "prefix_problem", "refusal", "validate"]

MAX_EXAMPLES = 5  # per reason code; the rest are counted


def _algorithm_set(names: str) -> frozenset[str]:
    """--allowed-algorithms "bbr,cubic" -> {"bbr", "cubic"}."""
    return frozenset(a.strip() for a in names.split(",") if a.strip())


@dataclass(frozen=True)
class ValidationPolicy:
    """The validation section of RolloutSettings, in the form validate() takes (defaults: the table's)."""

    v4_length: int = RolloutSettings.v4_length
    v6_length: int = RolloutSettings.v6_length
    deny: tuple[IPNetwork, ...] = parse_deny(RolloutSettings.deny)
    max_per_pop: int = RolloutSettings.max_per_pop
    max_change_fraction: float = RolloutSettings.max_change_fraction
    change_floor: int = RolloutSettings.change_floor
    allowed_algorithms: frozenset[str] = _algorithm_set(RolloutSettings.allowed_algorithms)
    check_change: bool = True

    @classmethod
    def from_settings(cls, settings: RolloutSettings) -> ValidationPolicy:
        return cls(
            v4_length=settings.v4_length,
            v6_length=settings.v6_length,
            deny=parse_deny(settings.deny),
            max_per_pop=settings.max_per_pop,
            max_change_fraction=settings.max_change_fraction,
            change_floor=settings.change_floor,
            allowed_algorithms=_algorithm_set(settings.allowed_algorithms),
        )

    def denied_ranges(self) -> tuple[IPNetwork, ...]:
        return BUILTIN_DENY + self.deny

    @functools.cached_property
    def denied(self) -> RangeSet:
        """Every denied range (built in, then --deny), asked by interval."""
        return RangeSet(self.denied_ranges())

    def change_limit(self, previous_count: int) -> int:
        return int(self.max_change_fraction * max(previous_count, self.change_floor))


@dataclass
class _Reasons:
    by_code: dict[str, list[str]] = field(default_factory=dict)

    def add(self, code: str, detail: str) -> None:
        self.by_code.setdefault(code, []).append(detail)

    def render(self) -> list[str]:
        out = []
        for code, details in self.by_code.items():
            for detail in details[:MAX_EXAMPLES]:
                out.append(f"{code}: {detail}")
            if len(details) > MAX_EXAMPLES:
                out.append(f"{code}: ... and {len(details) - MAX_EXAMPLES} more")
        return out


def prefix_problem(text: str, policy: ValidationPolicy) -> tuple[str, str] | None:
    """Why validation refuses the prefix `text` as (code, detail), or None when it may be published.

    The one per-prefix rule: `validate` applies it to every entry of a config, and the
    controller applies it before a config is built (controller/scoring/decide.py) so a
    refused prefix is dropped with its reason instead of rejecting the POP's whole config.
    """
    problem, net = shape_problem(text)  # schemas/prefix_rules.py: the agent checks the same shape
    if net is None:
        return problem
    want = policy.v4_length if net.version == 4 else policy.v6_length
    if net.prefixlen != want:
        return "bad_length", f"{text} is /{net.prefixlen}, IPv{net.version} prefixes must be /{want}"
    hit = policy.denied.overlapping(net)
    if hit is not None:
        return "denied", f"{text} overlaps denied range {hit}"
    return None


def _check_prefix(entry: PrefixEntry, policy: ValidationPolicy, reasons: _Reasons) -> None:
    problem = prefix_problem(entry.prefix, policy)
    if problem is not None:
        reasons.add(*problem)


def validate(
    config: CongestionConfig,
    *,
    previous: Sequence[PrefixEntry] | None,
    last_version: int,
    available: frozenset[str] | None,
    policy: ValidationPolicy,
    toggles: frozenset[str] = frozenset(),
) -> list[str]:
    """Every reason `config` must not be published; [] when it is valid.

    previous: the entries of the POP's last published POP-wide config (None = skip
    the change limit, e.g. for a rollback to a known-good state).
    last_version: the highest version published for the POP (0 = none).
    available: algorithms every agent of the POP reports (None = no agent reported).
    toggles: prefixes whose change is a trial's or a watch's switchback toggle of a prefix that
    already passed a canary (controller/rollout/engine.py): not counted against the change limit,
    since a switchback changes about half its prefixes every round by design.
    """
    reasons = _Reasons()
    if not POP_NAME.match(config.pop):
        reasons.add("bad_pop", f"POP name {config.pop!r} must match {POP_NAME.pattern}")
    if config.version <= last_version:
        reasons.add(
            "version_not_increasing", f"version {config.version} is not above the last published {last_version}"
        )
    if config.kill_switch and len(config.entries):
        reasons.add("kill_switch_with_entries", f"kill-switch config has {len(config.entries)} entries")

    counts = Counter(e.prefix for e in config.entries)
    for prefix, n in counts.items():
        if n > 1:
            reasons.add("duplicate", f"{prefix} appears {n} times")
    seen: set[str] = set()
    for entry in config.entries:
        if entry.prefix in seen:
            continue
        seen.add(entry.prefix)
        _check_prefix(entry, policy, reasons)

    algorithms = Counter(e.algorithm for e in config.entries)
    for algorithm, n in sorted(algorithms.items()):
        if algorithm not in policy.allowed_algorithms:
            reasons.add(
                "algorithm_not_allowed",
                f"{algorithm!r} ({n} prefixes) is not in the allowed set {sorted(policy.allowed_algorithms)}",
            )
        elif available is not None and algorithm not in available:
            reasons.add(
                "algorithm_not_available",
                f"{algorithm!r} ({n} prefixes) is not available on every agent of the POP "
                f"(all have {sorted(available)})",
            )

    if len(counts) > policy.max_per_pop:
        reasons.add("over_cap", f"{len(counts)} prefixes exceed the per-POP cap {policy.max_per_pop}")

    if policy.check_change and previous is not None:
        diff = diff_entries(previous, config.entries)
        limit = policy.change_limit(len({e.prefix for e in previous}))
        exempt = sum(p in toggles for p in diff.prefixes)
        if diff.total - exempt > limit:
            toggled = f", {exempt} switchback toggles not counted" if exempt else ""
            reasons.add(
                "change_too_large",
                f"{diff.total - exempt} changes ({diff.summary()}{toggled}) exceed the limit {limit} "
                f"({policy.max_change_fraction:g} x max({len(previous)} previous, "
                f"floor {policy.change_floor}))",
            )
    return reasons.render()


REFUSAL_CACHE = 1 << 16  # prefixes whose answer a long-running controller remembers


def refusal(policy: ValidationPolicy) -> Callable[[str], str | None]:
    """The per-prefix rule of validation as decide()'s `refuse`: "why" or None.

    Answers are cached (LRU): a controller keeps one per policy, so each round asks
    only about candidates it has not seen before.
    """

    @functools.lru_cache(maxsize=REFUSAL_CACHE)
    def refuse(prefix: str) -> str | None:
        problem = prefix_problem(prefix, policy)
        return None if problem is None else problem[1]

    return refuse
