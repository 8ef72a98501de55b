"""The one effect model: how much BBR changed a prefix's low-percentile delivery rate (or
goodput), with its interval and the numbers behind it.  Pure: numpy and pandas in, dataclasses
and frames out, no I/O.  Every effect figure dyncc shows (the trial and revert decisions, the
lab summary, the report, `explain`, the metrics) comes from here; `docs/report.md` defines
each estimand and its assumptions.

Input cells: one row per (pop, prefix, ts, arm) with `samples` (qualifying samples of that
congestion control in the bucket, app-limited ones left out unless the settings include them)
and `value` (their p10; delivery rate or goodput, bytes/s).  `arm` is the socket's
congestion control as collected ("bbr" or "cubic"), never the config.

Per-prefix trial effect (switchback).  A bucket belongs to an arm when at least `purity` of its
qualifying samples ran that arm and it has at least `min_samples` of them (a bucket in which the
edge hosts disagreed on the arm, or old connections outlived a toggle, is left out as mixed).
With y = ln(value) of each arm bucket:

    d = mean(y | bbr) - mean(y | cubic),   effect = exp(d) - 1

and its interval is Welch's t interval at `level` on the log scale, mapped to the effect scale.
Randomised blocks (controller/evidence/trial.py) make the two arms comparable.

Like for like: both arms are the same per-bucket statistic of the same prefix over
interleaved buckets, so a baseline is never a window average over other buckets, and nothing
is judged on a point estimate: a decision needs the interval's bound on one side of zero.

Pooled effect over prefixes: DerSimonian-Laird random effects on the per-prefix d (each
weighted by 1 / (its variance + the between-prefix variance)), a normal interval, and the
smallest effect the data could have detected (two-sided at `level`, 80 % power):
mde = exp((z_level + z_0.8) * se) - 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

BBR, CUBIC = "bbr", "cubic"
ARMS = (BBR, CUBIC)
LEVEL = 0.9
POWER = 0.8
PURITY = 0.8
MIN_SAMPLES = 3  # per bucket and arm
MIN_BUCKETS = 2  # per arm (or phase): a variance needs two


@dataclass(frozen=True)
class Effect:
    """One effect with its interval, or the reason there is none.

    estimate, low, high: on the effect scale (exp(d) - 1); nan without one (see `reason`).
    n_a / n_b: the buckets behind each side (trial: bbr / cubic; DiD: after / before), or for a
    pooled effect the prefixes (n_a) and the trials (n_b).  samples: the samples behind it.
    """

    estimate: float
    low: float
    high: float
    level: float
    d: float  # log scale
    se: float  # log scale
    n_a: int
    n_b: int
    samples: int
    prefixes: int = 1
    mde: float = math.nan
    reason: str = ""

    @property
    def ok(self) -> bool:
        return math.isfinite(self.estimate)

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def text(self) -> str:
        """'+12% [+3%, +22%]' or 'n/a: why'."""
        if not self.ok:
            return f"n/a: {self.reason}"
        if not self.has_interval:
            return f"{pct(self.estimate)} [no interval]"
        return f"{pct(self.estimate)} [{pct(self.low)}, {pct(self.high)}]"


def pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 100:+.0f}%"


def none(reason: str, level: float = LEVEL, n_a: int = 0, n_b: int = 0, samples: int = 0) -> Effect:
    nan = math.nan
    return Effect(nan, nan, nan, level, nan, nan, n_a, n_b, samples, reason=reason)


def t_quantile(p: float, df: float) -> float:
    from scipy.special import stdtrit  # lazy: ~0.5 s cold

    return float(stdtrit(df, p))


def welch(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float, float, float, float]:
    """(d, se, low, high) of mean(a) - mean(b) on the log scale; Welch-Satterthwaite df."""
    d = float(a.mean() - b.mean())
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return d, 0.0, d, d
    df = (va + vb) ** 2 / (
        (va**2 / (len(a) - 1) if len(a) > 1 else 0.0) + (vb**2 / (len(b) - 1) if len(b) > 1 else 0.0)
    )
    t = t_quantile(1 - (1 - level) / 2, max(df, 1.0))
    return d, se, d - t * se, d + t * se


def two_sample(
    a: np.ndarray, b: np.ndarray, samples: int, level: float, min_buckets: int, names: tuple[str, str]
) -> Effect:
    """The effect of side a against side b (log values per bucket), or the reason there is none."""
    if len(a) < min_buckets or len(b) < min_buckets:
        why = f"too few buckets: {len(a)} {names[0]}, {len(b)} {names[1]} (needs {min_buckets} each)"
        return none(why, level, len(a), len(b), samples)
    d, se, lo, hi = welch(a, b, level)
    return Effect(
        math.expm1(d), math.expm1(lo), math.expm1(hi), level, d, se, len(a), len(b), samples, mde=_mde(se, level)
    )


def _mde(se: float, level: float) -> float:
    z = NormalDist().inv_cdf(1 - (1 - level) / 2) + NormalDist().inv_cdf(POWER)
    return math.expm1(z * se) if math.isfinite(se) else math.nan


def arm_buckets(cells: pd.DataFrame, purity: float = PURITY, min_samples: int = MIN_SAMPLES) -> pd.DataFrame:
    """One row per (pop, prefix, ts) bucket that belongs to one arm: pop, prefix, ts, arm,
    samples, value, y = ln(value), and `mixed` rows dropped (see the module docstring).

    `cells`: pop, prefix, ts, arm, samples, value (other arms than bbr / cubic are ignored).
    """
    import pandas as pd

    cols = ["pop", "prefix", "ts", "arm", "samples", "value", "y"]
    if cells is None or cells.empty:
        return pd.DataFrame({c: [] for c in cols})
    c = cells[cells["arm"].isin(ARMS)]
    wide = c.pivot_table(
        index=["pop", "prefix", "ts"], columns="arm", values=["samples", "value"], aggfunc="first"
    ).reset_index()
    wide.columns = ["_".join(str(x) for x in col if x) for col in wide.columns]
    for arm_name in ARMS:
        for what in ("samples", "value"):
            name = f"{what}_{arm_name}"
            if name not in wide:
                wide[name] = 0.0 if what == "samples" else math.nan
    n_b, n_c = wide["samples_bbr"].fillna(0).to_numpy(float), wide["samples_cubic"].fillna(0).to_numpy(float)
    total = n_b + n_c
    arm = np.where(n_b >= purity * total, BBR, np.where(n_c >= purity * total, CUBIC, ""))
    samples = np.where(arm == BBR, n_b, n_c)
    value = np.where(arm == BBR, wide["value_bbr"].to_numpy(float), wide["value_cubic"].to_numpy(float))
    keep = (arm != "") & (samples >= min_samples) & np.isfinite(value) & (value > 0)
    out = pd.DataFrame(
        {
            "pop": wide["pop"].to_numpy()[keep],
            "prefix": wide["prefix"].to_numpy()[keep],
            "ts": wide["ts"].to_numpy()[keep].astype("int64"),
            "arm": arm[keep],
            "samples": samples[keep].astype("int64"),
            "value": value[keep],
        }
    )
    out["y"] = np.log(out["value"].to_numpy(float)) if len(out) else np.zeros(0)
    return out.sort_values(["pop", "prefix", "ts"]).reset_index(drop=True)


def trial_effects(
    buckets: pd.DataFrame,
    windows: dict[tuple[str, str], tuple[int, int]] | None = None,
    level: float = LEVEL,
    min_buckets: int = MIN_BUCKETS,
    bucket_seconds: int = 0,
) -> dict[tuple[str, str], Effect]:
    """Per (pop, prefix) of `buckets` (arm_buckets' rows): the trial effect, bbr against cubic.

    `windows`: (pop, prefix) -> [start, end): the whole buckets inside it count (start <= ts and
    ts + bucket_seconds <= end: the bucket a round falls in is not over yet); with `windows`,
    only its prefixes are returned.
    """
    out: dict[tuple[str, str], Effect] = {}
    if buckets is None or buckets.empty:
        return {k: none("no arm buckets in the trial", level) for k in (windows or {})}
    for (pop, prefix), g in buckets.groupby(["pop", "prefix"], sort=True):
        key = (str(pop), str(prefix))
        if windows is not None:
            if key not in windows:
                continue
            lo, hi = windows[key]
            g = g[(g["ts"] >= lo) & (g["ts"] + max(bucket_seconds, 1) <= hi)]
        arm = g["arm"].to_numpy()
        y = g["y"].to_numpy(float)
        out[key] = two_sample(y[arm == BBR], y[arm == CUBIC], int(g["samples"].sum()), level, min_buckets, ARMS)
    for key in windows or {}:
        out.setdefault(key, none("no arm buckets in the trial", level))
    return out


def pooled(effects: Sequence[Effect], level: float = LEVEL, trials: int | None = None) -> Effect:
    """DerSimonian-Laird random-effects pool of per-prefix effects (those with an estimate and a
    positive standard error); n_a = prefixes pooled, n_b = trials (default: the same)."""
    usable = [e for e in effects if e.ok and math.isfinite(e.se) and e.se > 0]
    samples = sum(e.samples for e in usable)
    k = len(usable)
    n_trials = k if trials is None else trials
    if k == 0:
        why = "no prefix has an effect with an interval" if effects else "no prefix to pool"
        return none(why, level, 0, n_trials, sum(e.samples for e in effects))
    d = np.array([e.d for e in usable])
    v = np.array([e.se**2 for e in usable])
    w = 1 / v
    fixed = float((w * d).sum() / w.sum())
    tau2 = 0.0
    if k > 1:
        q = float((w * (d - fixed) ** 2).sum())
        c = float(w.sum() - (w**2).sum() / w.sum())
        tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    w_star = 1 / (v + tau2)
    mean = float((w_star * d).sum() / w_star.sum())
    se = math.sqrt(1 / float(w_star.sum()))
    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    return Effect(
        math.expm1(mean),
        math.expm1(mean - z * se),
        math.expm1(mean + z * se),
        level,
        mean,
        se,
        k,
        n_trials,
        samples,
        prefixes=k,
        mde=_mde(se, level),
        reason="",
    )


def summary_line(label: str, e: Effect) -> str:
    """'lossy: +61% [+13%, +122%] (90% interval), 7 prefixes, 7 trials, 4,120 samples, smallest
    detectable effect 25%'."""
    if not e.ok:
        return f"{label}: n/a ({e.reason}; {e.n_b} trials, {e.samples:,} samples)"
    return (
        f"{label}: {e.text()} ({e.level * 100:g}% interval), {e.prefixes} prefixes, {e.n_b} trials, "
        f"{e.samples:,} samples, smallest detectable effect {pct(e.mde).lstrip('+')}"
    )
