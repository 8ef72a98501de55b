"""What the rollout engine takes and counts: RolloutConfig (the staged-rollout part of
RolloutSettings, durations in ns) and StepCounters (what one round published, rejected, rolled back)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.rollout.settings import RolloutSettings
from controller.rollout.state import GateThresholds, seconds_to_ns


@dataclass
class RolloutConfig:
    """What the engine takes: the staged-rollout part of RolloutSettings, durations in ns
    (defaults: the table's; `staging` is the table's auto|on|off already decided)."""

    thresholds: GateThresholds = field(default_factory=GateThresholds)
    canary_fraction: float = RolloutSettings.canary_fraction
    canary_hosts: Mapping[str, Sequence[str]] = field(default_factory=dict)
    inventory: Mapping[str, Sequence[str]] = field(default_factory=dict)
    host_expiry_ns: int = seconds_to_ns(RolloutSettings.host_expiry)
    holddown_ns: int = seconds_to_ns(RolloutSettings.holddown)
    republish_after_ns: int = seconds_to_ns(RolloutSettings.republish_after)
    staging: bool = True
    lock: bool = RolloutSettings.lock_cc

    @classmethod
    def from_settings(cls, settings: RolloutSettings) -> RolloutConfig:
        """Reads --inventory when given (ConfigError)."""
        hosts, canary = settings.host_lists()
        return cls(
            thresholds=GateThresholds.from_settings(settings),
            canary_fraction=settings.canary_fraction,
            canary_hosts=canary,
            inventory=hosts,
            host_expiry_ns=seconds_to_ns(settings.host_expiry),
            holddown_ns=seconds_to_ns(settings.holddown),
            republish_after_ns=seconds_to_ns(settings.republish_after),
            staging=settings.staging == "on" or (settings.staging == "auto" and bool(settings.kafka)),
            lock=settings.lock_cc,
        )


@dataclass
class StepCounters:
    published: dict[str, int] = field(default_factory=dict)  # kind -> count
    rejected: int = 0
    rollbacks: int = 0

    def count(self, kind: str) -> None:
        self.published[kind] = self.published.get(kind, 0) + 1
