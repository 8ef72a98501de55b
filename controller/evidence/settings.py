"""Settings of the effect model and of per-prefix trials: the EvidenceSettings settings table.

One frozen settings object (dyncc_common.settings), nested as a part of `dyncc control` and
used by the lab and the report, so every effect figure is computed with the same values.
Plain data plus validation, no I/O: a bad combination is a ConfigError (one line).
"""

from __future__ import annotations

import dataclasses

from controller.evidence.model import LEVEL, MIN_BUCKETS, MIN_SAMPLES, PURITY
from dyncc_common.errors import ConfigError
from dyncc_common.settings import FLOAT, INT, STR, Settings, setting

__all__ = ["AT_LIMIT", "EVIDENCE", "EvidenceSettings"]

EVIDENCE = "effects and trials"
AT_LIMIT = ("revert", "keep")


@dataclasses.dataclass(frozen=True)
class EvidenceSettings(Settings):
    """How effects are estimated and how a trial decides."""

    level: float = setting(LEVEL, FLOAT, "confidence level of every effect interval", section=EVIDENCE,
                           flag="--effect-level")  # fmt: skip
    purity: float = setting(
        PURITY, FLOAT, "share of a bucket's samples one congestion control must have for the bucket to count "
        "for that arm (mixed buckets are left out)", section=EVIDENCE,
    )  # fmt: skip
    min_arm_samples: int = setting(
        MIN_SAMPLES, INT, "qualifying samples an arm needs in a bucket for the bucket to count", section=EVIDENCE
    )
    min_arm_buckets: int = setting(
        MIN_BUCKETS, INT, "buckets each arm needs before an effect is estimated", section=EVIDENCE
    )
    trial_blocks: int = setting(
        8, INT, "switchback blocks of a trial at most (0: no trial, a selected prefix goes straight to BBR)",
        section=EVIDENCE,
    )  # fmt: skip
    trial_min_blocks: int = setting(
        4, INT, "blocks before the trial's rule may end it (keep: lower bound > 0, revert: upper bound < 0)",
        section=EVIDENCE,
    )  # fmt: skip
    trial_block_rounds: int = setting(1, INT, "rounds per switchback block", section=EVIDENCE)
    trial_at_limit: str = setting(
        "revert", STR, "decision when the last block ends without a conclusive effect", section=EVIDENCE,
        choices=AT_LIMIT,
    )  # fmt: skip
    trial_max_rounds: int = setting(
        0, INT, "rounds a trial may take before it ends at its limit (0: 3 x trial-blocks x trial-block-rounds)",
        section=EVIDENCE,
    )  # fmt: skip
    trial_salt: str = dataclasses.field(default="dyncc-trial-v1", init=False)  # not a setting

    @property
    def max_rounds(self) -> int:
        return self.trial_max_rounds or 3 * self.trial_blocks * self.trial_block_rounds

    @property
    def trials(self) -> bool:
        return self.trial_blocks > 0

    def __post_init__(self) -> None:
        if not 0.5 <= self.level < 1.0:
            raise ConfigError(f"effect-level must be within [0.5, 1), got {self.level}")
        if not 0.5 < self.purity <= 1.0:
            raise ConfigError(f"purity must be within (0.5, 1], got {self.purity}")
        if self.min_arm_samples < 1:
            raise ConfigError("min-arm-samples must be at least 1")
        if self.min_arm_buckets < 2:
            raise ConfigError("min-arm-buckets must be at least 2 (a variance needs two buckets)")
        if self.trial_blocks < 0 or self.trial_block_rounds < 1:
            raise ConfigError("trial-blocks must not be negative and trial-block-rounds must be at least 1")
        if self.trial_max_rounds < 0:
            raise ConfigError("trial-max-rounds must not be negative")
        if self.trial_blocks and not 2 <= self.trial_min_blocks <= self.trial_blocks:
            raise ConfigError(
                f"trial-min-blocks {self.trial_min_blocks} must be between 2 and trial-blocks {self.trial_blocks}"
            )
