"""Run the scoring SQL (sql/queries/scoring_*.sql) on a store and return DataFrames.

The SQL does the heavy part inside ClickHouse 18.16 / chDB.  Per round:
  1. refresh: the scoring_cache cache brought up to date for the window
     (controller/statistics/cache.py: only new or changed buckets are computed; a
     `dyncc ingest` keeper has usually computed them already as data arrived);
  2. score: thresholds per (pop, bucket), bad/good, duty cycle and flap ratio per
     prefix from the cache (scoring_timeline.sql, scoring_prefixes.sql: per prefix two
     bitmasks of its counted and bad buckets, the flaps counted from them in
     controller/scoring/flaps.py; a window of more than 64 buckets, which the masks
     cannot hold, takes scoring_prefixes_long.sql, which counts them in SQL).
A prefix is one client network: the source rows of its socket families (an IPv4
client on IPv4 and on IPv6 sockets, ::ffff:a.b.c.d, has the same IPv4 prefix)
are merged, and `family` is the prefix's (2 or 10, from its text).
App-limited samples (tcpinfo.app_limited) are not qualifying unless
cfg.include_app_limited: the default 5-minute source is then the tcpinfo_5m_nal
rollup (migration 009) instead of tcpinfo_5m, the raw source filters on the flag,
and cfg.source (the cache key) differs between the two.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from controller.scoring.flaps import MASK_BUCKETS, flap_ratio, transitions
from controller.scoring.frames import by_pop_prefix, columns_of, frame
from controller.scoring.settings import ScoringSettings
from controller.statistics import cache
from controller.statistics.cache import CacheKey
from controller.statistics.source import Window
from controller.store.sql import query, splice, values_list

if TYPE_CHECKING:
    import datetime as dt

    import pandas as pd

    from controller.store import Store

log = logging.getLogger("dyncc.scoring")


def window_for(now: dt.datetime, cfg: ScoringSettings) -> Window:
    """The window that a round at `now` scores (the bucket in progress is left out)."""
    return Window.ending_before(now, cfg.bucket_seconds, cfg.lookback_seconds)


def refresh(store: Store, cfg: ScoringSettings, window: Window, pop: str, version: int) -> list[CacheKey]:
    """The scoring cache brought up to date for the round's window (controller/statistics/cache.py);
    the current (pop, bucket, version)s."""
    return cache.refresh(store, cfg.cache_source, window, pop, version)


def base_params(cfg: ScoringSettings, window: Window, pop: str) -> dict[str, Any]:
    return {
        **cache.params(cfg.cache_source, window, pop),
        "min_samples": cfg.min_samples,
        "threshold_quantile": float(cfg.threshold_quantile),
        "min_rtt_us": float(cfg.min_rtt_ms * 1000.0),
    }


def timeline_sql(keys: list[CacheKey]) -> str:
    """scoring_timeline.sql for the current cache keys: one tuple per (pop, bucket) of the window.

    Bounded by the configuration (POPs x lookback / bucket), not by the data.
    """
    versions = values_list([(k.pop, k.bucket_ts, k.version) for k in keys])
    return splice(query("scoring_timeline"), {"versions": versions})


def packs_masks(window: Window) -> bool:
    """Whether one bitmask per prefix holds the window's buckets (scoring_prefixes.sql)."""
    return window.buckets <= MASK_BUCKETS


def prefixes_sql(keys: list[CacheKey], window: Window) -> str:
    name = "scoring_prefixes" if packs_masks(window) else "scoring_prefixes_long"
    return splice(query(name), {"timeline": timeline_sql(keys)})


def score_prefixes(store: Store, cfg: ScoringSettings, window: Window, pop: str, keys: list[CacheKey]) -> pd.DataFrame:
    """One row per (pop, prefix) seen in the window (sql/queries/scoring_prefixes*.sql)."""
    if not keys:
        return normalize_scores(None)
    df = store.query_df(prefixes_sql(keys, window), base_params(cfg, window, pop))
    if packs_masks(window) and len(df):
        changes = transitions(df["counted_mask"].to_numpy(), df["bad_mask"].to_numpy(), window.buckets)
        df = df.assign(transitions=changes, flap_ratio=flap_ratio(changes, df["counted_buckets"].to_numpy()))
    return normalize_scores(df)


def prefix_timeline(
    store: Store, cfg: ScoringSettings, window: Window, pop: str, prefix: str, keys: list[CacheKey]
) -> pd.DataFrame:
    """The bucket timeline of one prefix: statistic, threshold, counted, bad and its qualifying
    app-limited samples (for explain)."""
    import pandas as pd

    if not keys:
        return pd.DataFrame()
    flagged = query("scoring_prefix_app_limited_rollup" if cfg.uses_rollup else "scoring_prefix_app_limited_raw")
    sql = splice(query("scoring_prefix_timeline"), {"timeline": timeline_sql(keys), "app_limited": flagged})
    return store.query_df(sql, {**base_params(cfg, window, pop), "prefix": prefix})


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
    "low_rtt_buckets": "int64",
}


def normalize_scores(df: pd.DataFrame | None) -> pd.DataFrame:
    """Same dtypes from both back ends (chDB and clickhouse-driver differ), sorted by pop, prefix."""
    columns, _ = by_pop_prefix(columns_of(df, SCORE_COLUMNS))
    return frame(columns)
