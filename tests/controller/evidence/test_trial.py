"""controller/evidence/trial.py: the switchback schedule (`arm_at`) and the sequential rule
(`judge`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from controller.evidence.load import CELL_COLUMNS, GOODPUT_COLUMNS, Evidence, Trial
from controller.evidence.model import BBR, CUBIC, LEVEL, Effect, none
from controller.evidence.settings import EvidenceConfig
from controller.evidence.trial import GO_ON, KEEP, REVERT, arm_at, first_arm, judge, short

CFG = EvidenceConfig()
POP = "fra"
SINCE = 1_700_000_100
PREFIXES = [f"10.{i // 256}.{i % 256}.0/24" for i in range(2000)]


def effect(estimate: float, low: float, high: float) -> Effect:
    return Effect(estimate, low, high, LEVEL, math.log1p(estimate), 0.1, 3, 3, 60)


# --- the schedule --------------------------------------------------------------------------------


@pytest.mark.parametrize("block_rounds", [1, 2, 3])
def test_each_pair_of_blocks_has_one_bbr_and_one_cubic_block(block_rounds: int) -> None:
    cfg = EvidenceConfig(trial_block_rounds=block_rounds)
    for prefix in PREFIXES[:200]:
        arms = [arm_at(POP, prefix, SINCE, r, cfg) for r in range(8 * block_rounds)]
        blocks = [arms[b * block_rounds : (b + 1) * block_rounds] for b in range(8)]
        for block in blocks:  # a block is one arm throughout
            assert len(set(block)) == 1
        for pair in range(4):
            assert {blocks[2 * pair][0], blocks[2 * pair + 1][0]} == {BBR, CUBIC}


def test_a_block_of_two_rounds_lasts_two_rounds() -> None:
    cfg = EvidenceConfig(trial_block_rounds=2)
    one = EvidenceConfig()
    for prefix in PREFIXES[:100]:
        for r in range(16):
            assert arm_at(POP, prefix, SINCE, r, cfg) == arm_at(POP, prefix, SINCE, r // 2, one)


def test_the_first_arm_is_bbr_about_half_the_time() -> None:
    n = len(PREFIXES)
    bbr = sum(arm_at(POP, p, SINCE, 0, CFG) == BBR for p in PREFIXES)
    # binomial(2000, 1/2): sd 22.4; 4 sd either side
    assert abs(bbr - n / 2) < 4 * math.sqrt(n / 4)
    # every pair flips its own coin: the second pair's order is independent of the first's
    same = sum(arm_at(POP, p, SINCE, 0, CFG) == arm_at(POP, p, SINCE, 2, CFG) for p in PREFIXES)
    assert abs(same - n / 2) < 4 * math.sqrt(n / 4)
    # and so is the same prefix's coin at another start
    other = sum(arm_at(POP, p, SINCE, 0, CFG) == arm_at(POP, p, SINCE + 300, 0, CFG) for p in PREFIXES)
    assert abs(other - n / 2) < 4 * math.sqrt(n / 4)


def test_the_schedule_is_stable() -> None:
    for prefix in PREFIXES[:50]:
        arms = [arm_at(POP, prefix, SINCE, r, CFG) for r in range(8)]
        assert arms == [arm_at(POP, prefix, SINCE, r, EvidenceConfig()) for r in range(8)]
        assert first_arm(POP, prefix, SINCE, 0, CFG.trial_salt) == arms[0]
    # the salt is part of the coin
    flips = [first_arm(POP, p, SINCE, 0, CFG.trial_salt) != first_arm(POP, p, SINCE, 0, "other") for p in PREFIXES]
    assert 0 < sum(flips) < len(PREFIXES)
    # a fixed value: a change of the hash would change every running trial's schedule
    got = [arm_at(POP, "192.0.2.0/24", SINCE, r, CFG) for r in range(8)]
    assert got == [CUBIC, BBR, CUBIC, BBR, CUBIC, BBR, BBR, CUBIC]


# --- the rule ------------------------------------------------------------------------------------


def test_keep_when_the_lower_bound_is_above_zero() -> None:
    v = judge(effect(0.3, 0.1, 0.5), CFG.trial_min_blocks, CFG)
    assert v.action == KEEP
    assert (
        v.why == "trial kept after 4 blocks: effect +30% [+10%, +50%] over 3 bbr / 3 cubic buckets, lower bound above 0"
    )


def test_revert_when_the_upper_bound_is_below_zero() -> None:
    v = judge(effect(-0.3, -0.5, -0.1), 5, CFG)
    assert v.action == REVERT
    assert v.why.startswith("trial reverted after 5 blocks: effect -30% [-50%, -10%]")
    assert v.why.endswith("upper bound below 0")


def test_go_on_while_the_interval_holds_zero() -> None:
    for blocks in range(CFG.trial_blocks):
        v = judge(effect(0.05, -0.1, 0.2), blocks, CFG)
        assert v.action == GO_ON
        assert v.why.startswith(f"trial block {blocks + 1} of at most {CFG.trial_blocks}: effect +5% [-10%, +20%]")


def test_never_before_min_blocks() -> None:
    assert CFG.trial_min_blocks == 4
    for blocks in range(CFG.trial_min_blocks):
        assert judge(effect(3.0, 2.0, 4.0), blocks, CFG).action == GO_ON
        assert judge(effect(-0.9, -0.95, -0.8), blocks, CFG).action == GO_ON
    cfg = EvidenceConfig(trial_min_blocks=2, trial_blocks=6)
    assert judge(effect(3.0, 2.0, 4.0), 1, cfg).action == GO_ON
    assert judge(effect(3.0, 2.0, 4.0), 2, cfg).action == KEEP


@pytest.mark.parametrize("at_limit", ["revert", "keep"])
def test_at_the_limit_the_settings_decide(at_limit: str) -> None:
    cfg = EvidenceConfig(trial_at_limit=at_limit)
    for blocks in (cfg.trial_blocks, cfg.trial_blocks + 3):
        v = judge(effect(0.05, -0.1, 0.2), blocks, cfg)
        assert v.action == {"revert": REVERT, "keep": KEEP}[at_limit]
        assert v.why.startswith(f"trial ended at its limit of {cfg.trial_blocks} blocks, inconclusive")
        assert v.why.endswith(f"the settings' decision: {at_limit}")
    # the block before the limit goes on
    assert judge(effect(0.05, -0.1, 0.2), cfg.trial_blocks - 1, cfg).action == GO_ON
    # a conclusive interval at the limit is the rule's, not the settings'
    assert judge(effect(0.3, 0.1, 0.5), cfg.trial_blocks, cfg).action == KEEP
    assert judge(effect(-0.3, -0.5, -0.1), cfg.trial_blocks, cfg).action == REVERT


def test_an_effect_without_an_estimate_goes_on() -> None:
    missing = none("too few buckets: 1 bbr, 3 cubic (needs 2 each)")
    for blocks in range(CFG.trial_blocks):
        v = judge(missing, blocks, CFG)
        assert v.action == GO_ON
        assert "effect n/a (too few buckets: 1 bbr, 3 cubic (needs 2 each))" in v.why
    assert judge(missing, CFG.trial_blocks, CFG).action == REVERT  # the default at the limit
    assert judge(missing, CFG.trial_blocks, dataclasses.replace(CFG, trial_at_limit="keep")).action == KEEP
    # an estimate without an interval is no evidence either
    no_interval = Effect(0.5, math.nan, math.nan, LEVEL, math.log(1.5), math.nan, 2, 2, 10)
    assert judge(no_interval, CFG.trial_min_blocks + 1, CFG).action == GO_ON


def test_short() -> None:
    assert short(effect(0.3, 0.1, 0.5)) == "+30% [+10%, +50%]"
    assert short(none("no samples")) == "n/a (no samples)"


# --- the blocks the rule counts against the buckets the effect counts ---------------------------

B = 300
DELAY = 30  # controller/control/settings.py's default round delay for 5-minute buckets


def judged_buckets(since: int, boundary: int, rounds: int) -> int:
    """The buckets behind the effect that decide() judges at round `rounds` of a trial started at
    `since` (round 0 ran in the bucket starting at `boundary`), each round's bucket on its arm."""
    rng = np.random.default_rng(3)
    rows = [
        (
            POP,
            PREFIXES[0],
            boundary + k * B,
            arm_at(POP, PREFIXES[0], since, k, CFG),
            20,
            float(rng.uniform(1e6, 2e6)),
            0,
        )
        for k in range(rounds + 1)
    ]
    until = boundary + rounds * B  # the window end of the round at boundary + rounds * B + delay
    trial = Trial(POP, PREFIXES[0], since, until, "trial", "", 0)
    ev = Evidence(
        CFG, B, [trial], pd.DataFrame(rows, columns=CELL_COLUMNS), pd.DataFrame(columns=GOODPUT_COLUMNS), until
    )
    ev.compute()
    e = ev.effect(trial)
    return e.n_a + e.n_b


def test_rounds_on_the_boundary_count_every_block() -> None:
    # decide() passes blocks_done = (now - since) // bucket_seconds: 6 here
    assert judged_buckets(SINCE, SINCE, 6) == 6


def test_rounds_after_the_boundary_count_every_block() -> None:
    assert judged_buckets(SINCE + DELAY, SINCE, 6) == 6
