"""controller/evidence/model.py: arm buckets, the Welch trial effect, the pooled random-effects
effect and their texts, against hand computations, scipy and properties."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from controller.evidence.model import (
    ARMS,
    BBR,
    CUBIC,
    LEVEL,
    MIN_BUCKETS,
    MIN_SAMPLES,
    PURITY,
    Effect,
    arm_buckets,
    none,
    pct,
    pooled,
    summary_line,
    trial_effects,
    two_sample,
    welch,
)

B = 300
POP, P1, P2 = "fra", "192.0.2.0/24", "198.51.100.0/24"
Z90 = NormalDist().inv_cdf(0.95)  # two-sided 90 %
Z_MDE = Z90 + NormalDist().inv_cdf(0.8)


def cells(rows: list[tuple]) -> pd.DataFrame:
    """(pop, prefix, ts, arm, samples, value) rows."""
    return pd.DataFrame(rows, columns=["pop", "prefix", "ts", "arm", "samples", "value"])


def buckets(rows: list[tuple[str, str, int, str, float]], samples: int = 10) -> pd.DataFrame:
    """arm_buckets-like rows from (pop, prefix, ts, arm, value)."""
    return arm_buckets(cells([(p, x, t, a, samples, v) for p, x, t, a, v in rows]))


def effect_from(values: list[float], se: float, samples: int = 100) -> Effect:
    d = values[0]
    return Effect(math.expm1(d), math.nan, math.nan, LEVEL, d, se, 4, 4, samples)


# --- arm_buckets ---------------------------------------------------------------------------------


def test_a_bucket_of_90_percent_bbr_samples_counts_as_bbr() -> None:
    out = arm_buckets(cells([(POP, P1, 0, BBR, 9, 2e6), (POP, P1, 0, CUBIC, 1, 1e6)]), purity=0.8)
    assert out[["pop", "prefix", "ts", "arm", "samples", "value"]].values.tolist() == [[POP, P1, 0, BBR, 9, 2e6]]
    assert out["y"].tolist() == [pytest.approx(math.log(2e6))]
    assert out["ts"].dtype == np.int64 and out["samples"].dtype == np.int64


def test_a_bucket_of_90_percent_cubic_samples_counts_as_cubic() -> None:
    out = arm_buckets(cells([(POP, P1, 0, BBR, 1, 2e6), (POP, P1, 0, CUBIC, 9, 1e6)]), purity=0.8)
    assert out[["arm", "samples", "value"]].values.tolist() == [[CUBIC, 9, 1e6]]


def test_a_mixed_bucket_is_dropped() -> None:
    mixed = cells([(POP, P1, 0, BBR, 6, 2e6), (POP, P1, 0, CUBIC, 4, 1e6)])
    assert arm_buckets(mixed, purity=0.8).empty
    # at a purity of 0.6 the same bucket is bbr's
    assert arm_buckets(mixed, purity=0.6)["arm"].tolist() == [BBR]


def test_purity_is_a_share_at_least() -> None:
    exact = cells([(POP, P1, 0, BBR, 8, 2e6), (POP, P1, 0, CUBIC, 2, 1e6)])
    assert arm_buckets(exact, purity=0.8)["arm"].tolist() == [BBR]
    assert arm_buckets(exact, purity=0.81).empty


def test_a_bucket_needs_min_samples_of_its_arm() -> None:
    few = cells([(POP, P1, 0, BBR, 2, 2e6), (POP, P1, B, BBR, 3, 2e6)])
    assert arm_buckets(few)["ts"].tolist() == [B]  # MIN_SAMPLES = 3
    assert MIN_SAMPLES == 3
    assert arm_buckets(few, min_samples=2)["ts"].tolist() == [0, B]
    # the other arm's samples do not make up for it
    assert arm_buckets(cells([(POP, P1, 0, BBR, 2, 2e6), (POP, P1, 0, CUBIC, 0, 1e6)])).empty


def test_non_positive_and_missing_values_are_dropped() -> None:
    rows = [(POP, P1, 0, BBR, 5, 0.0), (POP, P1, B, BBR, 5, -1.0), (POP, P1, 2 * B, BBR, 5, math.nan)]
    rows.append((POP, P1, 3 * B, CUBIC, 5, 1e6))
    assert arm_buckets(cells(rows))["ts"].tolist() == [3 * B]


def test_other_arms_are_ignored() -> None:
    # 'other' samples neither make a bucket mixed nor count as an arm
    rows = [(POP, P1, 0, BBR, 5, 2e6), (POP, P1, 0, "other", 100, 1e3), (POP, P1, B, "other", 50, 1e6)]
    out = arm_buckets(cells(rows))
    assert out[["ts", "arm", "samples", "value"]].values.tolist() == [[0, BBR, 5, 2e6]]
    assert arm_buckets(cells([(POP, P1, 0, "other", 50, 1e6)])).empty


def test_no_cells_give_an_empty_frame_with_the_columns() -> None:
    cols = ["pop", "prefix", "ts", "arm", "samples", "value", "y"]
    assert list(arm_buckets(cells([])).columns) == cols
    assert list(arm_buckets(None).columns) == cols  # type: ignore[arg-type]


def test_arm_buckets_are_sorted_per_prefix_and_time() -> None:
    rows = [
        (POP, P2, B, CUBIC, 5, 1.0),
        (POP, P1, B, BBR, 5, 2.0),
        (POP, P1, 0, CUBIC, 5, 3.0),
        ("ams", P2, 0, BBR, 5, 4.0),
    ]
    out = arm_buckets(cells(rows))
    assert out[["pop", "prefix", "ts"]].values.tolist() == [["ams", P2, 0], [POP, P1, 0], [POP, P1, B], [POP, P2, B]]
    assert (PURITY, MIN_SAMPLES) == (0.8, 3)


# --- welch and two_sample ------------------------------------------------------------------------

A = np.array([1.0, 2.0, 3.0, 4.0])
C = np.array([2.0, 4.0, 6.0])


def test_welch_against_a_hand_computation() -> None:
    # mean 2.5 and 4; variances of the means 1.6667 / 4 = 0.41667 and 4 / 3 = 1.3333
    d, se, lo, hi = welch(A, C, 0.9)
    assert d == pytest.approx(-1.5)
    assert se == pytest.approx(math.sqrt(1.75))
    # Welch-Satterthwaite df = 1.75^2 / (0.41667^2 / 3 + 1.3333^2 / 2) = 3.23472; t_0.95(3.23472) = 2.28536
    half = 2.285357 * math.sqrt(1.75)
    assert lo == pytest.approx(-1.5 - half, abs=1e-5) and hi == pytest.approx(-1.5 + half, abs=1e-5)


def test_welch_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for level in (0.8, 0.9, 0.95):
        ci = stats.ttest_ind(A, C, equal_var=False).confidence_interval(confidence_level=level)
        _, _, lo, hi = welch(A, C, level)
        assert (lo, hi) == (pytest.approx(ci.low, rel=1e-9), pytest.approx(ci.high, rel=1e-9))


def test_welch_without_spread_has_a_point_interval() -> None:
    assert welch(np.array([2.0, 2.0]), np.array([1.0, 1.0]), 0.9) == (1.0, 0.0, 1.0, 1.0)


def test_welch_with_one_constant_side_has_the_other_sides_df() -> None:
    stats = pytest.importorskip("scipy.stats")
    b = np.array([0.0, 1.0, 3.0])
    d, se, _, hi = welch(np.array([1.0, 1.0, 1.0]), b, 0.9)
    t = stats.t.ppf(0.95, len(b) - 1)
    assert se == pytest.approx(b.std(ddof=1) / math.sqrt(3))
    assert hi - d == pytest.approx(t * se)


def test_two_sample_gives_the_effect_scale() -> None:
    e = two_sample(A, C, 70, 0.9, 2, ARMS)
    d, se, lo, hi = welch(A, C, 0.9)
    assert e.ok and e.has_interval and not e.reason
    assert (e.d, e.se, e.level, e.n_a, e.n_b, e.samples, e.prefixes) == (d, se, 0.9, 4, 3, 70, 1)
    assert e.estimate == pytest.approx(math.expm1(d))
    assert (e.low, e.high) == (pytest.approx(math.expm1(lo)), pytest.approx(math.expm1(hi)))


def test_two_sample_needs_min_buckets_per_side() -> None:
    e = two_sample(np.array([1.0]), C, 40, 0.9, 2, ARMS)
    assert not e.ok and not e.has_interval
    assert e.reason == "too few buckets: 1 bbr, 3 cubic (needs 2 each)"
    assert (e.n_a, e.n_b, e.samples, e.level) == (1, 3, 40, 0.9)
    assert two_sample(A, C, 70, 0.9, 4, ("after", "before")).reason == (
        "too few buckets: 4 after, 3 before (needs 4 each)"
    )
    assert MIN_BUCKETS == 2


def test_the_mde_is_the_80_percent_power_effect_of_the_se() -> None:
    e = two_sample(A, C, 70, 0.9, 2, ARMS)
    assert pytest.approx(2.48647, abs=1e-5) == Z_MDE
    assert e.mde == pytest.approx(math.expm1(Z_MDE * e.se))
    z95 = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    assert two_sample(A, C, 70, 0.95, 2, ARMS).mde == pytest.approx(math.expm1(z95 * e.se))
    assert math.isnan(none("why").mde)


positive = st.floats(min_value=1e3, max_value=1e9, allow_nan=False, allow_infinity=False)
sides = st.lists(positive, min_size=2, max_size=10)


@settings(max_examples=150, deadline=None)
@given(a=sides, b=sides, level=st.sampled_from([0.8, 0.9, 0.95]))
def test_two_sample_matches_scipys_welch_interval(a: list[float], b: list[float], level: float) -> None:
    stats = pytest.importorskip("scipy.stats")
    ya, yb = np.log(a), np.log(b)
    assume(ya.var() > 1e-6 and yb.var() > 1e-6)
    ci = stats.ttest_ind(ya, yb, equal_var=False).confidence_interval(confidence_level=level)
    d, se, lo, hi = welch(ya, yb, level)
    assert lo == pytest.approx(ci.low, rel=1e-7, abs=1e-9) and hi == pytest.approx(ci.high, rel=1e-7, abs=1e-9)
    e = two_sample(ya, yb, 10, level, 2, ARMS)
    assert (e.d, e.se, e.low, e.high) == (d, se, math.expm1(lo), math.expm1(hi))


# --- trial_effects -------------------------------------------------------------------------------


def switchback(prefix: str, start: int, values: list[tuple[str, float]], pop: str = POP) -> list[tuple]:
    return [(pop, prefix, start + k * B, arm, v) for k, (arm, v) in enumerate(values)]


def test_trial_effect_is_bbr_against_cubic() -> None:
    rows = switchback(P1, 0, [(BBR, 4e6), (CUBIC, 1e6), (BBR, 8e6), (CUBIC, 2e6)])
    e = trial_effects(buckets(rows))[(POP, P1)]
    # ln(4e6) and ln(8e6) against ln(1e6) and ln(2e6): d = ln 4
    assert e.d == pytest.approx(math.log(4)) and e.estimate == pytest.approx(3.0)
    assert (e.n_a, e.n_b, e.samples) == (2, 2, 40)


def test_only_whole_buckets_inside_the_window_count() -> None:
    start, end = 10 * B, 16 * B
    values = [(BBR, 4e6), (CUBIC, 1e6)] * 5
    rows = switchback(P1, 8 * B, values)  # buckets 8B .. 17B
    b = buckets(rows)
    e = trial_effects(b, {(POP, P1): (start, end)}, bucket_seconds=B)[(POP, P1)]
    # counted: ts in [10B, 15B] (ts + B <= 16B): 6 buckets, 3 per arm
    assert (e.n_a, e.n_b, e.samples) == (3, 3, 60)
    # a window that ends inside a bucket leaves that bucket out
    e = trial_effects(b, {(POP, P1): (start, end + B // 2)}, bucket_seconds=B)[(POP, P1)]
    assert e.n_a + e.n_b == 6
    # a start inside a bucket leaves it out (ts < start)
    e = trial_effects(b, {(POP, P1): (start + 30, end)}, bucket_seconds=B)[(POP, P1)]
    assert e.n_a + e.n_b == 5
    # without bucket_seconds: every bucket that starts before the end
    e = trial_effects(b, {(POP, P1): (start, end)})[(POP, P1)]
    assert e.n_a + e.n_b == 6
    e = trial_effects(b, {(POP, P1): (start, end + 1)})[(POP, P1)]
    assert e.n_a + e.n_b == 7


def test_windows_choose_the_prefixes() -> None:
    rows = switchback(P1, 0, [(BBR, 4e6), (CUBIC, 1e6)] * 2) + switchback(P2, 0, [(BBR, 1e6), (CUBIC, 1e6)] * 2)
    b = buckets(rows)
    assert set(trial_effects(b)) == {(POP, P1), (POP, P2)}
    got = trial_effects(b, {(POP, P2): (0, 4 * B), ("ams", P1): (0, 4 * B)}, bucket_seconds=B)
    assert set(got) == {(POP, P2), ("ams", P1)}
    assert got[(POP, P2)].ok
    assert got[("ams", P1)].reason == "no arm buckets in the trial"
    # a window without buckets of both arms
    e = trial_effects(b, {(POP, P1): (0, B)}, bucket_seconds=B)[(POP, P1)]
    assert e.reason == "too few buckets: 1 bbr, 0 cubic (needs 2 each)"


def test_no_buckets_give_a_reason_per_window() -> None:
    empty = buckets([])
    assert trial_effects(empty) == {}
    got = trial_effects(empty, {(POP, P1): (0, B)}, level=0.8)
    assert got[(POP, P1)].reason == "no arm buckets in the trial" and got[(POP, P1)].level == 0.8


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.tuples(st.sampled_from(ARMS), positive), min_size=4, max_size=16),
    level=st.sampled_from([0.8, 0.9, 0.95]),
)
def test_trial_effect_properties(values: list[tuple[str, float]], level: float) -> None:
    """Its interval holds its estimate, estimate = exp(d) - 1, and swapping the arms negates d."""
    arms = [a for a, _ in values]
    assume(arms.count(BBR) >= 2 and arms.count(CUBIC) >= 2)
    e = trial_effects(buckets(switchback(P1, 0, values)), level=level)[(POP, P1)]
    assert e.ok and e.has_interval
    assert e.low <= e.estimate <= e.high
    assert math.expm1(e.d) == pytest.approx(e.estimate, rel=1e-12, abs=1e-12)
    swap = {BBR: CUBIC, CUBIC: BBR}
    s = trial_effects(buckets(switchback(P1, 0, [(swap[a], v) for a, v in values])), level=level)[(POP, P1)]
    assert s.d == pytest.approx(-e.d, abs=1e-9)
    assert s.se == pytest.approx(e.se, rel=1e-9, abs=1e-12)
    assert (s.n_a, s.n_b) == (e.n_b, e.n_a)
    # the interval mirrors on the log scale (where exp(-bound) - 1 keeps its precision)
    if e.high < 1e6:
        assert math.log1p(s.low) == pytest.approx(-math.log1p(e.high), rel=1e-6, abs=1e-9)


# --- pooled --------------------------------------------------------------------------------------


def test_pooling_one_prefix_gives_it_back_with_a_normal_interval() -> None:
    e = two_sample(A, C, 70, 0.9, 2, ARMS)
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
