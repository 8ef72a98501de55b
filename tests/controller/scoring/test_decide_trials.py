"""Trials in the decisions (controller/scoring/decide.py with controller/evidence): a selection
starts a switchback trial, each round asks for the arm its realized buckets call for (`next_arm`),
the trial's effect ends it (keep / revert with cooldown, or at its limit), like for like: the
mixed-window prefix whose rate did not change is not reverted, one whose rate truly halves is."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from controller.evidence.load import CELL_COLUMNS, GOODPUT_COLUMNS, Evidence, Trial
from controller.evidence.model import BBR, CUBIC, Effect
from controller.evidence.settings import EvidenceSettings
from controller.evidence.trial import arm_at, next_arm, watch_arm
from controller.scoring.decide import decide, empty_state, summarize
from controller.scoring.settings import ScoringSettings
from tests.controller.scoring.test_decide import NOW, score, state

B = 300
CFG = ScoringSettings(holdout_fraction=0.0)
EV = EvidenceSettings()
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


def row_of(since: int, k: int, arm: str, rate: float, rng: np.random.Generator) -> tuple:
    """Bucket k of a trial started at `since` (the bucket's start: aligned on the boundary): 40
    samples whose ln(rate) has mean ln(rate) and sd 0.3."""
    start = since - since % B
    m = math.log(rate) + float(rng.normal(0, 0.05))
    return ("p1", P, start + k * B, arm, 40, math.exp(m - 0.38), 0, m, 0.09)


def planned(since: int, buckets: int) -> dict[int, str]:
    """bucket start -> the arm the trial asked for there, when every ask was realized."""
    start = since - since % B
    return {start + k * B: arm_at("p1", P, since, k, EV) for k in range(buckets)}


def cells_for(since: int, rounds: int, bbr_rate: float, cubic_rate: float, seed: int = 1) -> pd.DataFrame:
    """Per-bucket samples of a trial whose every ask was realized: bucket k runs the planned
    schedule's arm (`arm_at`)."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(rounds):
        arm = arm_at("p1", P, since, k, EV)
        rows.append(row_of(since, k, arm, bbr_rate if arm == BBR else cubic_rate, rng))
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def effect_of(since: int, cells: pd.DataFrame, rounds: int, asked: dict[int, str] | None = None) -> Effect:
    """The effect decide() is given at round `rounds` of the trial: the controller's path
    (Evidence: its window from the bucket boundary at or before `since`; a bucket counts when it
    ran the arm asked for there, `planned` unless given)."""
    now = since + rounds * B
    trial = Trial("p1", P, since, now, "trial", "", rounds)
    asks = {("p1", P, since): asked if asked is not None else planned(since, rounds)}
    ev = Evidence(EV, B, [trial], cells, pd.DataFrame(columns=GOODPUT_COLUMNS), now, asked=asks)
    ev.compute()
    return ev.effect(trial)


def effect_after(since: int, rounds: int, bbr_rate: float, cubic_rate: float) -> dict:
    return {("p1", P): effect_of(since, cells_for(since, rounds, bbr_rate, cubic_rate), rounds)}


def test_a_selection_starts_a_trial_on_its_first_blocks_arm() -> None:
    out = run([score(P)], [])
    row = one(out)
    assert row["decision"] == "trial"
    assert row["trial_since"] == NOW
    assert row["algorithm"] == next_arm("p1", P, NOW, 0, 0, EV) == arm_at("p1", P, NOW, 0, EV)
    assert "trial starts" in row["reason"]
    assert bool(row["new"])
    s = summarize(out.reset_index())[0]
    assert (s.new, s.trials, s.selected) == (1, 1, int(row["algorithm"] == BBR))


def test_a_running_trial_goes_on_with_the_schedules_arm_before_min_blocks() -> None:
    since = NOW - 2 * B
    eff = effect_after(since, 2, 2e6, 1e6)
    assert (eff[("p1", P)].n_a, eff[("p1", P)].n_b) == (1, 1)  # the first bucket counts (NOW is mid-bucket)
    out = run([score(P)], [trial_state(since)], eff)
    row = one(out)
    assert row["decision"] == "trial"
    assert row["algorithm"] == next_arm("p1", P, since, 1, 1, EV) == arm_at("p1", P, since, 2, EV)
    assert row["reason"].startswith("trial: 2 of at most 96 blocks realized in pairs")


def test_a_running_trials_next_arm_follows_its_realized_buckets() -> None:
    """Round 3 of a trial whose bucket 1 was mixed, or ran the first arm again (a toggle held by a
    rollout in flight): the schedule goes by the buckets that counted, not by the rounds."""
    since = NOW - 3 * B
    start = since - since % B
    rng = np.random.default_rng(2)
    first = arm_at("p1", P, since, 0, EV)
    other = CUBIC if first == BBR else BBR
    rate = {BBR: 2e6, CUBIC: 1e6}
    asked = {start: first, start + B: other, start + 2 * B: other}  # bucket 1 not realized: asked again
    mixed = [row_of(since, 1, arm, 1e6, rng) for arm in (BBR, CUBIC)]  # half the samples on each arm
    cells = pd.DataFrame(
        [row_of(since, 0, first, rate[first], rng), *mixed, row_of(since, 2, other, rate[other], rng)],
        columns=CELL_COLUMNS,
    )
    eff = effect_of(since, cells, 3, asked)
    assert (eff.n_a, eff.n_b) == (1, 1)
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == "trial" and row["reason"].startswith("trial: 2 of at most 96 blocks")
    # pair 1's first block, where the planned schedule (every round realized) is in its second
    assert row["algorithm"] == next_arm("p1", P, since, 1, 1, EV) == arm_at("p1", P, since, 2, EV)
    assert row["algorithm"] != arm_at("p1", P, since, 3, EV)

    held = pd.DataFrame(
        [row_of(since, k, arm, rate[arm], rng) for k, arm in enumerate([first, first, other])], columns=CELL_COLUMNS
    )
    eff = effect_of(since, held, 3, asked)  # bucket 1 ran the first arm while the other was asked: not counted
    assert (eff.n_a, eff.n_b) == (1, 1)
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["algorithm"] == next_arm("p1", P, since, 1, 1, EV)


def test_a_trial_whose_asks_were_not_realized_runs_out_of_time() -> None:
    since = NOW - EV.max_rounds * B
    start = since - since % B
    rng = np.random.default_rng(3)
    arms = [arm_at("p1", P, since, k, EV) for k in range(5)]  # 5 of 288 buckets counted
    cells = pd.DataFrame([row_of(since, 4 * k, arm, 1e6, rng) for k, arm in enumerate(arms)], columns=CELL_COLUMNS)
    asked = {start + 4 * k * B: arm for k, arm in enumerate(arms)}
    eff = effect_of(since, cells, EV.max_rounds, asked)
    assert eff.n_a + eff.n_b == 5
    blocks = 2 * min(eff.n_a, eff.n_b)
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == EV.trial_at_limit
    assert row["reason"].startswith(
        f"inconclusive: trial ran out of time ({EV.max_rounds} rounds, {blocks} of 96 blocks realized in pairs)"
    )
    # an inconclusive end is no verdict against BBR: the prefix may be selected again after trial_retry
    assert row["cooldown_until"] == NOW + EV.trial_retry_seconds
    assert row["reason"].endswith("may be selected again after 6.0 h")
    # a round earlier it went on
    earlier = one(run([score(P)], [trial_state(since)], {("p1", P): eff}, now=NOW - B))
    assert earlier["decision"] == "trial"


def test_trial_keeps_a_prefix_bbr_helps() -> None:
    since = NOW - 6 * B
    eff = effect_after(since, 6, 2e6, 1e6)[("p1", P)]
    assert eff.low > 0
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == "keep" and row["algorithm"] == "bbr"
    assert row["reason"].startswith("trial kept after 6 realized blocks")
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
    assert row["reason"].startswith("trial reverted after 6 realized blocks")
    assert row["trial_since"] == since  # the revert row names its trial


def test_an_inconclusive_trial_ends_at_its_limit_with_the_settings_decision() -> None:
    since = NOW - EV.trial_blocks * B
    eff = effect_after(since, EV.trial_blocks, 1e6, 1e6)[("p1", P)]
    assert eff.low < 0 < eff.high
    row = one(run([score(P)], [trial_state(since)], {("p1", P): eff}))
    assert row["decision"] == EV.trial_at_limit
    assert row["reason"].startswith("inconclusive: trial reached its limit of 96 realized blocks")
    assert row["cooldown_until"] == NOW + EV.trial_retry_seconds


def test_trials_count_against_the_cap_and_a_denied_trial_is_reverted() -> None:
    since = NOW - B
    out = decide(
        pd.DataFrame([score(P), score("198.51.100.0/24")]),
        pd.DataFrame([trial_state(since)]),
        NOW,
        ScoringSettings(holdout_fraction=0.0, max_per_pop=1),
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


# --- the watch of a prefix on BBR -----------------------------------------------------------------


def watch(estimate: float, low: float, high: float) -> Effect:
    return Effect(estimate, low, high, EV.level, math.log1p(estimate), 0.1, 6, 2, 160)


def kept_state(selected_since: int) -> dict:
    row = state(P, "keep", selected_since=selected_since, baseline=1e6)
    row.update(trial_since=selected_since - 8 * B, trial_effect=0.3, trial_low=0.1, trial_high=0.5)
    return row


def test_a_kept_prefix_that_turns_bad_is_reverted_by_its_watch_after_min_hold() -> None:
    bad = {("p1", P): watch(-0.4, -0.55, -0.2)}
    prev = [kept_state(NOW - 2 * CFG.min_hold_seconds)]
    out = decide(pd.DataFrame([score(P)]), pd.DataFrame(prev), NOW, CFG, evidence=EV, watch_effects=bad)
    row = one(out.set_index("prefix"))
    assert row["decision"] == "revert" and row["algorithm"] == CUBIC
    assert row["reason"].startswith("watch: BBR worse than its holdback buckets: holdback effect -40% [-55%, -20%]")
    assert row["cooldown_until"] == NOW + CFG.cooldown_seconds
    # within its min hold the watch says so but the prefix stays
    young = [kept_state(NOW - CFG.min_hold_seconds // 2)]
    out = decide(pd.DataFrame([score(P)]), pd.DataFrame(young), NOW, CFG, evidence=EV, watch_effects=bad)
    assert one(out.set_index("prefix"))["decision"] == "keep"
    # a margin: -20% at worst is within a 25% margin
    wide = dataclasses.replace(CFG, revert_margin=0.25)
    out = decide(pd.DataFrame([score(P)]), pd.DataFrame(prev), NOW, wide, evidence=EV, watch_effects=bad)
    assert one(out.set_index("prefix"))["decision"] == "keep"


def test_a_kept_prefix_that_stays_good_stays_and_runs_its_holdback_buckets() -> None:
    good = {("p1", P): watch(0.3, 0.1, 0.5)}
    since = NOW - 2 * CFG.min_hold_seconds
    arms, reasons = [], []
    for k in range(40):
        now = NOW + k * B
        out = decide(pd.DataFrame([score(P)]), pd.DataFrame([kept_state(since)]), now, CFG, evidence=EV,
                     watch_effects=good)  # fmt: skip
        row = one(out.set_index("prefix"))
        assert row["decision"] == "keep"
        assert row["algorithm"] == watch_arm("p1", P, since, now - now % B, B, EV)
        arms.append(row["algorithm"])
        reasons.append(row["reason"])
    assert arms.count(CUBIC) == 10  # one bucket of every 4
    assert all("watched: holdback effect +30% [+10%, +50%]" in r for r in reasons)
    assert all(r.endswith("holdback bucket on CUBIC") == (a == CUBIC) for r, a in zip(reasons, arms, strict=True))
    # no watch: always BBR
    off = dataclasses.replace(EV, holdback=0)
    out = decide(pd.DataFrame([score(P)]), pd.DataFrame([kept_state(since)]), NOW, CFG, evidence=off)
    assert one(out.set_index("prefix"))["algorithm"] == BBR


def test_with_trials_off_a_selection_is_watched() -> None:
    """--trial-blocks 0: a selected prefix goes straight to BBR and is watched from then on; one
    that BBR hurts is reverted by its watch (before, it stayed on BBR for good)."""
    off = dataclasses.replace(EV, trial_blocks=0)
    out = decide(pd.DataFrame([score(P)]), empty_state(), NOW, CFG, evidence=off)
    row = one(out.set_index("prefix"))
    assert row["decision"] == "select" and row["algorithm"] == BBR
    assert row["trial_since"] == NOW  # the watch's key: its holdback's asked arms
    prev = state(P, "keep", selected_since=NOW - 2 * CFG.min_hold_seconds, baseline=1e6)
    prev.update(trial_since=NOW - 2 * CFG.min_hold_seconds)
    bad = {("p1", P): watch(-0.6, -0.7, -0.45)}
    out = decide(pd.DataFrame([score(P)]), pd.DataFrame([prev]), NOW, CFG, evidence=off, watch_effects=bad)
    assert one(out.set_index("prefix"))["decision"] == "revert"


def test_over_the_cap_a_prefix_that_never_had_a_trial_leaves_first_without_a_bound() -> None:
    """The store reads a never-trialled row's trial columns as 0 (controller/scoring/state.py):
    that is no evidence, not a "+0%" lower bound."""
    never = state(P, "keep", selected_since=NOW - 10 * B, baseline=1e6)
    never.update(trial_since=0, trial_effect=0.0, trial_low=0.0, trial_high=0.0)
    tried = state("198.51.100.0/24", "keep", selected_since=NOW - 10 * B, baseline=1e6)
    tried.update(trial_since=NOW - 20 * B, trial_effect=0.05, trial_low=-0.02, trial_high=0.12)
    out = decide(
        pd.DataFrame([score(P), score("198.51.100.0/24")]),
        pd.DataFrame([never, tried]),
        NOW,
        ScoringSettings(holdout_fraction=0.0, max_per_pop=1),
        evidence=dataclasses.replace(EV, holdback=0),
    ).set_index("prefix")
    assert out.loc[P, "decision"] == "revert"
    assert "no trial effect interval" in str(out.loc[P, "reason"]) and "+0%" not in str(out.loc[P, "reason"])
    assert out.loc["198.51.100.0/24", "decision"] == "keep"
