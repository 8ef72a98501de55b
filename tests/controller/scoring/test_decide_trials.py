"""Trials in the decisions (controller/scoring/decide.py with controller/evidence): a selection
starts a switchback trial, the trial's effect ends it (keep / revert with cooldown), like for like:
the mixed-window prefix whose rate did not change is not reverted, one whose rate truly halves is."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from controller.evidence.model import BBR, CUBIC, arm_buckets, trial_effects
from controller.evidence.settings import EvidenceConfig
from controller.evidence.trial import arm_at
from controller.scoring.decide import decide, empty_state, summarize
from controller.scoring.settings import ScoringConfig
from tests.controller.scoring.test_decide import NOW, score, state

B = 300
CFG = ScoringConfig(holdout_fraction=0.0)
EV = EvidenceConfig()
P = "192.0.2.0/24"


def trial_state(since: int, **kw: object) -> dict:
    row = state(P, "trial", selected_since=since, baseline=1e6)
    row.update({"trial_since": since, **kw})
    return row


def one(out: pd.DataFrame, prefix: str = P) -> dict[str, Any]:
    return {str(k): v for k, v in out.loc[prefix].to_dict().items()}


def run(scores: list[dict], previous: list[dict], effects: dict | None = None, now: int = NOW) -> pd.DataFrame:
    prev = pd.DataFrame(previous) if previous else empty_state()
    out = decide(pd.DataFrame(scores), prev, now, CFG, evidence=EV, trial_effects=effects or {})
    return out.set_index("prefix")


def cells_for(since: int, rounds: int, bbr_rate: float, cubic_rate: float, seed: int = 1) -> pd.DataFrame:
    """Per-bucket samples of a trial: each round's bucket runs the arm the schedule gave it."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(rounds):
        arm = arm_at("p1", P, since, k, EV)
        rate = bbr_rate if arm == BBR else cubic_rate
        rows.append(("p1", P, since + k * B, arm, 40, rate * float(np.exp(rng.normal(0, 0.05)))))
    return pd.DataFrame(rows, columns=["pop", "prefix", "ts", "arm", "samples", "value"])


def effect_after(since: int, rounds: int, bbr_rate: float, cubic_rate: float) -> dict:
    buckets = arm_buckets(cells_for(since, rounds, bbr_rate, cubic_rate))
    now = since + rounds * B
    return trial_effects(buckets, {("p1", P): (since, now)}, EV.level, EV.min_arm_buckets, B)


def test_a_selection_starts_a_trial_on_its_first_blocks_arm() -> None:
    out = run([score(P)], [])
    row = one(out)
    assert row["decision"] == "trial"
    assert row["trial_since"] == NOW
    assert row["algorithm"] == arm_at("p1", P, NOW, 0, EV)
    assert "trial starts" in row["reason"]
    assert bool(row["new"])
    s = summarize(out.reset_index())[0]
    assert (s.new, s.trials, s.selected) == (1, 1, int(row["algorithm"] == BBR))


def test_a_running_trial_goes_on_with_the_schedules_arm_before_min_blocks() -> None:
    since = NOW - 2 * B
    eff = effect_after(since, 2, 2e6, 1e6)
    out = run([score(P)], [trial_state(since)], {("p1", P): eff[("p1", P)]})
    row = one(out)
    assert row["decision"] == "trial"
    assert row["algorithm"] == arm_at("p1", P, since, 2, EV)
    assert row["reason"].startswith("trial block 3")


def test_trial_keeps_a_prefix_bbr_helps() -> None:
    since = NOW - 6 * B
    eff = effect_after(since, 6, 2e6, 1e6)[("p1", P)]
    assert eff.low > 0
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == "keep" and row["algorithm"] == "bbr"
    assert row["reason"].startswith("trial kept after 6 blocks")
    assert row["trial_since"] == since and math.isclose(row["trial_effect"], eff.estimate)
    # the next round: on BBR for good, the trial's effect in the reason
    kept = state(P, "keep", selected_since=NOW, baseline=1e6)
    kept.update(trial_since=since, trial_effect=eff.estimate, trial_low=eff.low, trial_high=eff.high)
    later = one(run([score(P)], [kept], now=NOW + B))
    assert later["decision"] == "keep" and later["reason"].startswith("on BBR: kept by its trial")


def test_mixed_window_prefix_whose_rate_did_not_change_is_not_reverted() -> None:
    """Its rate is the same on both arms: the trial cannot show harm, so no revert."""
    since = NOW - 6 * B
    eff = effect_after(since, 6, 1e6, 1e6)[("p1", P)]
    assert eff.low < 0 < eff.high
    row = one(run([score(P, low=0.11e6)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == "trial"


def test_a_prefix_whose_rate_truly_halves_is_reverted_with_cooldown() -> None:
    since = NOW - 6 * B
    eff = effect_after(since, 6, 0.5e6, 1e6)[("p1", P)]
    assert eff.high < 0
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == "revert" and row["algorithm"] == CUBIC
    assert row["cooldown_until"] == NOW + CFG.cooldown_seconds
    assert row["reason"].startswith("trial reverted after 6 blocks")
    assert row["trial_since"] == since  # the revert row names its trial


def test_an_inconclusive_trial_ends_at_its_limit_with_the_settings_decision() -> None:
    since = NOW - EV.trial_blocks * B
    eff = effect_after(since, EV.trial_blocks, 1e6, 1e6)[("p1", P)]
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == EV.trial_at_limit
    assert "limit" in row["reason"]


def test_trials_count_against_the_cap_and_a_denied_trial_is_reverted() -> None:
    since = NOW - B
    out = decide(
        pd.DataFrame([score(P), score("198.51.100.0/24")]),
        pd.DataFrame([trial_state(since)]),
        NOW,
        ScoringConfig(holdout_fraction=0.0, max_per_pop=1),
        evidence=EV,
        trial_effects={},
        refuse=None,
    ).set_index("prefix")
    assert out.loc["198.51.100.0/24", "decision"] == "skip"
    assert str(out.loc["198.51.100.0/24", "reason"]).startswith("capped")
    denied = decide(
        pd.DataFrame([score(P)]),
        pd.DataFrame([trial_state(since)]),
        NOW,
        CFG,
        evidence=EV,
        trial_effects={},
        refuse=lambda prefix: "on the deny list",
    ).set_index("prefix")
    assert one(denied)["decision"] == "revert" and one(denied)["reason"] == "denied: on the deny list"
