"""controller/evidence/model.py: the pooled random-effects effect and the effect texts, against
hand computations and properties (the per-trial estimator: test_switchback.py)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from controller.evidence.model import (
    LEVEL,
    Effect,
    none,
    pct,
    pooled,
    summary_line,
)

B = 300
POP, P1, P2 = "fra", "192.0.2.0/24", "198.51.100.0/24"
Z90 = NormalDist().inv_cdf(0.95)  # two-sided 90 %
Z_MDE = Z90 + NormalDist().inv_cdf(0.8)


def effect_from(values: list[float], se: float, samples: int = 100) -> Effect:
    d = values[0]
    return Effect(math.expm1(d), math.nan, math.nan, LEVEL, d, se, 4, 4, samples)


# --- pooled --------------------------------------------------------------------------------------


def test_pooling_one_prefix_gives_it_back_with_a_normal_interval() -> None:
    e = Effect(math.expm1(0.4), math.expm1(0.1), math.expm1(0.7), 0.9, 0.4, 0.15, 4, 4, 70)
    p = pooled([e])
    assert p.d == pytest.approx(e.d) and p.se == pytest.approx(e.se) and p.estimate == pytest.approx(e.estimate)
    assert p.low == pytest.approx(math.expm1(e.d - Z90 * e.se))
    assert p.high == pytest.approx(math.expm1(e.d + Z90 * e.se))
    assert p.low > e.low  # normal, narrower than the t interval at 3.2 df
    assert (p.n_a, p.n_b, p.prefixes, p.samples) == (1, 1, 1, 70)
    assert pooled([e], trials=3).n_b == 3
    assert p.mde == pytest.approx(math.expm1(Z_MDE * e.se))


def test_identical_prefixes_have_no_between_prefix_variance() -> None:
    e = effect_from([0.2], 0.1)
    p = pooled([e, e, e, e])
    # tau^2 = 0: the fixed-effect pool, se / sqrt(k)
    assert p.d == pytest.approx(0.2) and p.se == pytest.approx(0.1 / 2)
    assert (p.n_a, p.prefixes, p.samples) == (4, 4, 400)


def test_heterogeneous_prefixes_widen_the_interval() -> None:
    ds, ses = [0.5, -0.3, 0.1, 0.9], [0.1, 0.1, 0.2, 0.15]
    effects = [effect_from([d], s) for d, s in zip(ds, ses, strict=True)]
    p = pooled(effects)
    # DerSimonian-Laird by hand
    w = np.array([1 / s**2 for s in ses])
    d = np.array(ds)
    fixed = (w * d).sum() / w.sum()
    q = (w * (d - fixed) ** 2).sum()
    tau2 = max(0.0, (q - 3) / (w.sum() - (w**2).sum() / w.sum()))
    assert tau2 > 0
    ws = 1 / (1 / w + tau2)
    assert p.d == pytest.approx((ws * d).sum() / ws.sum())
    assert p.se == pytest.approx(math.sqrt(1 / ws.sum()))
    assert p.se > math.sqrt(1 / w.sum())  # wider than the fixed-effect interval
    width = math.log1p(p.high) - math.log1p(p.low)
    assert width == pytest.approx(2 * Z90 * p.se)
    # the same prefixes without the spread of their d: narrower
    same = pooled([effect_from([p.d], s) for s in ses])
    assert same.se == pytest.approx(math.sqrt(1 / w.sum()))
    assert math.log1p(same.high) - math.log1p(same.low) < width


def test_pooling_leaves_out_prefixes_without_an_se() -> None:
    good = effect_from([0.2], 0.1, samples=10)
    flat = effect_from([0.5], 0.0, samples=20)  # a point interval has no weight
    p = pooled([good, flat, none("too few buckets", samples=5)])
    assert p.d == pytest.approx(0.2) and p.samples == 10 and p.n_a == 1
    assert p.n_b == 1  # the trials: by default the prefixes pooled
    assert pooled([good, flat], trials=2).n_b == 2


def test_no_usable_prefix_gives_a_reason() -> None:
    p = pooled([])
    assert not p.ok and p.reason == "no prefix to pool" and p.n_b == 0
    p = pooled([none("too few buckets", samples=5), none("no arm buckets in the trial", samples=2)], trials=4)
    assert not p.ok and p.reason == "no prefix has an effect with an interval"
    assert (p.n_a, p.n_b, p.samples) == (0, 4, 7)


# --- texts ---------------------------------------------------------------------------------------


def test_effect_text() -> None:
    e = Effect(0.12, 0.03, 0.22, 0.9, math.log1p(0.12), 0.05, 4, 4, 100)
    assert e.text() == "+12% [+3%, +22%]"
    assert Effect(-0.25, -0.4, -0.05, 0.9, 0.0, 0.1, 4, 4, 1).text() == "-25% [-40%, -5%]"
    assert Effect(0.12, math.nan, math.nan, 0.9, 0.1, math.nan, 1, 0, 1).text() == "+12% [no interval]"
    assert none("too few buckets").text() == "n/a: too few buckets"
    assert (pct(0.12), pct(-0.034), pct(math.nan), pct(math.inf)) == ("+12%", "-3%", "n/a", "n/a")


def test_summary_line() -> None:
    e = pooled([effect_from([math.log(1.61)], 0.2, samples=4120)], trials=7)
    line = summary_line("lossy", e)
    mde = pct(math.expm1(Z_MDE * 0.2)).lstrip("+")
    assert line == (
        f"lossy: {e.text()} (90% interval), 1 prefixes, 7 trials, 4,120 samples, smallest detectable effect {mde}"
    )
    assert line.startswith("lossy: +61% [")
    assert summary_line("deep", pooled([], trials=3)) == "deep: n/a (no prefix to pool; 3 trials, 0 samples)"


def test_summary_line_names_the_level_it_was_computed_at() -> None:
    e = pooled([effect_from([0.2], 0.1)], level=0.58)
    assert "(58% interval)" in summary_line("x", e)
