"""Tunable definitions of the controller's scoring and decisions (defaults from issue 5).

Plain data plus validation; no I/O.  Durations are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLLUP_BUCKET_SECONDS = 300
ROLLUP_MIN_BYTES = 102_400  # baked into tcpinfo_5m (sql/migrations/001_tcpinfo.sql)


class ScoringConfigError(ValueError):
    """An inconsistent scoring configuration; str() is one line for a person."""


@dataclass(frozen=True)
class ScoringConfig:
    bucket_seconds: int = ROLLUP_BUCKET_SECONDS
    lookback_seconds: int = 3 * 3600
    min_bytes: int = ROLLUP_MIN_BYTES  # a flow qualifies when bytes_acked > min_bytes
    min_samples: int = 5  # qualifying samples for a prefix to count in a bucket
    threshold_quantile: float = 0.2  # per (pop, bucket) threshold over prefix statistics
    min_buckets: int = 12  # counted buckets needed to be scored
    min_duty: float = 0.6
    max_flap: float = 0.3
    min_rtt_ms: float = 10.0  # below: low-RTT prefix, stays on CUBIC
    holdout_fraction: float = 0.10
    holdout_salt: str = "dyncc-holdout-v1"
    min_hold_seconds: int = 24 * 3600
    cooldown_seconds: int = 24 * 3600
    revert_margin: float = 0.05  # effect must be worse by more than this fraction
    max_per_pop: int = 1000
    max_new_per_round: int = 100
    algorithm: str = "bbr"

    @property
    def lookback_buckets(self) -> int:
        return self.lookback_seconds // self.bucket_seconds

    @property
    def source(self) -> str:
        """Names the statistics' definition in the scoring_buckets cache."""
        return "rollup" if self.uses_rollup else f"raw:{self.bucket_seconds}:{self.min_bytes}"

    @property
    def uses_rollup(self) -> bool:
        """The 5-minute rollup serves the default definitions; anything else reads raw tcpinfo."""
        return self.bucket_seconds == ROLLUP_BUCKET_SECONDS and self.min_bytes == ROLLUP_MIN_BYTES

    def validate(self) -> ScoringConfig:
        if self.bucket_seconds < 1:
            raise ScoringConfigError(f"bucket must be at least 1 s, got {self.bucket_seconds} s")
        if self.lookback_seconds % self.bucket_seconds:
            raise ScoringConfigError(
                f"lookback {self.lookback_seconds} s is not a whole number of {self.bucket_seconds} s buckets"
            )
        if self.lookback_buckets < 2:
            raise ScoringConfigError("lookback must span at least 2 buckets")
        if not 1 <= self.min_buckets <= self.lookback_buckets:
            raise ScoringConfigError(
                f"min-buckets {self.min_buckets} must be between 1 and the {self.lookback_buckets} "
                "buckets of the lookback"
            )
        if self.min_samples < 1:
            raise ScoringConfigError("min-samples must be at least 1")
        if self.min_bytes < 0:
            raise ScoringConfigError("min-bytes must not be negative")
        for name in ("threshold_quantile", "min_duty", "max_flap", "holdout_fraction", "revert_margin"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ScoringConfigError(f"{name.replace('_', '-')} must be within [0, 1], got {value}")
        if self.threshold_quantile >= 1.0:
            raise ScoringConfigError("threshold-quantile must be below 1")
        if self.max_per_pop < 0 or self.max_new_per_round < 0:
            raise ScoringConfigError("caps must not be negative")
        if self.min_hold_seconds < 0 or self.cooldown_seconds < 0:
            raise ScoringConfigError("min-hold and cooldown must not be negative")
        if self.min_rtt_ms < 0:
            raise ScoringConfigError("min-rtt must not be negative")
        return self
