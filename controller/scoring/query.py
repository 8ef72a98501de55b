"""Run the scoring SQL (sql/queries/scoring_*.sql) on a store and return DataFrames.

The SQL does the heavy part inside ClickHouse 18.16 / chDB.  Per round:
  1. refresh: per (pop, bucket) sample counts in the source (the 5-minute rollup,
     or raw tcpinfo when the bucket / qualifying threshold differ from the
     rollup's) are compared with the scoring_cache cache; buckets that are new
     or changed get their per-prefix statistics recomputed into the cache (only
     the newest bucket or two in steady state: merging millions of quantile
     states every round is what makes a full rescore slow).  The newest
     RECHECK_BUCKETS buckets are re-checked against the source each round, and
     one slice of RECHECK_BUCKETS older ones in turn, so late data for any bucket
     of the window is folded in within a few rounds;
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

import datetime as dt
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from controller.scoring.flaps import MASK_BUCKETS, flap_ratio, transitions
from controller.scoring.frames import by_pop_prefix, columns_of, frame
from controller.scoring.settings import ScoringSettings
from controller.store.sql import query, splice, strip_comments, values_list

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

log = logging.getLogger("dyncc.scoring")

T = TypeVar("T")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
REFRESH_CHUNK = 4  # (pop, bucket)s per cache INSERT
RECHECK_BUCKETS = 6  # the newest buckets compared with the source every round (late data)


@dataclass(frozen=True)
class Window:
    """The lookback window [start, end): whole buckets ending at the last bucket boundary."""

    start: dt.datetime
    end: dt.datetime
    bucket_seconds: int

    @property
    def buckets(self) -> int:
        return int((self.end - self.start).total_seconds()) // self.bucket_seconds


def epoch_seconds(when: dt.datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int((when - EPOCH).total_seconds())


def from_epoch(seconds: int) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=int(seconds))


def window_for(now: dt.datetime, cfg: ScoringSettings) -> Window:
    """The window that a round at `now` scores (the bucket in progress is left out)."""
    now_s = epoch_seconds(now)
    end = from_epoch(now_s - now_s % cfg.bucket_seconds)
    return Window(end - dt.timedelta(seconds=cfg.lookback_seconds), end, cfg.bucket_seconds)


@dataclass(frozen=True)
class CacheKey:
    pop: str
    bucket_ts: int  # epoch seconds of the bucket start
    version: int


def base_params(cfg: ScoringSettings, window: Window, pop: str) -> dict[str, Any]:
    return {
        "pop": pop,
        "source": cfg.source,
        "start": window.start,
        "end": window.end,
        "bucket_seconds": cfg.bucket_seconds,
        "min_bytes": cfg.min_bytes,
        "include_app_limited": cfg.include_app_limited,
        "min_samples": cfg.min_samples,
        "threshold_quantile": float(cfg.threshold_quantile),
        "min_rtt_us": float(cfg.min_rtt_ms * 1000.0),
    }


def _counts(store: Store, sql: str, p: dict[str, Any]) -> list[tuple[Any, ...]]:
    df = store.query_df(sql, p)
    if df.empty:
        return []
    pops = [v.decode() if isinstance(v, bytes) else str(v) for v in df["pop"]]
    buckets = [epoch_seconds(_to_datetime(v)) for v in df["bucket"]]
    extra = [df[c].astype("int64").tolist() for c in df.columns if c not in ("pop", "bucket")]
    return list(zip(pops, buckets, *extra, strict=True))


def _to_datetime(value: Any) -> dt.datetime:
    import pandas as pd

    ts = pd.Timestamp(value)
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.to_pydatetime()


def refresh(store: Store, cfg: ScoringSettings, window: Window, pop: str, version: int) -> list[CacheKey]:
    """Bring the scoring_cache cache up to date for the window; return the current keys.

    The newest `RECHECK_BUCKETS` buckets are compared with the source every round
    (late data), and one slice of the older ones in turn (`older_slice`): a late batch for an
    older bucket of the window is folded in within a few rounds, never lost.  The whole window
    is checked while some bucket of it was never looked at.
    """
    p = {**base_params(cfg, window, pop), "version": version}
    cached: dict[tuple[str, int], tuple[int, int]] = {}
    for pop_, bucket, ver, samples in _counts(store, strip_comments(query("scoring_cached")), p):
        if (pop_, bucket) not in cached or ver > cached[(pop_, bucket)][0]:
            cached[(pop_, bucket)] = (ver, samples)
    recheck_start = window.end - dt.timedelta(seconds=RECHECK_BUCKETS * cfg.bucket_seconds)
    first = epoch_seconds(window.start)
    pops_known = {k[0] for k in cached} if not pop else {pop}
    complete = bool(pops_known) and all(
        (p_, first + i * cfg.bucket_seconds) in cached
        for p_ in pops_known
        for i in range(window.buckets - RECHECK_BUCKETS)
    )
    fresh_sql = strip_comments(query(f"scoring_fresh_{_kind(cfg)}"))
    checked = [(max(recheck_start, window.start), window.end)] if complete else [(window.start, window.end)]
    if complete:  # and one older slice per round, in turn: late data far behind is folded in too
        checked.append(older_slice(window, cfg.bucket_seconds))
    fresh = {(r[0], r[1]): r[2] for a, b in checked for r in _counts(store, fresh_sql, {**p, "start": a, "end": b})}
    if complete and {k[0] for k in fresh} - pops_known:  # a new POP: check its whole window
        complete, checked = False, [(window.start, window.end)]
        fresh = {(r[0], r[1]): r[2] for r in _counts(store, fresh_sql, p)}
    spans = [(epoch_seconds(a), epoch_seconds(b)) for a, b in checked]
    for key, (_, samples) in cached.items():  # buckets that vanished from the source: empty now
        if any(a <= key[1] < b for a, b in spans) and key not in fresh and samples:
            fresh[key] = 0
    if not complete:  # remember the empty buckets too, so the full check is not repeated
        for p_ in pops_known | {k[0] for k in fresh}:
            for i in range(window.buckets):
                fresh.setdefault((p_, first + i * cfg.bucket_seconds), 0)
    stale = sorted(k for k, n in fresh.items() if k not in cached or cached[k][1] != n)
    insert, source = query("scoring_refresh_insert"), query(f"scoring_refresh_{_kind(cfg)}")
    for i in range(0, len(stale), REFRESH_CHUNK):
        chunk = stale[i : i + REFRESH_CHUNK]
        with_data = [k for k in chunk if fresh[k]]
        if with_data:  # a few buckets per INSERT bound the memory of merging their states
            keys = values_list(with_data)  # at most REFRESH_CHUNK tuples
            sql = splice(insert, {"source": splice(source, {"keys": keys})})
            on_every_shard(store, lambda shard: shard.execute(sql, p))  # noqa: B023 - called at once
        _record_versions(store, cfg, chunk, version, [fresh[k] for k in chunk])
    if stale:
        log.debug("scoring cache: recomputed %d (pop, bucket)s", len(stale))
    current = {k: v for k, (v, n) in cached.items() if n}
    current.update({k: version for k in stale if fresh[k]})
    return sorted((CacheKey(k[0], k[1], v) for k, v in current.items()), key=lambda k: (k.pop, k.bucket_ts))


def older_slice(window: Window, bucket_seconds: int) -> tuple[dt.datetime, dt.datetime]:
    """The older buckets a round re-checks besides the newest RECHECK_BUCKETS: the window's
    buckets before those, in slices of RECHECK_BUCKETS taken in turn by the bucket number of the
    window's end, so every bucket of the window is compared with the source at least once every
    ceil((buckets - RECHECK_BUCKETS) / RECHECK_BUCKETS) rounds."""
    older = max(0, window.buckets - RECHECK_BUCKETS)
    if older == 0:
        return window.start, window.start
    slices = -(-older // RECHECK_BUCKETS)
    turn = (epoch_seconds(window.end) // bucket_seconds) % slices
    start = window.start + dt.timedelta(seconds=turn * RECHECK_BUCKETS * bucket_seconds)
    end = min(
        start + dt.timedelta(seconds=RECHECK_BUCKETS * bucket_seconds),
        window.start + dt.timedelta(seconds=older * bucket_seconds),
    )
    return start, end


def on_every_shard(store: Store, op: Callable[[Store], T]) -> list[T]:
    """op on each shard's store (its own rows), at the same time on a cluster; on one server, op on
    the store itself."""
    shards = store.shard_stores()
    if len(shards) == 1:
        return [op(shards[0])]
    with ThreadPoolExecutor(max_workers=len(shards)) as pool:
        return list(pool.map(op, shards))


def _record_versions(
    store: Store, cfg: ScoringSettings, keys: list[tuple[str, int]], version: int, samples: list[int]
) -> None:
    store.insert_columns(
        "scoring_versions",
        {
            "pop": [k[0] for k in keys],
            "source": [cfg.source] * len(keys),
            "bucket": np.array([k[1] for k in keys], dtype="int64").astype("datetime64[s]"),
            "version": np.full(len(keys), version, dtype="uint64"),
            "samples": np.array(samples, dtype="uint64"),
        },
    )


def _kind(cfg: ScoringSettings) -> str:
    """The source of scoring_fresh_*.sql and scoring_refresh_*.sql: tcpinfo_5m, tcpinfo_5m_nal or raw tcpinfo."""
    if not cfg.uses_rollup:
        return "raw"
    return "rollup" if cfg.include_app_limited else "rollup_nal"


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


def drop_old_cache(store: Store, window: Window, keep_days: int = 2) -> None:
    """Drop scoring_cache partitions (days) older than the window minus keep_days, on every shard."""
    cutoff = (window.start - dt.timedelta(days=keep_days)).strftime("%Y%m%d")

    def drop(shard: Store) -> None:
        for (partition,) in shard.query_rows(query("scoring_cache_partitions"), {"db": shard.database}):
            text = str(partition).strip("'")
            if text.isdigit() and text < cutoff:
                shard.execute(query("scoring_drop_cache_partition"), {"partition": int(text)})

    on_every_shard(store, drop)


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
