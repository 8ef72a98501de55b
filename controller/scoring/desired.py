"""The controller's decision for one POP: which prefixes get which algorithm.

Produced by scoring (controller/scoring/round.py), consumed by config generation,
validation and publishing (controller/rollout/), which answers with a PublishOutcome
per POP (controller/store/outcomes.py, the outcome vocabulary).  Plain data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DesiredEntry:
    prefix: str  # canonical CIDR: 198.51.100.0/24, 2001:db8:0:100::/56
    algorithm: str  # "bbr" (or another allowed algorithm)
    duty_cycle: float
    flap_ratio: float
    median_delivery_rate: float  # bytes/s
    median_min_rtt_ms: float
    reason: str  # "select" / "keep" ... and why, for people


@dataclass
class DesiredState:
    pop: str
    round_id: str
    round_time_ns: int
    entries: list[DesiredEntry] = field(default_factory=list)
    # prefixes in a running trial (not started this round) -> the trial's start (ns): a change of
    # only these, each already on BBR in a POP-wide config since its trial began, is a switchback
    # toggle of validated prefixes and skips the canary wave (controller/rollout/engine.py)
    trial_prefixes: dict[str, int] = field(default_factory=dict)
