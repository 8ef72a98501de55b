"""A plain pandas/numpy reference of the scoring SQL, for tests (and for reading).

Computes from raw samples (time, pop, prefix, family, bytes_acked, delivery_rate,
min_rtt) exactly what sql/queries/scoring_*.sql compute, with ClickHouse's
quantile semantics:
  quantile / quantiles / median   linear interpolation at level * (n - 1)
                                  (reservoir sampler, exact below 8192 values)
  quantileExact(level)            the sorted value at index int(level * n)
Pure functions; no I/O.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from controller.scoring.settings import ScoringSettings
from schemas.addresses import prefix_family

if TYPE_CHECKING:
    import pandas as pd

    from controller.statistics.source import Window


def ch_quantile(values: np.ndarray, level: float) -> float:
    """ClickHouse `quantile(level)` (interpolated) of a small sample; NaN when empty."""
    if len(values) == 0:
        return math.nan
    s = np.sort(np.asarray(values, dtype="float64"))
    index = min(max(level * (len(s) - 1), 0.0), len(s) - 1.0)
    left = int(index)
    if left + 1 == len(s):
        return float(s[left])
    right_coef = index - left
    left_coef = (left + 1) - index
    return float(s[left] * left_coef + s[left + 1] * right_coef)


def ch_quantile_exact(values: np.ndarray, level: float) -> float:
    """ClickHouse `quantileExact(level)`; NaN when empty."""
    if len(values) == 0:
        return math.nan
    s = np.sort(np.asarray(values, dtype="float64"))
    index = int(level * len(s)) if level < 1 else len(s) - 1
    return float(s[index])


def reference_timeline(samples: pd.DataFrame, cfg: ScoringSettings, window: Window) -> pd.DataFrame:
    """Per (pop, bucket, prefix): samples, qualifying, counted, stat, low, rtt, threshold, bad."""
    import pandas as pd

    start = int(window.start.timestamp())
    end = int(window.end.timestamp())
    t = samples["time"].to_numpy(dtype="int64")
    df = samples[(t >= start) & (t < end)].copy()
    df["bucket"] = df["time"].to_numpy(dtype="int64") // cfg.bucket_seconds * cfg.bucket_seconds
    df["qual"] = df["bytes_acked"].to_numpy(dtype="uint64") > cfg.min_bytes
    rows = []
    # one row per client network: both socket families of a prefix together, the prefix's family
    for (pop, bucket, prefix), g in df.groupby(["pop", "bucket", "prefix"], sort=True):
        q = g[g["qual"]]
        rate = q["delivery_rate"].to_numpy(dtype="float64")
        rows.append(
            {
                "pop": pop,
                "bucket": int(str(bucket)),
                "prefix": prefix,
                "family": prefix_family(str(prefix)),
                "samples": len(g),
                "qualifying": len(q),
                "stat": ch_quantile(rate, 0.5),
                "low": ch_quantile(rate, 0.1),
                # floored like the SQL (18.16 returns UInt32 quantiles of UInt32)
                "rtt": math.floor(r) if math.isfinite(r := ch_quantile(q["min_rtt"].to_numpy(), 0.5)) else r,
            }
        )
    out = pd.DataFrame(
        rows,
        columns=["pop", "bucket", "prefix", "family", "samples", "qualifying", "stat", "low", "rtt"],
    )
    out["counted"] = out["qualifying"] >= cfg.min_samples
    thresholds = {
        key: ch_quantile_exact(g.loc[g["counted"], "stat"].to_numpy(), cfg.threshold_quantile)
        for key, g in out.groupby(["pop", "bucket"], sort=False)
    }
    out["threshold"] = [thresholds[(p, b)] for p, b in zip(out["pop"], out["bucket"], strict=True)]
    with np.errstate(invalid="ignore"):
        out["bad"] = out["counted"] & (out["stat"] < out["threshold"])
    return out


def reference_scores(samples: pd.DataFrame, cfg: ScoringSettings, window: Window) -> pd.DataFrame:
    """Per (pop, prefix) scores, the columns of controller.scoring.query.SCORE_COLUMNS."""
    import pandas as pd

    from controller.scoring.query import normalize_scores

    timeline = reference_timeline(samples, cfg, window)
    rows = []
    for (pop, prefix), g in timeline.groupby(["pop", "prefix"], sort=True):
        c = g[g["counted"]].sort_values("bucket")
        flags = c["bad"].to_numpy(dtype=bool)
        counted = len(c)
        bad = int(flags.sum())
        transitions = int((flags[1:] != flags[:-1]).sum()) if counted > 1 else 0
        rows.append(
            {
                "pop": pop,
                "prefix": prefix,
                "family": int(g["family"].iloc[0]),
                "samples": int(g["samples"].sum()),
                "qualifying": int(g["qualifying"].sum()),
                "counted_buckets": counted,
                "bad_buckets": bad,
                "transitions": transitions,
                "duty_cycle": bad / counted if counted else 0.0,
                "flap_ratio": transitions / (counted - 1) if counted > 1 else 0.0,
                "median_delivery_rate": np.floor(c["stat"]).mean() if counted else math.nan,
                "low_delivery_rate": np.floor(c["low"]).mean() if counted else math.nan,
                "median_min_rtt_ms": c["rtt"].mean() / 1000.0 if counted else math.nan,
                "low_rtt_buckets": int((c["rtt"] < cfg.min_rtt_ms * 1000.0).sum()),
            }
        )
    return normalize_scores(pd.DataFrame(rows) if rows else None)
