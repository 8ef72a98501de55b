"""Settings of the effect model and of per-prefix trials: the EvidenceSettings settings table.

One frozen settings object (dyncc_common.settings), nested as a part of `dyncc control` and
used by the lab and the report, so every effect figure is computed with the same values.
Plain data plus validation, no I/O: a bad combination is a ConfigError (one line).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from controller.evidence.model import LEVEL, MIN_BUCKETS, MIN_SAMPLES, PURITY
from controller.evidence.switchback import GEOMEAN, STATISTICS
from controller.store.decisions import KEEP, REVERT
from dyncc_common.errors import ConfigError
from dyncc_common.settings import BOOL, DURATION, FLOAT, INT, STR, Settings, setting

__all__ = ["AT_LIMIT", "EVIDENCE", "EvidenceSettings"]

EVIDENCE = "effects and trials"


def _seconds(value: object) -> int:
    return int(value)  # type: ignore[call-overload]


AT_LIMIT = (REVERT, KEEP)


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
    statistic: str = setting(
        GEOMEAN, STR, "per-bucket statistic a trial compares: geomean (mean ln rate of every qualifying sample) "
        "or p10 (the bucket's 10th percentile: about 2.9x the sampling variance); docs/report.md", section=EVIDENCE,
        flag="--effect-statistic", choices=STATISTICS,
    )  # fmt: skip
    controls: bool = setting(
        True, BOOL, "subtract the POP's shock in each bucket, from its prefixes outside trials (concurrent controls)",
        section=EVIDENCE, flag="--effect-controls",
    )  # fmt: skip
    cuped: bool = setting(
        True, BOOL, "fit the controls' coefficient on the prefix's own pre-trial buckets (CUPED); off: 1",
        section=EVIDENCE, flag="--effect-cuped",
    )  # fmt: skip
    effect_scale: float = setting(
        0.2, FLOAT, "effect size (ln scale) the anytime-valid trial interval is tightest for", section=EVIDENCE,
    )  # fmt: skip
    trial_blocks: int = setting(
        96, INT, "realized blocks a trial may take at most, half on each arm (96 x 5m = 8 h); inconclusive then: "
        "--trial-at-limit (0: no trial, a selected prefix goes straight to BBR, watched)", section=EVIDENCE,
    )  # fmt: skip
    trial_min_blocks: int = setting(
        4, INT, "realized blocks (two alternating pairs at least) before the trial's rule may end it (keep: lower "
        "bound > 0, revert: upper bound < 0)", section=EVIDENCE,
    )  # fmt: skip
    trial_block_rounds: int = setting(1, INT, "rounds per switchback block", section=EVIDENCE)
    trial_at_limit: str = setting(
        "revert", STR, "decision when a trial reaches its limit without a conclusive effect (revert: back to "
        "CUBIC for --trial-retry, not --cooldown)", section=EVIDENCE, choices=AT_LIMIT,
    )  # fmt: skip
    trial_retry_seconds: int = setting(
        "6h", DURATION, "after an inconclusive trial, the prefix may be selected again after this long",
        section=EVIDENCE, flag="--trial-retry", convert=_seconds,
    )  # fmt: skip
    trial_max_rounds: int = setting(
        0, INT, "rounds a trial may take before it ends at its limit whatever it realized (0: 3 x trial-blocks x "
        "trial-block-rounds)", section=EVIDENCE,
    )  # fmt: skip
    holdback: int = setting(
        4, INT, "a prefix on BBR (kept by its trial, or selected with trials off) runs CUBIC in one bucket of "
        "every block of this many, at a random place, and is reverted when those buckets show BBR worse "
        "(0: not watched)", section=EVIDENCE,
    )  # fmt: skip
    watch_blocks: int = setting(
        2, INT, "holdback blocks the watch judges (its latest ones)", section=EVIDENCE,
    )  # fmt: skip
    trial_salt: str = dataclasses.field(default="dyncc-trial-v1", init=False)  # not a setting
    # not a setting: a replay of recorded telemetry (dyncc/lab/replay.py) cannot make the edge run
    # what its rounds ask, so a bucket counts for the arm its samples ran, asked or not
    open_loop: bool = dataclasses.field(default=False, init=False)

    def replaced(self, **changes: Any) -> EvidenceSettings:
        """dataclasses.replace that keeps `open_loop` (not an init field)."""
        out = dataclasses.replace(self, **changes)
        object.__setattr__(out, "open_loop", self.open_loop)
        return out

    def for_replay(self) -> EvidenceSettings:
        """These settings with open-loop counting (a replay of recorded telemetry)."""
        out = dataclasses.replace(self)
        object.__setattr__(out, "open_loop", True)
        return out

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
        if self.trial_max_rounds < 0 or self.trial_retry_seconds < 0:
            raise ConfigError("trial-max-rounds and trial-retry must not be negative")
        if not 0 < self.effect_scale <= 2:
            raise ConfigError(f"effect-scale must be within (0, 2], got {self.effect_scale}")
        if self.holdback == 1 or self.holdback < 0:
            raise ConfigError("holdback must be 0 (no watch) or at least 2 buckets per block")
        if self.watch_blocks < 2:
            raise ConfigError("watch-blocks must be at least 2 (a variance needs two blocks)")
        if self.trial_max_rounds < 0:
            raise ConfigError("trial-max-rounds must not be negative")
        if self.trial_blocks and not 2 <= self.trial_min_blocks <= self.trial_blocks:
            raise ConfigError(
                f"trial-min-blocks {self.trial_min_blocks} must be between 2 and trial-blocks {self.trial_blocks}"
            )
