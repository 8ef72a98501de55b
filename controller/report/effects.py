"""Difference in differences (DiD) of a low-percentile metric, treated versus holdout, with a
cluster-bootstrap confidence interval.  Pure: numpy and pandas, no I/O.

Input (`stats`): one row per (pop, prefix, grp, phase) with `samples` (how many samples the
prefix had in that phase) and `value` (the prefix's statistic in that phase, e.g. its p10
delivery rate or p10 goodput); grp is "treated" or "holdout", phase "before" or "after" the
round in which the prefix entered its group (sql/queries/report_effect_*.sql).

Definition (log form).  A prefix counts when it has at least `min_samples` samples and a
positive value in both phases.  Its change is d = ln(after / before), so each prefix is its
own baseline.  A group's change is the mean of d over its prefixes; the estimate is

    DiD_log = mean(d | treated) - mean(d | holdout)
    effect  = exp(DiD_log) - 1 = G_treated / G_holdout - 1

where G is the geometric mean of the group's after/before ratios: the ratio form
(T_after / T_before) / (H_after / H_before) - 1 with each group's after/before taken prefix by
prefix.  With two periods this is the two-way fixed-effects DiD on log values.  +0.25 means the
treated prefixes' metric rose 25 % more (multiplicatively) than the holdout's.

Uncertainty: a percentile cluster bootstrap over prefixes.  Each of `resamples` (RESAMPLES)
replicates draws the treated prefixes with replacement from the treated ones and the holdout
prefixes from the holdout ones (keeping each prefix's before and after together) and
recomputes DiD_log; the interval is its 2.5th and 97.5th percentiles, mapped to the effect
scale.  The generator is seeded (SEED) and the rows are sorted first, so the same data give
the same interval on every store.  With few prefixes in a group the interval understates the
uncertainty: `note` says so; with one prefix in a group there is no interval (nan bounds), as a
bootstrap over one prefix has no spread.

A result that cannot be computed carries `reason` instead of an estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

GROUPS = ("treated", "holdout")
ALL = "all POPs"
RESAMPLES = 2000
SEED = 20240501
LEVEL = 0.95
MIN_SAMPLES = 5  # per prefix and phase
FEW_PREFIXES = 5  # per group: below this the interval is marked as rough
_CHUNK = 1 << 22  # bootstrap indices drawn per block (bounds memory for large groups)


@dataclass(frozen=True)
class GroupCounts:
    """One group's prefixes and samples as the estimate used them."""

    grp: str
    prefixes: int  # prefixes counted (both phases, enough samples)
    samples_before: int  # samples of the counted prefixes
    samples_after: int
    no_before: int  # prefixes with data after entering the group but none before (in the window)
    no_after: int  # prefixes with data before but none after
    too_few: int  # both phases, but fewer than min_samples (or a non-positive value) in one
    change: float  # geometric mean of after/before - 1 over the counted prefixes; nan if none


@dataclass(frozen=True)
class Did:
    """The DiD of one metric for one scope (a POP or ALL)."""

    scope: str
    treated: GroupCounts
    holdout: GroupCounts
    estimate: float | None  # effect scale: exp(DiD_log) - 1; None when it cannot be computed
    ci_low: float | None  # None without an estimate; nan when a group has one prefix (no interval)
    ci_high: float | None
    reason: str = ""  # why there is no estimate; "" when there is one
    note: str = ""  # a caveat about the interval
    resamples: int = RESAMPLES
    seed: int = SEED

    @property
    def ok(self) -> bool:
        return self.estimate is not None

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None and math.isfinite(self.ci_low)


def prefix_changes(stats: pd.DataFrame, min_samples: int = MIN_SAMPLES) -> dict[str, tuple[np.ndarray, GroupCounts]]:
    """Per group: the array of d = ln(after/before) in (pop, prefix) order, and its counts."""
    import pandas as pd

    out: dict[str, tuple[np.ndarray, GroupCounts]] = {}
    for grp in GROUPS:
        g = stats[stats["grp"] == grp] if len(stats) else stats
        codes, keys = (
            pd.factorize(g["pop"].astype(str) + "\x00" + g["prefix"].astype(str), sort=True) if len(g) else ((), ())
        )
        size = len(keys)
        n_b, n_a, v_b, v_a = np.zeros(size), np.zeros(size), np.full(size, math.nan), np.full(size, math.nan)
        if size:
            codes = np.asarray(codes)
            phase = g["phase"].to_numpy()
            samples = g["samples"].to_numpy(dtype="float64")
            value = g["value"].to_numpy(dtype="float64")
            for is_phase, n, v in ((phase == "before", n_b, v_b), (phase == "after", n_a, v_a)):
                n[codes[is_phase]] = samples[is_phase]
                v[codes[is_phase]] = value[is_phase]
        has_b, has_a = n_b > 0, n_a > 0
        good = (n_b >= min_samples) & (n_a >= min_samples) & np.isfinite(v_b) & np.isfinite(v_a) & (v_b > 0) & (v_a > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.log(v_a[good] / v_b[good])
        counts = GroupCounts(
            grp=grp,
            prefixes=int(good.sum()),
            samples_before=int(n_b[good].sum()),
            samples_after=int(n_a[good].sum()),
            no_before=int((has_a & ~has_b).sum()),
            no_after=int((has_b & ~has_a).sum()),
            too_few=int((has_a & has_b & ~good).sum()),
            change=float(math.exp(d.mean()) - 1) if len(d) else math.nan,
        )
        out[grp] = (d, counts)
    return out


def bootstrap_means(d: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` means of `d` resampled with replacement (drawn in blocks of bounded size)."""
    n = len(d)
    out = np.empty(resamples)
    step = max(1, _CHUNK // max(1, n))
    for start in range(0, resamples, step):
        k = min(step, resamples - start)
        out[start : start + k] = d[rng.integers(0, n, size=(k, n))].mean(axis=1)
    return out


def _reason(counts: GroupCounts, known: int | None, min_samples: int) -> str:
    grp = counts.grp
    if known == 0:
        return f"no {grp} prefixes: no round put a prefix in the {grp} group by the end of the window"
    if counts.prefixes > 0:
        return ""
    if counts.no_before + counts.no_after + counts.too_few == 0:
        return f"no {grp} prefix has data in the window"
    if counts.no_after + counts.too_few == 0:
        return f"no before data: every {grp} prefix entered its group before the window (or had no data before)"
    if counts.no_before + counts.too_few == 0:
        return f"no after data: no {grp} prefix has data after it entered its group"
    return f"no {grp} prefix has >= {min_samples} samples both before and after it entered its group"


def did(
    stats: pd.DataFrame,
    scope: str = ALL,
    known: Mapping[str, int] | None = None,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_samples: int = MIN_SAMPLES,
    level: float = LEVEL,
) -> Did:
    """The DiD of `stats` (see the module docstring) with its bootstrap interval, or the reason.

    `known`: prefixes per group regardless of data (from the groups query), to tell "no holdout
    at all" from "holdouts without data".
    """
    changes = prefix_changes(stats, min_samples)
    (d_t, treated), (d_h, holdout) = changes["treated"], changes["holdout"]
    for counts in (treated, holdout):
        why = _reason(counts, None if known is None else known.get(counts.grp, 0), min_samples)
        if why:
            return Did(scope, treated, holdout, None, None, None, reason=why, resamples=resamples, seed=seed)
    point = float(d_t.mean() - d_h.mean())
    single = [c.grp for c in (treated, holdout) if c.prefixes < 2]
    if single:
        which = "the treated and holdout groups have" if len(single) == 2 else f"the {single[0]} group has"
        note = f"no interval: {which} one prefix (a bootstrap over one prefix has no spread)"
        return Did(
            scope, treated, holdout, math.expm1(point), math.nan, math.nan, note=note, resamples=resamples, seed=seed
        )
    rng = np.random.default_rng(seed)
    boot = bootstrap_means(d_t, resamples, rng) - bootstrap_means(d_h, resamples, rng)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    few = min(treated.prefixes, holdout.prefixes)
    note = ""
    if few < FEW_PREFIXES:
        note = f"only {few} prefixes in a group: the interval understates the uncertainty"
    return Did(
        scope,
        treated,
        holdout,
        math.expm1(point),
        math.expm1(float(lo)),
        math.expm1(float(hi)),
        note=note,
        resamples=resamples,
        seed=seed,
    )


def did_by_pop(
    stats: pd.DataFrame,
    pops: Sequence[str],
    groups: pd.DataFrame | None = None,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_samples: int = MIN_SAMPLES,
) -> list[Did]:
    """One Did per POP in `pops`, then one over all of them (ALL) when there are several.

    `stats` as for did(); `groups` (pop, grp per prefix: the groups query) tells a group
    that never existed from one without data.  A prefix of the ALL scope is its (pop, prefix).
    """
    out = []
    scopes: list[tuple[str, list[str]]] = [(pop, [pop]) for pop in pops]
    if len(pops) > 1:
        scopes.append((ALL, list(pops)))
    for scope, members in scopes:
        sub = stats[stats["pop"].isin(members)] if len(stats) else stats
        known = None
        if groups is not None:
            g = groups[groups["pop"].isin(members)] if len(groups) else groups
            known = {grp: int((g["grp"] == grp).sum()) if len(g) else 0 for grp in GROUPS}
        out.append(did(sub, scope, known, resamples=resamples, seed=seed, min_samples=min_samples))
    return out
