"""Plain data shared by the lab's modules: per-round control outcomes and the scoring knobs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from controller.evidence.settings import EvidenceSettings
from controller.scoring.settings import ROLLUP_BUCKET_SECONDS, ScoringSettings
from dyncc.lab.settings import LabSettings

DAY_BUCKETS = 24 * 3600 // ROLLUP_BUCKET_SECONDS  # one day, in 5-minute buckets
EXPIRE_BUCKETS = 7 * DAY_BUCKETS  # scoring's 7-day expiry, in buckets


@dataclass(frozen=True)
class PrefixScore:
    pop: str
    counted_buckets: int
    duty_cycle: float
    flap_ratio: float
    min_rtt_ms: float
    decision: str
    reason: str = ""
    algorithm: str = ""  # the arm of a trial round ("bbr" / "cubic"); bbr for select / keep


@dataclass
class ControlOutcome:
    scores: dict[str, PrefixScore]
    routes: dict[str, dict[str, str]]  # edge host -> owned route prefix -> congctl
    note: str = ""


@dataclasses.dataclass(frozen=True)
class LabScoring:
    """The lab's scoring knobs, in buckets (one bucket = one lab round); the defaults of the knobs
    `dyncc lab` has flags for are LabSettings'.

    threshold_quantile 0 (LabSettings: None): derived from the layout (dyncc.lab.loop.threshold_for)."""

    lookback_buckets: int = LabSettings.lookback_buckets
    min_buckets: int = LabSettings.min_buckets
    threshold_quantile: float = 0.0
    holdout_fraction: float = LabSettings.holdout
    min_hold_buckets: int = LabSettings.min_hold_buckets
    cooldown_buckets: int = DAY_BUCKETS
    max_new: int = LabSettings.max_new
    min_samples: int = 2
    trial_blocks: int = LabSettings.trial_blocks  # a trial's blocks at most

    def evidence_settings(self, open_loop: bool = False) -> EvidenceSettings:
        """The lab's trial settings: the controller's, with `trial_blocks` blocks (`open_loop`: a
        replay, whose recorded arms need not be the ones its rounds ask)."""
        min_blocks = min(EvidenceSettings.trial_min_blocks, self.trial_blocks)
        cfg = EvidenceSettings(trial_blocks=self.trial_blocks, trial_min_blocks=min_blocks)
        return cfg.for_replay() if open_loop else cfg

    def scoring_settings(self, bucket_seconds: int) -> ScoringSettings:
        """The controller's scoring settings with these knobs, a bucket lasting `bucket_seconds`."""
        return ScoringSettings(
            bucket_seconds=bucket_seconds,
            lookback_seconds=bucket_seconds * self.lookback_buckets,
            min_buckets=self.min_buckets,
            min_samples=self.min_samples,
            threshold_quantile=self.threshold_quantile or ScoringSettings.threshold_quantile,
            holdout_fraction=self.holdout_fraction,
            min_hold_seconds=self.min_hold_buckets * bucket_seconds,
            cooldown_seconds=self.cooldown_buckets * bucket_seconds,
            max_new_per_round=self.max_new,
            expire_seconds=EXPIRE_BUCKETS * bucket_seconds,
        )
