"""Run the scoring SQL (sql/queries/scoring_*.sql) on a store and return DataFrames.

The SQL does the heavy part inside ClickHouse 18.16 / chDB: per-bucket prefix
statistics, the per-(pop, bucket) threshold, bad/good, and the per-prefix duty
cycle and flap ratio.  The 5-minute rollup is read when the configuration matches
it (ScoringConfig.uses_rollup); otherwise raw tcpinfo is bucketed on the fly.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controller.scoring_config import ScoringConfig
from controller.sql_files import query

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Window:
    """The lookback window [start, end): whole buckets ending at the last bucket boundary."""

    start: dt.datetime
    end: dt.datetime
    bucket_seconds: int

    @property
    def buckets(self) -> int:
        return int((self.end - self.start).total_seconds()) // self.bucket_seconds


def window_for(now: dt.datetime, cfg: ScoringConfig) -> Window:
    """The window that a round at `now` scores (the bucket in progress is left out)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    epoch_s = int((now - EPOCH).total_seconds())
    end_s = epoch_s - epoch_s % cfg.bucket_seconds
    end = EPOCH + dt.timedelta(seconds=end_s)
    return Window(end - dt.timedelta(seconds=cfg.lookback_seconds), end, cfg.bucket_seconds)


def _strip_comments(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def vectors_sql(cfg: ScoringConfig) -> str:
    """Per-prefix vectors, thresholds and scores (sql/queries/scoring_vectors.sql)."""
    source = query("scoring_source_rollup" if cfg.uses_rollup else "scoring_source_raw")
    return _strip_comments(query("scoring_vectors")).replace("{source}", _strip_comments(source))


def prefixes_sql(cfg: ScoringConfig) -> str:
    """Per-prefix scores only (sql/queries/scoring_prefixes.sql)."""
    return _strip_comments(query("scoring_prefixes")).replace("{vectors}", vectors_sql(cfg))


def params(cfg: ScoringConfig, window: Window, pop: str) -> dict[str, Any]:
    return {
        "pop": pop,
        "start": window.start,
        "end": window.end,
        "rtt_start": window.end - dt.timedelta(seconds=cfg.rtt_lookback_seconds),
        "start_ts": int((window.start - EPOCH).total_seconds()),
        "buckets": window.buckets,
        "bucket_seconds": cfg.bucket_seconds,
        "min_bytes": cfg.min_bytes,
        "min_samples": cfg.min_samples,
        "threshold_quantile": float(cfg.threshold_quantile),
    }


def score_prefixes(store: Store, cfg: ScoringConfig, window: Window, pop: str = "") -> pd.DataFrame:
    """One row per (pop, prefix) seen in the window (see sql/queries/scoring_prefixes.sql)."""
    df = store.query_df(prefixes_sql(cfg), params(cfg, window, pop))
    return normalize_scores(df)


def prefix_vectors(store: Store, cfg: ScoringConfig, window: Window, pop: str, prefix: str) -> pd.DataFrame:
    """The vectors row of one prefix (statistic, threshold, counted, bad per bucket), for explain."""
    sql = f"SELECT * FROM ({vectors_sql(cfg)}) WHERE prefix = %(prefix)s"
    return store.query_df(sql, {**params(cfg, window, pop), "prefix": prefix})


SCORE_COLUMNS: dict[str, str] = {
    "pop": "object",
    "prefix": "object",
    "family": "int64",
    "samples": "int64",
    "qualifying": "int64",
    "counted_buckets": "int64",
    "bad_buckets": "int64",
    "transitions": "int64",
    "duty_cycle": "float64",
    "flap_ratio": "float64",
    "median_delivery_rate": "float64",
    "low_delivery_rate": "float64",
    "median_min_rtt_ms": "float64",
}


def normalize_scores(df: pd.DataFrame) -> pd.DataFrame:
    """Same dtypes from both back ends (chDB and clickhouse-driver differ), sorted by pop, prefix."""
    import pandas as pd

    out = pd.DataFrame({name: df[name] if name in df else [] for name in SCORE_COLUMNS})
    for name, dtype in SCORE_COLUMNS.items():
        if dtype == "object":
            out[name] = out[name].map(_text)
        else:
            out[name] = out[name].astype(dtype)
    return out.sort_values(["pop", "prefix"], kind="stable").reset_index(drop=True)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
