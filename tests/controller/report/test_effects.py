"""The difference in differences of controller/report/effects.py on datasets with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from controller.report import effects
from controller.report.effects import ALL, did, did_by_pop


def stats_of(groups: dict[str, list[tuple[float, float]]], pop: str = "lax", samples: int = 50) -> pd.DataFrame:
    """Rows (pop, prefix, grp, phase, samples, value) from per-group (before, after) values."""
    rows = []
    for grp, pairs in groups.items():
        for k, (before, after) in enumerate(pairs):
            prefix = f"2001:db8:{ord(grp[0]):x}:{k:x}00::/56"
            rows.append((pop, prefix, grp, "before", samples, before))
            rows.append((pop, prefix, grp, "after", samples, after))
    return pd.DataFrame(rows, columns=["pop", "prefix", "grp", "phase", "samples", "value"])


def test_hand_computed_estimate_and_interval_contain_it():
    # treated ratios 2, 3, 1.5 (geometric mean 9^(1/3)); holdout ratios 1.2, 1/1.2, 1 (mean 1)
    stats = stats_of(
        {
            "treated": [(1e6, 2e6), (2e6, 6e6), (4e6, 6e6)],
            "holdout": [(1e6, 1.2e6), (1.2e6, 1e6), (3e6, 3e6)],
        }
    )
    result = did(stats)
    expected = 9 ** (1 / 3) - 1
    assert result.ok and result.reason == ""
    assert result.estimate == pytest.approx(expected, rel=1e-12)
    assert result.treated.change == pytest.approx(expected, rel=1e-12)
    assert result.holdout.change == pytest.approx(0.0, abs=1e-12)
    assert result.ci_low is not None and result.ci_high is not None
    assert result.ci_low < expected < result.ci_high
    assert (result.treated.prefixes, result.holdout.prefixes) == (3, 3)
    assert (result.treated.samples_before, result.holdout.samples_after) == (150, 150)
    assert result.has_interval and "understates" in result.note  # three prefixes per group is few
    assert (result.resamples, result.seed) == (effects.RESAMPLES, effects.SEED)


def test_interval_of_two_by_two_prefixes_is_the_bootstrap_extremes():
    """With 2 prefixes per group the resampled DiD takes 9 values; the lowest and the highest
    each have probability 1/16 > 2.5 %, so the 95 % interval is exactly those two."""
    stats = stats_of({"treated": [(1.0, 2.0), (1.0, 3.0)], "holdout": [(1.0, 1.0), (1.0, 1.25)]})
    result = did(stats)
    assert result.estimate == pytest.approx(math.sqrt(6 / 1.25) - 1, rel=1e-12)
    assert result.ci_low == pytest.approx(2 / 1.25 - 1, rel=1e-12)  # min treated - max holdout
    assert result.ci_high == pytest.approx(3 / 1 - 1, rel=1e-12)  # max treated - min holdout


def null_stats(rng: np.random.Generator, prefixes: int = 40, true_effect: float = 1.0) -> pd.DataFrame:
    """Prefixes with lognormal base rates and noisy changes; treated change x true_effect more."""
    groups: dict[str, list[tuple[float, float]]] = {"treated": [], "holdout": []}
    for grp in groups:
        for _ in range(prefixes):
            base = 1e6 * float(rng.lognormal(0, 0.5))
            change = 0.9 * float(rng.lognormal(0, 0.25)) * (true_effect if grp == "treated" else 1.0)
            groups[grp].append((base, base * change))
    return stats_of(groups)


def test_one_prefix_in_a_group_gives_an_estimate_without_interval():
    stats = stats_of({"treated": [(1.0, 2.0), (1.0, 3.0)], "holdout": [(1.0, 1.25)]})
    result = did(stats)
    assert result.ok and result.estimate == pytest.approx(math.sqrt(6) / 1.25 - 1, rel=1e-12)
    assert not result.has_interval and result.ci_low is not None and math.isnan(result.ci_low)
    assert result.note.startswith("no interval: the holdout group has one prefix")


def test_null_dataset_interval_contains_zero():
    result = did(null_stats(np.random.default_rng(3)))
    assert result.ok and result.ci_low is not None and result.ci_high is not None
    assert result.ci_low < 0 < result.ci_high
    assert result.holdout.change == pytest.approx(-0.1, abs=0.1)  # the common time change
    assert result.note == ""


def test_interval_coverage_on_many_datasets():
    """About 95 % of the intervals contain the true effect (0 under the null, +30 % otherwise)."""
    rng = np.random.default_rng(5)
    for true in (1.0, 1.3):
        hits = 0
        for _ in range(100):
            r = did(null_stats(rng, true_effect=true), resamples=500)
            assert r.ci_low is not None and r.ci_high is not None
            hits += r.ci_low <= true - 1 <= r.ci_high
        assert 85 <= hits <= 100, (true, hits)
    strong = did(null_stats(rng, true_effect=1.3))
    assert strong.ci_low is not None and strong.ci_low > 0


def test_reproducible_and_independent_of_row_order():
    stats = null_stats(np.random.default_rng(9), prefixes=25)
    a = did(stats)
    b = did(stats.sample(frac=1.0, random_state=1).reset_index(drop=True))
    assert a == b
    assert did(stats, seed=effects.SEED + 1).ci_low != a.ci_low  # the seed matters


def test_no_holdout_says_why():
    stats = stats_of({"treated": [(1.0, 2.0), (1.0, 3.0)]})
    result = did(stats, known={"treated": 2, "holdout": 0})
    assert not result.ok and result.estimate is None and result.ci_low is None
    assert result.reason.startswith("no holdout prefixes")
    assert did(stats).reason == "no holdout prefix has data in the window"
    assert did(stats.iloc[0:0]).reason == "no treated prefix has data in the window"


def test_no_before_data_says_why():
    stats = stats_of({"treated": [(1.0, 2.0)], "holdout": [(1.0, 1.0), (2.0, 2.0)]})
    stats = stats[~((stats["grp"] == "holdout") & (stats["phase"] == "before"))]
    result = did(stats)
    assert not result.ok and result.reason.startswith("no before data: every holdout prefix")
    assert result.holdout.no_before == 2 and result.holdout.prefixes == 0


def test_prefixes_with_too_few_samples_or_one_phase_are_left_out():
    stats = stats_of({"treated": [(1.0, 2.0), (1.0, 8.0), (1.0, 4.0)], "holdout": [(1.0, 1.0), (1.0, 1.5)]})
    treated = sorted(set(stats[stats["grp"] == "treated"]["prefix"]))
    holdout = sorted(set(stats[stats["grp"] == "holdout"]["prefix"]))
    few = (stats["prefix"] == treated[2]) & (stats["phase"] == "after")
    stats.loc[few, "samples"] = effects.MIN_SAMPLES - 1  # treated ratio 4: too few samples after
    stats = stats[~((stats["prefix"] == treated[1]) & (stats["phase"] == "before"))]  # ratio 8: no before
    stats = stats[~((stats["prefix"] == holdout[1]) & (stats["phase"] == "after"))]  # ratio 1.5: no after
    result = did(stats)
    assert (result.treated.prefixes, result.treated.too_few, result.treated.no_before) == (1, 1, 1)
    assert (result.holdout.prefixes, result.holdout.no_after) == (1, 1)
    assert result.estimate == pytest.approx(2 / 1 - 1)
    assert result.treated.samples_before == 50 and result.treated.samples_after == 50
    only_few = did(stats, min_samples=100)
    assert only_few.reason == "no treated prefix has >= 100 samples both before and after it entered its group"


def test_by_pop_then_all_pops_with_prefixes_counted_per_pop():
    lax = stats_of({"treated": [(1.0, 2.0), (1.0, 2.0)], "holdout": [(1.0, 1.0), (1.0, 1.0)]}, pop="lax")
    ord_ = stats_of({"treated": [(1.0, 1.5), (1.0, 1.5)], "holdout": [(1.0, 1.0), (1.0, 1.0)]}, pop="ord")
    stats = pd.concat([lax, ord_], ignore_index=True)
    assert set(lax["prefix"]) == set(ord_["prefix"])  # the same prefix text in two POPs
    results = did_by_pop(stats, ["lax", "ord"])
    assert [r.scope for r in results] == ["lax", "ord", ALL]
    assert results[0].estimate == pytest.approx(1.0) and results[1].estimate == pytest.approx(0.5)
    assert results[2].treated.prefixes == 4
    assert results[2].estimate == pytest.approx(math.sqrt(2 * 1.5) - 1)
    groups = pd.DataFrame({"pop": ["lax", "lax", "ord"], "grp": ["treated", "holdout", "treated"]})
    no_ord_holdout = did_by_pop(stats[~((stats["pop"] == "ord") & (stats["grp"] == "holdout"))], ["lax", "ord"], groups)
    assert no_ord_holdout[0].ok and no_ord_holdout[1].reason.startswith("no holdout prefixes")
    assert [r.scope for r in did_by_pop(lax, ["lax"])] == ["lax"]  # one POP: no ALL row


def test_bootstrap_in_blocks_for_large_groups(monkeypatch):
    d = np.log(np.random.default_rng(2).lognormal(0, 0.3, 1000))
    whole = effects.bootstrap_means(d, 50, np.random.default_rng(1))
    monkeypatch.setattr(effects, "_CHUNK", 3000)  # 3 resamples per block
    blocks = effects.bootstrap_means(d, 50, np.random.default_rng(1))
    assert len(blocks) == 50 and np.all((blocks > d.min()) & (blocks < d.max()))
    assert abs(whole.std() - blocks.std()) < 0.01 and abs(whole.mean() - d.mean()) < 0.01
