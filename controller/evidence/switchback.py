"""Switchback effects from every qualifying sample: the trial's and the watch's.  Pure: numpy and
pandas in, `Effect`s out, no I/O.  docs/report.md ("The trial estimator") states the estimand
and its assumptions; this is the one place that computes them.

Input per (pop, prefix, bucket, arm), as sql/queries/evidence_arm_buckets.sql returns it: the
qualifying samples, their p10 and the mean and variance of ln(delivery rate).  A bucket belongs
to an arm when at least `purity` of its samples ran it and it has `min_arm_samples` of them.

The statistic y of a bucket (EvidenceSettings.statistic):
  geomean  the mean of ln(rate) over the bucket's samples (every sample counts once); its
           sampling variance is var / n.  Its effect exp(d) - 1 is the change of the geometric
           mean rate of the qualifying (bulk) flows, which is the change of every percentile,
           the p10 too, when BBR scales the prefix's rate distribution.
  p10      ln(p10) of the bucket's samples; sampling variance 2.92 var / n (the normal
           approximation of a 10th percentile: 0.1 * 0.9 / phi(z_0.1)**2 = 2.92).

Counted buckets: the bucket's realized arm (its samples' own congestion control) is the arm the
trial asked for in that bucket (`asked`: bucket -> arm, from the rounds' decisions).  A bucket that
waited for a canary wave, a held round, a mixed bucket or one with too few samples is not counted.

Concurrent controls and CUPED. `control[ts]` is the POP's shock in the bucket: the mean, over
the POP's prefixes, of their CUBIC bucket's mean ln(rate) minus the mean of their previous
CONTROL_TRAIL CUBIC buckets (sql/queries/evidence_pop_controls.sql, `pop_controls` here): causal
and bounded, so every reader gets the same control for a bucket. A trial's own CUBIC buckets are
among a POP's thousands of prefixes (a 1/N share of its own control, measured in the
simulation). Each bucket's residual is r = y - theta * control; theta is CUPED's coefficient
(Deng et al. 2013) estimated on the prefix's own pre-trial buckets, the PRE_BUCKETS before its
start (cov(y, control) / var(control), within [0, 2]; 1 when fewer than `MIN_PRE` pre-trial
buckets have a control). The pre-trial buckets also give the prefix's between-bucket variance
(var of r beyond sampling), the prior of the pair variance below.

Pairs.  The trial's k-th counted BBR bucket is paired with its k-th counted CUBIC bucket (the
schedule alternates, controller/evidence/trial.py, so they are neighbours in time): slow drift
cancels within a pair and a pair is judged only when both halves ran.  D_k = r_bbr - r_cubic,
d = mean(D), with the pair variance pooled from its model (the buckets' sampling variances plus
twice the between-bucket variance, worth `PRIOR_PAIRS` pairs) and the pairs' own spread, so
samples clustered in buckets and buckets correlated in time are both counted.  The trial's
interval is the anytime-valid confidence sequence of controller/evidence/sequential.py.

The watch (a prefix kept on BBR): in every block of `holdback` buckets one, at a random place, runs
CUBIC (controller/evidence/trial.py `watch_arm`); a block's pair is the mean r of its counted BBR
buckets minus its CUBIC bucket's r; the watch's effect is over its latest `watch_blocks` pairs,
with a fixed-sample interval at `level` (one look per round at a sliding window: a monitor, not
a test; the simulation measures its false-revert rate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from controller.evidence.model import ARMS, BBR, CUBIC, POWER, Effect, none
from controller.evidence.sequential import fixed_radius, mixture_radius, mixture_z

if TYPE_CHECKING:
    import pandas as pd

    from controller.evidence.settings import EvidenceSettings

__all__ = [
    "CONTROL_SPAN",
    "CONTROL_TRAIL",
    "GEOMEAN",
    "P10",
    "PRE_BUCKETS",
    "STATISTICS",
    "Series",
    "pop_controls",
    "series_of",
    "trial_effect",
    "watch_effect",
]

GEOMEAN, P10 = "geomean", "p10"
STATISTICS = (GEOMEAN, P10)
P10_VARIANCE = 0.1 * 0.9 / 0.17549833193248685**2  # phi(z_0.1) = 0.1755: 2.92
MIN_PRE = 8  # pre-trial buckets with a control for CUPED's theta
PRE_BUCKETS = 36  # the pre-trial history: the buckets this long before a trial's (or watch's) start
CONTROL_TRAIL = 12  # a control prefix's bucket is compared with its previous 12 buckets ...
CONTROL_SPAN = 24  # ... within the 24 buckets before it
PRIOR_PAIRS = 4.0  # the weight of the model's pair variance against the pairs' own spread


@dataclass(frozen=True)
class Series:
    """One prefix's buckets in time order: realized arm ('' = mixed), samples, the statistic y
    and its sampling variance v (see the module docstring)."""

    ts: np.ndarray
    arm: np.ndarray
    samples: np.ndarray
    y: np.ndarray
    v: np.ndarray

    def part(self, keep: np.ndarray) -> Series:
        return Series(self.ts[keep], self.arm[keep], self.samples[keep], self.y[keep], self.v[keep])


def series_of(cells: pd.DataFrame, cfg: EvidenceSettings) -> dict[tuple[str, str], Series]:
    """(pop, prefix) -> Series from evidence cells (columns pop, prefix, ts, arm, samples, value,
    mean_log, var_log; other arms than bbr / cubic ignored)."""
    out: dict[tuple[str, str], Series] = {}
    if cells is None or cells.empty:
        return out
    c = cells[cells["arm"].isin(ARMS)]
    if c.empty:
        return out
    wide = c.pivot_table(
        index=["pop", "prefix", "ts"], columns="arm", values=["samples", "value", "mean_log", "var_log"],
        aggfunc="first",
    ).reset_index()  # fmt: skip
    wide.columns = ["_".join(str(x) for x in col if x) for col in wide.columns]
    for name in ARMS:
        for what in ("samples", "value", "mean_log", "var_log"):
            if f"{what}_{name}" not in wide:
                wide[f"{what}_{name}"] = 0.0 if what == "samples" else math.nan
    n_b = wide["samples_bbr"].fillna(0).to_numpy(float)
    n_c = wide["samples_cubic"].fillna(0).to_numpy(float)
    total = n_b + n_c
    arm = np.where(n_b >= cfg.purity * total, BBR, np.where(n_c >= cfg.purity * total, CUBIC, "")).astype(object)
    is_b = arm == BBR
    n = np.where(is_b, n_b, n_c)
    var = np.where(is_b, wide["var_log_bbr"].to_numpy(float), wide["var_log_cubic"].to_numpy(float))
    if cfg.statistic == P10:
        p10 = np.where(is_b, wide["value_bbr"].to_numpy(float), wide["value_cubic"].to_numpy(float))
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(p10 > 0, np.log(np.where(p10 > 0, p10, 1.0)), math.nan)
        scale = P10_VARIANCE
    else:
        y = np.where(is_b, wide["mean_log_bbr"].to_numpy(float), wide["mean_log_cubic"].to_numpy(float))
        scale = 1.0
    ok = (arm != "") & (n >= cfg.min_arm_samples) & np.isfinite(y)
    arm = np.where(ok, arm, "").astype(object)
    pops = wide["pop"].to_numpy()
    prefixes = wide["prefix"].to_numpy()
    ts = wide["ts"].to_numpy().astype("int64")
    order = np.lexsort((ts, prefixes.astype(str), pops.astype(str)))
    pops, prefixes, ts = pops[order], prefixes[order], ts[order]
    arm, n, y, var = arm[order], n[order].astype("int64"), y[order], var[order]
    key = np.char.add(np.char.add(pops.astype(str), "\x00"), prefixes.astype(str))
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        v = scale * _filled(var[a:b]) / np.maximum(n[a:b], 1)
        out[(str(pops[a]), str(prefixes[a]))] = Series(ts[a:b], arm[a:b], n[a:b], y[a:b], v)
    return out


def _filled(var: np.ndarray) -> np.ndarray:
    """A bucket's within-bucket variance where it has one; a bucket of one sample (an access-log
    bucket often holds one large response) takes the prefix's median, or 0 when no bucket has one:
    its spread is then all between buckets, which the pre-trial history and the pairs measure."""
    known = np.isfinite(var)
    if known.all():
        return var
    fill = float(np.median(var[known])) if known.any() else 0.0
    return np.where(known, var, fill)


def pop_controls(
    cells: pd.DataFrame, min_samples: int, bucket_seconds: int, start: int = 0
) -> dict[str, dict[int, float]]:
    """pop -> bucket -> the POP's shock in the bucket, from the POP's CUBIC cells (pop, prefix, ts,
    samples, mean_log): per prefix and bucket its mean ln(rate) minus the mean of the prefix's
    previous CONTROL_TRAIL buckets (these within CONTROL_SPAN buckets before it), averaged per
    bucket over the prefixes; buckets from `start` on.  The reference is causal and bounded, so a
    bucket's control does not depend on the window read.  What sql/queries/evidence_pop_controls.sql
    computes."""
    import pandas as pd

    out: dict[str, dict[int, float]] = {}
    if cells is None or cells.empty:
        return out
    c = cells[(cells["samples"] >= min_samples) & np.isfinite(cells["mean_log"])].sort_values(["pop", "prefix", "ts"])
    if c.empty:
        return out
    g = c.groupby(["pop", "prefix"], sort=False)
    y = c["mean_log"].to_numpy(float)
    cs = g["mean_log"].cumsum().to_numpy(float)
    back = g["mean_log"].cumsum().groupby([c["pop"], c["prefix"]], sort=False).shift(CONTROL_TRAIL + 1)
    k = g.cumcount().to_numpy()
    trail = np.where(k >= CONTROL_TRAIL, (cs - y - np.nan_to_num(back.to_numpy(float))) / CONTROL_TRAIL, math.nan)
    ts = c["ts"].to_numpy()
    ts_back = g["ts"].shift(CONTROL_TRAIL).to_numpy()
    ok = np.isfinite(trail) & (ts - ts_back <= CONTROL_SPAN * max(bucket_seconds, 1)) & (ts >= start)
    dev = pd.Series(y - trail, index=c.index)[ok]
    per = dev.groupby([c["pop"][ok], c["ts"][ok]]).mean()
    for (pop, t), value in per.items():
        out.setdefault(str(pop), {})[int(t)] = float(value)
    return out


def _controls(ts: np.ndarray, control: Mapping[int, float] | None) -> np.ndarray:
    if not control:
        return np.full(len(ts), math.nan)
    return np.array([control.get(int(t), math.nan) for t in ts.tolist()], dtype=float)


@dataclass(frozen=True)
class Adjustment:
    theta: float  # CUPED's coefficient on the POP's control
    between: float  # the prefix's between-bucket variance beyond sampling (nan: unknown)


def adjustment(pre: Series, control: Mapping[int, float] | None, cfg: EvidenceSettings) -> Adjustment:
    """theta and the between-bucket variance from the prefix's pre-trial buckets (module docstring)."""
    theta = 1.0 if (cfg.controls and control) else 0.0
    ok = pre.arm == CUBIC  # an earlier trial's BBR buckets are no pre-trial history
    y, v = pre.y[ok], pre.v[ok]
    c = _controls(pre.ts[ok], control) if theta else np.full(len(y), math.nan)
    has = np.isfinite(c)
    if theta and cfg.cuped and has.sum() >= MIN_PRE:
        cc = c[has] - c[has].mean()
        var_c = float((cc**2).mean())
        if var_c > 0:
            theta = min(2.0, max(0.0, float((cc * (y[has] - y[has].mean())).mean()) / var_c))
    r = y - theta * np.where(has, c, 0.0)
    between = math.nan
    if len(r) >= 4:
        between = max(0.0, float(r.var(ddof=1)) - float(v.mean()))
    return Adjustment(theta, between)


def _residuals(s: Series, control: Mapping[int, float] | None, theta: float) -> np.ndarray:
    c = _controls(s.ts, control)
    return s.y - theta * np.where(np.isfinite(c), c, 0.0)


def _counted(s: Series, asked: Mapping[int, str], open_loop: bool = False) -> np.ndarray:
    """The buckets that count: realized on the arm asked there (open loop, a replay: any arm)."""
    if open_loop:
        return np.asarray(s.arm != "", dtype=bool)
    want = np.array([asked.get(int(t), "") for t in s.ts.tolist()], dtype=object)
    return (s.arm != "") & (s.arm == want)


def _pooled_effect(
    d: np.ndarray, v_model: np.ndarray, n_b: int, n_c: int, samples: int, cfg: EvidenceSettings, sequential: bool,
    prior: bool,
) -> Effect:  # fmt: skip
    """The effect of the pair differences `d` (model variances `v_model`) with its interval."""
    k = len(d)
    weight = PRIOR_PAIRS if prior else 1.0
    spread = float(d.var(ddof=1)) if k >= 2 else 0.0
    var_pair = (weight * float(v_model.mean()) + (k - 1) * spread) / (weight + k - 1)
    se = math.sqrt(var_pair / k)
    est = float(d.mean())
    alpha = 1 - cfg.level
    if sequential:
        half = mixture_radius(se, cfg.effect_scale, alpha)
        z = mixture_z(se, cfg.effect_scale, alpha)
    else:
        half = fixed_radius(se, cfg.level)
        z = half / se if se > 0 else 0.0
    from statistics import NormalDist

    mde = math.expm1((z + NormalDist().inv_cdf(POWER)) * se) if se > 0 else math.nan
    return Effect(math.expm1(est), math.expm1(est - half), math.expm1(est + half), cfg.level, est, se, n_b, n_c,
                  samples, mde=mde)  # fmt: skip


def trial_effect(
    series: Series | None,
    since: int,
    until: int,
    asked: Mapping[int, str],
    control: Mapping[int, float] | None,
    cfg: EvidenceSettings,
    bucket_seconds: int,
) -> Effect:
    """The trial's effect over the whole buckets in [since's bucket, until): its first min(n_a, n_b)
    counted BBR and CUBIC buckets in pairs; n_a / n_b = every counted BBR / CUBIC bucket."""
    if series is None or not len(series.ts):
        return none("no arm buckets in the trial", cfg.level)
    start = since - since % max(bucket_seconds, 1)
    inside = (series.ts >= start) & (series.ts + max(bucket_seconds, 1) <= until)
    pre = series.part((series.ts < start) & (series.ts >= start - PRE_BUCKETS * max(bucket_seconds, 1)))
    adj = adjustment(pre, control, cfg)
    s = series.part(inside)
    counted = _counted(s, asked, cfg.open_loop)
    r = _residuals(s, control, adj.theta)
    b, c = np.flatnonzero(counted & (s.arm == BBR)), np.flatnonzero(counted & (s.arm == CUBIC))
    k = min(len(b), len(c))
    if k < 2:
        return none(f"too few realized pairs: {len(b)} bbr, {len(c)} cubic buckets (needs 2 pairs)", cfg.level,
                    len(b), len(c), int(s.samples[counted].sum()))  # fmt: skip
    n_b, n_c = len(b), len(c)  # every counted bucket: the schedule asks on from these
    b, c = b[:k], c[:k]
    d = r[b] - r[c]
    between = adj.between if math.isfinite(adj.between) else 0.0
    v_model = s.v[b] + s.v[c] + 2 * between
    samples = int(s.samples[b].sum() + s.samples[c].sum())
    return _pooled_effect(d, v_model, n_b, n_c, samples, cfg, True, math.isfinite(adj.between))


def watch_effect(
    series: Series | None,
    since: int,
    until: int,
    asked: Mapping[int, str],
    control: Mapping[int, float] | None,
    cfg: EvidenceSettings,
    bucket_seconds: int,
    pre_until: int = 0,
) -> Effect:
    """The watch's effect of a prefix on BBR since `since` (its holdback blocks, module docstring)
    over its latest `watch_blocks` blocks with both arms counted; n_a / n_b = BBR / CUBIC buckets.
    `pre_until`: the end of the prefix's pre-BBR history (its trial's or selection's start)."""
    if series is None or not len(series.ts) or cfg.holdback <= 0:
        return none("no holdback buckets", cfg.level)
    bs = max(bucket_seconds, 1)
    start = since - since % bs
    pre_end = pre_until - pre_until % bs if pre_until else start
    pre = series.part((series.ts < pre_end) & (series.ts >= pre_end - PRE_BUCKETS * bs))
    adj = adjustment(pre, control, cfg)
    s = series.part((series.ts >= start) & (series.ts + bs <= until))
    counted = _counted(s, asked, cfg.open_loop)
    r = _residuals(s, control, adj.theta)
    block = (s.ts - start) // (bs * cfg.holdback)
    between = adj.between if math.isfinite(adj.between) else 0.0
    d, v_model, n_b, n_c, samples = [], [], 0, 0, 0
    for j in sorted(set(block[counted].tolist()), reverse=True):
        here = counted & (block == j)
        b, c = np.flatnonzero(here & (s.arm == BBR)), np.flatnonzero(here & (s.arm == CUBIC))
        if not len(b) or not len(c):
            continue
        d.append(float(r[b].mean() - r[c].mean()))
        m, q = len(b), len(c)
        v_model.append(float(s.v[b].sum()) / m**2 + float(s.v[c].sum()) / q**2 + between * (1 / m + 1 / q))
        n_b, n_c = n_b + m, n_c + q
        samples += int(s.samples[b].sum() + s.samples[c].sum())
        if len(d) == cfg.watch_blocks:
            break
    if len(d) < 2:
        return none(f"too few holdback blocks: {len(d)} (needs 2)", cfg.level, n_b, n_c, samples)
    return _pooled_effect(np.array(d), np.array(v_model), n_b, n_c, samples, cfg, False, math.isfinite(adj.between))
