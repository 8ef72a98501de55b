"""The controller's decision for one POP: which prefixes get which algorithm.

Produced by scoring (controller/scoring*), consumed by config generation,
validation and publishing (controller/config*, controller/publisher).  Plain
data, no I/O.
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
