"""controller/evidence/switchback.py, pure: which buckets count for an arm (`series_of`), the
trial's pairs of realized buckets (`trial_effect`), the controls and CUPED's coefficient, the
watch's holdback blocks (`watch_effect`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.evidence.load import CELL_COLUMNS
from controller.evidence.model import BBR, CUBIC
from controller.evidence.settings import EvidenceSettings
from controller.evidence.switchback import (
    P10_VARIANCE,
    PRE_BUCKETS,
    Series,
    adjustment,
    series_of,
    trial_effect,
    watch_effect,
)

B = 300
POP, P = "fra", "192.0.2.0/24"
CFG = EvidenceSettings()
T0 = 1_700_000_000 - 1_700_000_000 % B


def cell(ts: int, arm: str, samples: int, mean_log: float, var_log: float = 0.36) -> tuple:
    return (POP, P, ts, arm, samples, math.exp(mean_log - 0.77), 0, mean_log, var_log)


def frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


# --- series_of -------------------------------------------------------------------------------------


def test_a_bucket_counts_for_the_arm_of_80_percent_of_its_samples() -> None:
    rows = [
        cell(T0, BBR, 9, 14.0), cell(T0, CUBIC, 1, 13.0),  # 90 % bbr
        cell(T0 + B, BBR, 7, 14.0), cell(T0 + B, CUBIC, 3, 13.0),  # 70 %: mixed
        cell(T0 + 2 * B, CUBIC, 8, 13.0), cell(T0 + 2 * B, BBR, 2, 14.0),  # 80 % cubic: counts
        cell(T0 + 3 * B, CUBIC, 2, 13.0),  # too few samples
        cell(T0 + 4 * B, "other", 20, 13.0),  # another congestion control: ignored
    ]  # fmt: skip
    s = series_of(frame(rows), CFG)[(POP, P)]
    assert list(s.ts) == [T0, T0 + B, T0 + 2 * B, T0 + 3 * B]
    assert list(s.arm) == [BBR, "", CUBIC, ""]
    assert list(s.samples[[0, 2]]) == [9, 8]
    assert list(s.y[[0, 2]]) == [14.0, 13.0]  # the arm's own samples' mean ln rate
    assert math.isclose(s.v[0], 0.36 / 9)


def test_the_p10_statistic_costs_its_sampling_variance() -> None:
    rows = [cell(T0, BBR, 10, 14.0)]
    p10 = series_of(frame(rows), EvidenceSettings(statistic="p10"))[(POP, P)]
    geo = series_of(frame(rows), CFG)[(POP, P)]
    assert math.isclose(p10.y[0], math.log(rows[0][5]))
    assert math.isclose(p10.v[0] / geo.v[0], P10_VARIANCE) and 2.9 < P10_VARIANCE < 2.95


def test_a_bucket_of_one_sample_takes_the_prefixs_median_variance() -> None:
    rows = [
        cell(T0, CUBIC, 5, 13.0, 0.2),
        cell(T0 + B, CUBIC, 5, 13.0, 0.4),
        cell(T0 + 2 * B, CUBIC, 5, 13.0, math.nan),
    ]
    s = series_of(frame(rows), EvidenceSettings(min_arm_samples=1))[(POP, P)]
    assert np.allclose(s.v, [0.2 / 5, 0.4 / 5, 0.3 / 5])
    alone = series_of(frame([cell(T0, CUBIC, 1, 13.0, math.nan)]), EvidenceSettings(min_arm_samples=1))[(POP, P)]
    assert alone.v[0] == 0.0 and alone.arm[0] == CUBIC


# --- trial_effect ----------------------------------------------------------------------------------


def trial(arms: list[str], effect: float, noise: float = 0.05, seed: int = 1, pre: int = 0,
          control: np.ndarray | None = None, loading: float = 1.0) -> tuple[Series, dict[int, str]]:  # fmt: skip
    """A prefix with `pre` CUBIC buckets before T0 and then the trial's realized `arms`."""
    rng = np.random.default_rng(seed)
    all_arms = [CUBIC] * pre + arms
    n = len(all_arms)
    ts = T0 + (np.arange(n) - pre) * B
    shock = loading * (control if control is not None else np.zeros(n))
    y = 14.0 + shock + np.where(np.array(all_arms) == BBR, math.log1p(effect), 0.0) + rng.normal(0, noise, n)
    s = Series(ts.astype("int64"), np.array(all_arms, dtype=object), np.full(n, 10), y, np.full(n, noise**2 / 10))
    return s, {int(t): a for t, a in zip(ts[pre:], arms, strict=True)}


def test_the_effect_pairs_realized_buckets_and_finds_the_truth() -> None:
    arms = [BBR, CUBIC, CUBIC, BBR, BBR, CUBIC, CUBIC, BBR]
    s, asked = trial(arms, 0.5)
    e = trial_effect(s, T0, T0 + len(arms) * B, asked, None, CFG, B)
    assert (e.n_a, e.n_b) == (4, 4) and e.samples == 80
    assert e.low < 0.5 < e.high and e.low > 0.3


def test_a_bucket_whose_arm_was_not_the_asked_one_is_no_block() -> None:
    arms = [CUBIC, CUBIC, CUBIC, BBR, CUBIC, BBR, BBR, CUBIC]  # buckets 0-1 waited for the canary
    s, asked = trial(arms, 0.5)
    asked[T0] = asked[T0 + B] = BBR
    e = trial_effect(s, T0, T0 + len(arms) * B, asked, None, CFG, B)
    assert (e.n_a, e.n_b) == (3, 3)
    # a bucket not yet over does not count; too few pairs give a reason, not an interval
    e = trial_effect(s, T0, T0 + 4 * B + 1, asked, None, CFG, B)
    assert not e.ok and e.reason.startswith("too few realized pairs: 1 bbr, 1 cubic buckets")


def test_controls_remove_the_pops_shock_and_cuped_fits_its_coefficient() -> None:
    rng = np.random.default_rng(4)
    arms = [a for _ in range(20) for a in rng.permutation([BBR, CUBIC])]
    pre = PRE_BUCKETS
    control = rng.normal(0, 0.3, pre + len(arms))
    for loading in (0.5, 1.0, 1.7):
        s, asked = trial(arms, 0.2, noise=0.05, pre=pre, control=control, loading=loading, seed=5)
        ctl = {int(t): float(c) for t, c in zip(s.ts, control, strict=True)}
        adj = adjustment(s.part(s.ts < T0), ctl, CFG)
        assert abs(adj.theta - loading) < 0.1
        end = T0 + len(arms) * B
        plain = trial_effect(s, T0, end, asked, None, CFG, B)
        with_controls = trial_effect(s, T0, end, asked, ctl, CFG, B)
        assert with_controls.se < 0.5 * plain.se
        assert with_controls.low < 0.2 < with_controls.high
    # theta 1 without CUPED
    assert adjustment(s.part(s.ts < T0), ctl, EvidenceSettings(cuped=False)).theta == 1.0
    assert adjustment(s.part(s.ts < T0), ctl, EvidenceSettings(controls=False)).theta == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([BBR, CUBIC]), min_size=4, max_size=40), st.floats(-0.5, 1.0))
def test_trial_effect_properties(arms: list[str], effect: float) -> None:
    s, asked = trial(arms, effect, noise=0.1)
    e = trial_effect(s, T0, T0 + len(arms) * B, asked, None, CFG, B)
    k = min(arms.count(BBR), arms.count(CUBIC))
    assert (e.n_a, e.n_b) == (arms.count(BBR), arms.count(CUBIC))
    if k < 2:
        assert not e.ok
    else:
        assert e.low <= e.estimate <= e.high and e.se > 0
        assert e.samples == 20 * k


# --- watch_effect ----------------------------------------------------------------------------------


def test_the_watch_compares_each_blocks_bbr_buckets_with_its_cubic_one() -> None:
    cfg = EvidenceSettings(holdback=4, watch_blocks=3)
    arms = [BBR, CUBIC, BBR, BBR] * 6
    s, asked = trial(arms, -0.4, noise=0.03)
    e = watch_effect(s, T0, T0 + len(arms) * B, asked, None, cfg, B)
    assert (e.n_a, e.n_b) == (9, 3)  # the latest 3 blocks
    assert e.high < 0 and e.low < -0.4 < e.high
    e = watch_effect(s, T0, T0 + 4 * B, asked, None, cfg, B)
    assert not e.ok and e.reason == "too few holdback blocks: 1 (needs 2)"
    assert not watch_effect(s, T0, T0 + 24 * B, asked, None, EvidenceSettings(holdback=0), B).ok


def test_a_replay_counts_the_recorded_arms_whatever_was_asked() -> None:
    """Open loop (dyncc/lab/replay.py): the recorded edges did not run what the replay's rounds ask."""
    arms = [BBR, CUBIC, CUBIC, BBR, BBR, CUBIC]
    s, asked = trial(arms, 0.5)
    wrong = {t: (CUBIC if a == BBR else BBR) for t, a in asked.items()}
    closed = trial_effect(s, T0, T0 + len(arms) * B, wrong, None, CFG, B)
    assert (closed.n_a, closed.n_b) == (0, 0) and not closed.ok
    replay = CFG.for_replay()
    assert replay.open_loop and replay.replaced(min_arm_samples=1).open_loop and not CFG.open_loop
    opened = trial_effect(s, T0, T0 + len(arms) * B, wrong, None, replay, B)
    assert (opened.n_a, opened.n_b) == (3, 3) and opened.ok
