"""Tunable definitions of the controller's scoring and decisions: the ScoringSettings settings table.

One frozen settings object (dyncc_common.settings): each field is a row (flag, TOML key,
default, help) of `dyncc control`, which nests it as a part.  Plain data plus validation,
no I/O: an inconsistent combination is a ConfigError (one line) when the object is built.
Durations are seconds (min_rtt_ms: milliseconds).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from controller.statistics.source import ROLLUP_BUCKET_SECONDS, ROLLUP_MIN_BYTES, CacheSource
from dyncc_common.errors import ConfigError
from dyncc_common.settings import BOOL, DURATION, FLOAT, INT, STR, Settings, setting

__all__ = ["DECISIONS", "ROLLUP_BUCKET_SECONDS", "ROLLUP_MIN_BYTES", "SCORING", "ScoringSettings"]

SCORING = "scoring definitions"
DECISIONS = "decisions"


def _whole_seconds(value: float, what: str) -> float:
    if value != int(value):
        raise ConfigError(f"bad {what} {value:g}s: --bucket and --lookback must be whole seconds")
    return value


def _seconds(value: Any) -> int:
    return int(value)


def _ms(value: Any) -> float:
    return float(value) * 1000


@dataclasses.dataclass(frozen=True)
class ScoringSettings(Settings):
    """Definitions of the controller's scoring and decisions."""

    bucket_seconds: int = setting(
        "5m", DURATION, "bucket length; not 5m reads raw tcpinfo (lab clock)", section=SCORING, flag="--bucket",
        validator=_whole_seconds, convert=_seconds,
    )  # fmt: skip
    lookback_seconds: int = setting(
        "3h", DURATION, "scoring window (36 buckets of 5m)", section=SCORING, flag="--lookback",
        validator=_whole_seconds, convert=_seconds,
    )  # fmt: skip
    min_bytes: int = setting(
        ROLLUP_MIN_BYTES, INT, "a flow qualifies when bytes_acked > this (not 102400 reads raw tcpinfo)",
        section=SCORING,
    )  # fmt: skip
    include_app_limited: bool = setting(
        False, BOOL, "count app-limited samples (the server had no data to send) as qualifying; by default "
        "they are left out", section=SCORING,
    )  # fmt: skip
    min_samples: int = setting(
        5, INT, "qualifying samples for a prefix to count in a bucket (scoring's min_samples)", section=SCORING,
        flag="--min-bucket-samples",
    )  # fmt: skip
    threshold_quantile: float = setting(0.2, FLOAT, "per-bucket bad threshold quantile", section=SCORING)
    incremental: bool = setting(
        True, BOOL, "score from the per-prefix state kept between rounds (a round reads the buckets that "
        "changed); off: re-read the whole window every round (windows over 64 buckets always do)", section=SCORING,
    )  # fmt: skip
    min_buckets: int = setting(12, INT, "counted buckets needed to be scored", section=SCORING)
    min_duty: float = setting(0.6, FLOAT, "share of counted buckets a prefix must be bad in", section=SCORING)
    max_flap: float = setting(0.3, FLOAT, "most good/bad changes between buckets, as a share", section=SCORING)
    min_rtt_ms: float = setting(
        "10ms", DURATION, "median min_rtt below this: low-RTT, stays on CUBIC", section=SCORING, flag="--min-rtt",
        convert=_ms,
    )  # fmt: skip
    holdout_fraction: float = setting(
        0.10, FLOAT, "fraction of candidates kept as control group", section=DECISIONS, flag="--holdout"
    )
    min_hold_seconds: int = setting(
        "1h", DURATION, "minimum time on BBR (since its trial kept it, or its selection with trials off) before "
        "the watch or a quiet spell may revert it", section=DECISIONS, flag="--min-hold",
        convert=_seconds,
    )  # fmt: skip
    cooldown_seconds: int = setting(
        "24h", DURATION, "block re-selection this long after a revert", section=DECISIONS, flag="--cooldown",
        convert=_seconds,
    )  # fmt: skip
    revert_margin: float = setting(
        0.05, FLOAT, "the watch reverts a prefix on BBR when its holdback interval lies below -this (BBR worse by "
        "more than this share)", section=DECISIONS,
    )  # fmt: skip
    max_per_pop: int = setting(1000, INT, "cap of prefixes on BBR per POP", section=DECISIONS, flag="--max-bbr-per-pop")
    max_new_per_round: int = setting(
        100, INT, "max new selections per POP and round", section=DECISIONS, flag="--max-new"
    )
    algorithm: str = setting("bbr", STR, "congestion control of selected prefixes", section=DECISIONS)
    expire_seconds: int = setting(
        "7d", DURATION, "release prefixes not seen for this long", section=DECISIONS, flag="--expire",
        convert=_seconds,
    )  # fmt: skip
    holdout_salt: str = dataclasses.field(default="dyncc-holdout-v1", init=False)  # not a setting

    @property
    def lookback_buckets(self) -> int:
        return self.lookback_seconds // self.bucket_seconds

    @property
    def cache_source(self) -> CacheSource:
        """The per-bucket statistics these settings score (controller/statistics/source.py)."""
        return CacheSource(self.bucket_seconds, self.min_bytes, self.include_app_limited)

    @property
    def source(self) -> str:
        """Names the statistics' definition in the scoring_cache cache (CacheSource.name)."""
        return self.cache_source.name

    @property
    def uses_rollup(self) -> bool:
        """The 5-minute rollup serves the default definitions; anything else reads raw tcpinfo."""
        return self.cache_source.uses_rollup

    def __post_init__(self) -> None:
        if self.bucket_seconds < 1:
            raise ConfigError(f"bucket must be at least 1 s, got {self.bucket_seconds} s")
        if self.lookback_seconds % self.bucket_seconds:
            raise ConfigError(
                f"lookback {self.lookback_seconds} s is not a whole number of {self.bucket_seconds} s buckets"
            )
        if self.lookback_buckets < 2:
            raise ConfigError("lookback must span at least 2 buckets")
        if not 1 <= self.min_buckets <= self.lookback_buckets:
            raise ConfigError(
                f"min-buckets {self.min_buckets} must be between 1 and the {self.lookback_buckets} "
                "buckets of the lookback"
            )
        if self.min_samples < 1:
            raise ConfigError("min-samples must be at least 1")
        if self.min_bytes < 0:
            raise ConfigError("min-bytes must not be negative")
        for name in ("threshold_quantile", "min_duty", "max_flap", "holdout_fraction", "revert_margin"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name.replace('_', '-')} must be within [0, 1], got {value}")
        if self.threshold_quantile >= 1.0:
            raise ConfigError("threshold-quantile must be below 1")
        if self.max_per_pop < 0 or self.max_new_per_round < 0:
            raise ConfigError("caps must not be negative")
        if self.min_hold_seconds < 0 or self.cooldown_seconds < 0:
            raise ConfigError("min-hold and cooldown must not be negative")
        if self.min_rtt_ms < 0:
            raise ConfigError("min-rtt must not be negative")
