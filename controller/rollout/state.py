"""Staged rollout: state, canary choice and wave gates.  Pure functions, no I/O.

Per POP the rollout is a small state machine persisted in `rollout_waves`
(controller/rollout/records.py) and driven by controller/rollout/engine.py:

    idle ──(desired state differs from stable)──> canary ──(gate passed)──> rest ──> idle
                                                     │                        │
                                                     └──(gate failed)─────────┴──> rollback ──> idle
    any ──(kill switch)──> killed ──(release)──> idle

- canary: the new entries are published with target_hosts = the canary hosts
  (Kafka key "<pop>/canary"); every other host ignores that config.
- gate (canary): every canary host reports success for the wave version
  (APPLIED/UNCHANGED with applied_version >= wave version) before the wave
  timeout, no canary host reports a failure for it (FAILED_ROLLED_BACK/REFUSED),
  their latest health since the wave began is within thresholds (available
  memory, load1), and after the soak time (counted from the last success
  report received) the p10 delivery rate of their qualifying flows has not
  fallen by more than the allowed fraction (before window: the baseline
  period up to the wave start; after window: from the apply to now).
- rest: the same entries published POP-wide (new version, target_hosts
  empty, key "<pop>"); done when every known host reported success.  A host
  failing or unhealthy here also rolls back; hosts that never report within
  the wave timeout are listed and the wave completes (a dead host must not
  block the POP).
- rollback: the stable (previous) entries re-published POP-wide as a new,
  higher version (agents only accept increasing versions).  The failed
  desired state is not retried for a hold-down time unless it changes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from controller.rollout.settings import RolloutSettings

SUCCESS_RESULTS = frozenset({"APPLIED", "UNCHANGED"})
FAILURE_RESULTS = frozenset({"FAILED_ROLLED_BACK", "REFUSED"})

IDLE, CANARY, REST, KILLED = "idle", "canary", "rest", "killed"


@dataclass(frozen=True)
class RolloutState:
    pop: str
    phase: str = IDLE
    event: str = ""
    rollout_id: str = ""
    stable_version: int = 0  # POP-wide version every host should hold (0 = none yet)
    candidate_version: int = 0  # first version carrying the entries being rolled out
    wave_version: int = 0  # version published for the current wave
    wave_hosts: tuple[str, ...] = ()
    wave_started_ns: int = 0
    candidate_fingerprint: str = ""
    failed_fingerprint: str = ""  # last desired state that failed its gate (hold-down)
    failed_at_ns: int = 0
    reason: str = ""
    updated_ns: int = 0

    def moved(self, **changes: object) -> RolloutState:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class HostReport:
    host: str
    version: int
    applied_version: int
    result: str
    errors: tuple[str, ...] = ()
    mem_available_bytes: int = 0
    load1: float = 0.0
    available_cc: tuple[str, ...] = ()
    reported_ns: int = 0
    received_ns: int = 0


def seconds_to_ns(seconds: float) -> int:
    """A duration setting (seconds) in the nanoseconds the state machine counts."""
    return int(seconds * 1e9)


@dataclass(frozen=True)
class GateThresholds:
    """The wave gates of RolloutSettings, durations in ns (defaults: the table's)."""

    soak_ns: int = seconds_to_ns(RolloutSettings.soak)
    wave_timeout_ns: int = seconds_to_ns(RolloutSettings.wave_timeout)
    min_mem_available: int = RolloutSettings.min_mem_available
    max_load1: float = RolloutSettings.max_load
    max_p10_regression: float = RolloutSettings.max_p10_regression
    min_samples: int = RolloutSettings.min_samples
    baseline_ns: int = seconds_to_ns(RolloutSettings.baseline)

    @classmethod
    def from_settings(cls, settings: RolloutSettings) -> GateThresholds:
        return cls(
            soak_ns=seconds_to_ns(settings.soak),
            wave_timeout_ns=seconds_to_ns(settings.wave_timeout),
            min_mem_available=settings.min_mem_available,
            max_load1=settings.max_load,
            max_p10_regression=settings.max_p10_regression,
            min_samples=settings.min_samples,
            baseline_ns=seconds_to_ns(settings.baseline),
        )


@dataclass
class WaveCheck:
    status: str  # waiting | failed | reported
    reasons: list[str] = field(default_factory=list)
    succeeded: dict[str, HostReport] = field(default_factory=dict)  # first success report per host
    missing: list[str] = field(default_factory=list)

    @property
    def last_success_received_ns(self) -> int:
        return max((r.received_ns for r in self.succeeded.values()), default=0)


@dataclass(frozen=True)
class WindowStats:
    samples: int
    p10: float


def choose_canary(pop: str, hosts: Iterable[str], configured: Iterable[str], fraction: float) -> list[str]:
    """Configured canary hosts that are known, else a stable hash-chosen ceil(fraction*n) (>= 1)."""
    known = sorted(set(hosts))
    if not known:
        return []
    chosen = sorted(set(configured) & set(known))
    if chosen:
        return chosen
    count = min(len(known), max(1, math.ceil(fraction * len(known))))
    ranked = sorted(known, key=lambda h: hashlib.sha256(f"{pop}/{h}".encode()).hexdigest())
    return sorted(ranked[:count])


def health_problems(report: HostReport, th: GateThresholds) -> list[str]:
    problems = []
    # 0 means "not reported" (an agent that cannot read /proc/meminfo), not "no memory".
    if 0 < report.mem_available_bytes < th.min_mem_available:
        problems.append(
            f"{report.host}: available memory {report.mem_available_bytes / 2**20:.0f} MiB "
            f"< {th.min_mem_available / 2**20:.0f} MiB"
        )
    if report.load1 > th.max_load1:
        problems.append(f"{report.host}: load1 {report.load1:.2f} > {th.max_load1:g}")
    return problems


def check_wave(
    wave_version: int,
    wave_hosts: Sequence[str],
    wave_started_ns: int,
    reports: Sequence[HostReport],
    now_ns: int,
    th: GateThresholds,
    *,
    missing_fails: bool,
) -> WaveCheck:
    """Judge a wave from the reports received since it began (oldest first).

    missing_fails: hosts that did not report within the wave timeout fail the
    wave (canary) or are only listed (rest).
    """
    check = WaveCheck(status="reported")
    by_host: dict[str, list[HostReport]] = {}
    for report in reports:
        by_host.setdefault(report.host, []).append(report)
    for host in sorted(set(wave_hosts)):
        mine = by_host.get(host, [])
        failures = [r for r in mine if r.version == wave_version and r.result in FAILURE_RESULTS]
        if failures:
            errors = "; ".join(failures[-1].errors[:3]) or "no error text"
            check.reasons.append(f"{host}: {failures[-1].result} for version {wave_version} ({errors})")
            continue
        success = next((r for r in mine if r.result in SUCCESS_RESULTS and r.applied_version >= wave_version), None)
        if success is None:
            check.missing.append(host)
            continue
        check.succeeded[host] = success
        check.reasons.extend(health_problems(mine[-1], th))
    if check.reasons:
        check.status = "failed"
        return check
    if check.missing:
        timed_out = now_ns - wave_started_ns >= th.wave_timeout_ns
        if not timed_out:
            check.status = "waiting"
        elif missing_fails:
            check.status = "failed"
            check.reasons.append(
                f"no success report for version {wave_version} within "
                f"{th.wave_timeout_ns / 1e9:g}s from {', '.join(check.missing)}"
            )
    return check


def soak_remaining_ns(check: WaveCheck, now_ns: int, th: GateThresholds) -> int:
    return max(0, check.last_success_received_ns + th.soak_ns - now_ns)


def judge_p10(before: WindowStats, after: WindowStats, th: GateThresholds) -> tuple[bool, str]:
    """(passed, why).  Too few samples in either window is not judged (passes, and says so)."""
    if before.samples < th.min_samples or after.samples < th.min_samples:
        return True, (
            f"p10 delivery rate not judged: {before.samples} samples before, {after.samples} after "
            f"(need {th.min_samples})"
        )
    floor = before.p10 * (1.0 - th.max_p10_regression)
    change = (after.p10 / before.p10 - 1.0) * 100 if before.p10 > 0 else 0.0
    text = (
        f"p10 delivery rate {before.p10 / 1e6:.3f} -> {after.p10 / 1e6:.3f} MB/s ({change:+.1f}%, "
        f"allowed -{th.max_p10_regression * 100:g}%)"
    )
    return after.p10 >= floor, text


def known_hosts(latest: Mapping[str, HostReport], inventory: Iterable[str]) -> list[str]:
    return sorted(set(latest) | set(inventory))


def available_algorithms(latest: Mapping[str, HostReport]) -> frozenset[str] | None:
    """Algorithms every reporting host has; None when no host reported (see rollout/validate.py)."""
    sets = [frozenset(r.available_cc) for r in latest.values() if r.available_cc]
    if not sets:
        return None
    common = sets[0]
    for s in sets[1:]:
        common &= s
    return common
