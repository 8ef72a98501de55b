"""The one effect model: how much BBR changed a prefix's low-percentile delivery rate (or
goodput), with its interval and the numbers behind it.  Pure: numpy and pandas in, dataclasses
and frames out, no I/O.  Every effect figure dyncc shows (the trial and revert decisions, the
lab summary, the report, `explain`, the metrics) comes from here; `docs/report.md` defines
each estimand and its assumptions.

Per-prefix trial effects (switchback) are computed in controller/evidence/switchback.py from
every qualifying sample, with concurrent controls and an anytime-valid confidence sequence
(controller/evidence/sequential.py); they are `Effect`s like the pooled ones here.

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
    pass

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


def _mde(se: float, level: float) -> float:
    z = NormalDist().inv_cdf(1 - (1 - level) / 2) + NormalDist().inv_cdf(POWER)
    return math.expm1(z * se) if math.isfinite(se) else math.nan


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
