"""decide() (controller/scoring/decide.py) decides exactly like the code it replaced
(tests/support/decide_reference.py) on random scores and states: ties, NaNs, POPs with
state only, prefixes in min hold, holdouts, cooldowns, caps, refusals, expiry, unsorted input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from controller.scoring.decide import ON_BBR, OVER_CAP, STATE_COLUMNS, decide, empty_state, summarize
from controller.scoring.settings import ScoringSettings
from tests.support.decide_reference import reference_decide

NOW = 1_709_294_430
HOUR = 3600
DECISIONS = ("select", "keep", "revert", "holdout", "skip")


def _prefixes(rng: np.random.Generator, n: int) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        if rng.random() < 0.7:
            out.add(f"198.{int(rng.integers(0, 256))}.{int(rng.integers(0, 256))}.0/24")
        else:
            out.add(f"2001:db8:{int(rng.integers(0, 65536)):x}:{int(rng.integers(0, 256)) << 8:x}::/56")
    return sorted(out)


def _pick(rng: np.random.Generator, values: list[float], n: int) -> np.ndarray:
    """A few distinct values (ties), NaN among them sometimes."""
    return np.array(values, dtype="float64")[rng.integers(0, len(values), n)]


def random_case(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, ScoringSettings, int]:
    rng = np.random.default_rng(seed)
    pops = [f"pop{i}" for i in range(int(rng.integers(1, 4)))]
    names = _prefixes(rng, int(rng.integers(0, 120)))
    keys = [(p, x) for p in pops for x in names if rng.random() < 0.8]
    scored = [k for k in keys if rng.random() < 0.85]
    stateful = [k for k in keys if rng.random() < 0.6]
    if rng.random() < 0.3 and keys:  # a POP seen only in the state
        stateful += [("popstate", x) for _, x in keys[: int(rng.integers(1, 10))]]
    n = len(scored)
    counted = rng.integers(0, 37, n)
    duty = _pick(rng, [0.0, -0.0, 0.5, 0.6, 0.75, 0.9, 1.0, math.nan], n)
    flap = _pick(rng, [0.0, 0.1, 0.3, 0.31, 0.5, math.nan], n)
    low = _pick(rng, [0.0, 1e5, 1e6, 2e6, 2.5e6, 3e6, math.nan, math.inf], n) * (1 + (rng.random(n) < 0.2))
    scores = pd.DataFrame(
        {
            "pop": [k[0] for k in scored],
            "prefix": [k[1] for k in scored],
            "family": [10 if ":" in k[1] else 2 for k in scored],
            "samples": rng.integers(0, 3, n) * rng.integers(0, 400, n),
            "qualifying": rng.integers(0, 2, n) * rng.integers(0, 300, n),
            "counted_buckets": counted,
            "bad_buckets": rng.integers(0, 37, n),
            "transitions": rng.integers(0, 10, n),
            "duty_cycle": duty,
            "flap_ratio": flap,
            "median_delivery_rate": _pick(rng, [1e6, 2e6, math.nan], n),
            "low_delivery_rate": low,
            "median_min_rtt_ms": _pick(rng, [3.0, 9.99, 10.0, 40.0, math.nan], n),
            "low_rtt_buckets": rng.integers(0, 37, n) * (rng.random(n) < 0.3),
        }
    )
    m = len(stateful)
    decision = np.array(DECISIONS, dtype=object)[rng.integers(0, len(DECISIONS), m)]
    on = np.isin(decision, ON_BBR)
    hold = decision == "holdout"
    state = pd.DataFrame(
        {
            "pop": [k[0] for k in stateful],
            "prefix": [k[1] for k in stateful],
            "decision": decision,
            "selected_since": np.where(on, NOW - rng.choice([1, 23, 24, 25, 48], m) * HOUR, 0),
            "holdout_since": np.where(hold, NOW - rng.choice([0, 1, 24, 30], m) * HOUR, 0),
            "cooldown_until": np.where(rng.random(m) < 0.2, NOW + rng.choice([-1, 0, 1, 5], m) * HOUR, 0),
            "last_seen": np.where(rng.random(m) < 0.9, NOW - rng.choice([0, 1, 100, 167, 168, 200], m) * HOUR, 0),
            "baseline_low_rate": _pick(rng, [0.0, 1e6, 2e6, math.nan], m),
            "trial_since": np.zeros(m, dtype="int64"),
            "trial_effect": np.full(m, math.nan),
            "trial_low": np.full(m, math.nan),
            "trial_high": np.full(m, math.nan),
        }
    )
    cfg = ScoringSettings(
        min_buckets=int(rng.integers(1, 20)),
        holdout_fraction=float(rng.choice([0.0, 0.1, 0.5, 1.0])),
        max_per_pop=int(rng.choice([0, 3, 10, 1000])),
        max_new_per_round=int(rng.choice([0, 1, 2, 5, 100])),
        min_hold_seconds=int(rng.choice([0, 24 * HOUR])),
        revert_margin=float(rng.choice([0.0, 0.05])),
    )
    # unsorted input, as a caller may give it
    return scores.sample(frac=1.0, random_state=seed), state.sample(frac=1.0, random_state=seed + 1), cfg, seed


def refuse_some(prefix: str) -> str | None:
    return "on the deny list" if prefix.endswith("7.0/24") or prefix.startswith("2001:db8:a") else None


def assert_same(new: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert list(new.columns) == list(ref.columns)
    for name in ref.columns:  # string columns: object here, pandas' str dtype in the reference
        assert new[name].dtype == ref[name].dtype or ref[name].dtype.kind in "OT" or str(ref[name].dtype) == "str"
    pd.testing.assert_frame_equal(new, ref, check_dtype=False, check_exact=True)
    assert new["reason"].tolist() == ref["reason"].tolist()


def over_cap_pops(new: pd.DataFrame) -> set[str]:
    """POPs in which decide() shrank the prefixes on BBR to a lowered cap (the reference ignored
    a cap below what was on BBR: issue 25)."""
    capped = new["reason"].astype(str).str.startswith(OVER_CAP)
    return set(new.loc[capped, "pop"].astype(str))


def assert_same_within_cap(new: pd.DataFrame, ref: pd.DataFrame, cfg: ScoringSettings) -> None:
    """Equal wherever the cap holds already; a POP over its cap shrinks to it (the reference kept
    every prefix on BBR, silently)."""
    shrunk = over_cap_pops(new)
    for pop in shrunk:
        mine, theirs = new[new["pop"] == pop], ref[ref["pop"].astype(str) == pop]
        assert int(theirs["decision"].isin(ON_BBR).sum()) > cfg.max_per_pop
        assert int(mine["decision"].isin(ON_BBR).sum()) == cfg.max_per_pop
        assert not mine["decision"].eq("select").any()
    same_new = new[~new["pop"].isin(shrunk)].reset_index(drop=True)
    same_ref = ref[~ref["pop"].astype(str).isin(shrunk)].reset_index(drop=True)
    assert_same(same_new, same_ref)
    assert summarize(same_new) == summarize(same_ref.astype({"pop": object}))


@pytest.mark.parametrize("seed", range(150))
def test_new_decide_equals_reference(seed: int) -> None:
    scores, state, cfg, _ = random_case(seed)
    refuse = refuse_some if seed % 3 == 0 else None
    expire = int(np.random.default_rng(seed).choice([HOUR, 7 * 86400]))
    ref = reference_decide(scores, state, NOW, cfg, expire, refuse=refuse)
    new = decide(scores, state, NOW, dataclasses.replace(cfg, expire_seconds=expire), refuse=refuse)
    assert_same_within_cap(new, ref, cfg)


def test_random_cases_cover_both_sides_of_the_cap() -> None:
    shrunk = sum(bool(over_cap_pops(decide(*random_case(seed)[:2], NOW, random_case(seed)[2]))) for seed in range(40))
    assert 0 < shrunk < 40


def test_equal_on_empty_inputs() -> None:
    scores, state, cfg, _ = random_case(1)
    empty_scores = scores.iloc[0:0]
    new, ref = decide(empty_scores, state, NOW, cfg), reference_decide(empty_scores, state, NOW, cfg)
    assert_same_within_cap(new, ref, cfg)
    assert_same(decide(scores, empty_state(), NOW, cfg), reference_decide(scores, empty_state(), NOW, cfg))
    nothing = decide(empty_scores, empty_state(), NOW, cfg)
    assert nothing.empty and summarize(nothing) == []


def test_the_comparison_can_fail() -> None:
    """A changed rule shows: the reference with another cap decides differently."""
    scores, state, cfg, _ = random_case(4)
    ref = reference_decide(scores, state, NOW, cfg)
    other = ScoringSettings(max_new_per_round=0, min_buckets=1, holdout_fraction=0.0)
    with pytest.raises(AssertionError):
        assert_same(decide(scores, state, NOW, other), ref)


def test_state_columns_unchanged() -> None:
    assert list(STATE_COLUMNS) == [
        "pop",
        "prefix",
        "decision",
        "selected_since",
        "holdout_since",
        "cooldown_until",
        "last_seen",
        "baseline_low_rate",
        "trial_since",
        "trial_effect",
        "trial_low",
        "trial_high",
    ]
