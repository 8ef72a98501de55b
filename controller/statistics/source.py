"""Which per-bucket statistics a cache holds (CacheSource) and the scoring window (Window).

Pure data: the cache's `source` key, the SQL kind that computes it (the 5-minute rollups
tcpinfo_5m / tcpinfo_5m_nal, or raw tcpinfo for another bucket or qualifying threshold), and the
window of whole buckets a round scores.  The scoring settings (controller/scoring/settings.py)
derive their CacheSource; `dyncc ingest` uses the default one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
ROLLUP_BUCKET_SECONDS = 300
ROLLUP_MIN_BYTES = 102_400  # baked into tcpinfo_5m and tcpinfo_5m_nal (sql/migrations/001, 009)
DEFAULT_LOOKBACK_SECONDS = 3 * 3600


def epoch_seconds(when: dt.datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int((when - EPOCH).total_seconds())


def from_epoch(seconds: int) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=int(seconds))


@dataclass(frozen=True)
class Window:
    """The lookback window [start, end): whole buckets ending at the last bucket boundary."""

    start: dt.datetime
    end: dt.datetime
    bucket_seconds: int

    @property
    def buckets(self) -> int:
        return int((self.end - self.start).total_seconds()) // self.bucket_seconds

    @classmethod
    def ending_before(cls, now: dt.datetime, bucket_seconds: int, lookback_seconds: int) -> Window:
        """The window a round at `now` scores (the bucket in progress is left out)."""
        now_s = epoch_seconds(now)
        end = from_epoch(now_s - now_s % bucket_seconds)
        return cls(end - dt.timedelta(seconds=lookback_seconds), end, bucket_seconds)


@dataclass(frozen=True)
class CacheSource:
    """The definition of a cache's per-bucket statistics: bucket length, qualifying threshold,
    and whether app-limited samples count.  The defaults are the default scoring's."""

    bucket_seconds: int = ROLLUP_BUCKET_SECONDS
    min_bytes: int = ROLLUP_MIN_BYTES
    include_app_limited: bool = False

    @property
    def uses_rollup(self) -> bool:
        """The 5-minute rollup serves the default definitions; anything else reads raw tcpinfo."""
        return self.bucket_seconds == ROLLUP_BUCKET_SECONDS and self.min_bytes == ROLLUP_MIN_BYTES

    @property
    def name(self) -> str:
        """The statistics' name in the cache (scoring_cache.source).

        With include_app_limited it is the name the definition had before app-limited samples
        were left out (the cache then written still serves it); without, ":nal" is added.
        """
        name = "rollup" if self.uses_rollup else f"raw:{self.bucket_seconds}:{self.min_bytes}"
        return name if self.include_app_limited else f"{name}:nal"

    @property
    def kind(self) -> str:
        """The source of scoring_fresh_*.sql and scoring_refresh_*.sql: tcpinfo_5m, tcpinfo_5m_nal
        or raw tcpinfo."""
        if not self.uses_rollup:
            return "raw"
        return "rollup" if self.include_app_limited else "rollup_nal"
