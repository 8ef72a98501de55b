"""controller/evidence/trial.py: the switchback schedule on realized buckets (`next_arm`, and
`arm_at`, the planned schedule of a trial whose every ask was realized) and the sequential rule
(`judge`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from controller.evidence.load import CELL_COLUMNS, GOODPUT_COLUMNS, Evidence, Trial
from controller.evidence.model import BBR, CUBIC, LEVEL, Effect, none
from controller.evidence.settings import EvidenceSettings
from controller.evidence.trial import GO_ON, KEEP, REVERT, arm_at, first_arm, judge, next_arm, short

CFG = EvidenceSettings()
POP = "fra"
SINCE = 1_700_000_100
PREFIXES = [f"10.{i // 256}.{i % 256}.0/24" for i in range(2000)]
OTHER = {BBR: CUBIC, CUBIC: BBR}


def effect(estimate: float, low: float, high: float, n_bbr: int = 2, n_cubic: int = 2) -> Effect:
    return Effect(estimate, low, high, LEVEL, math.log1p(estimate), 0.1, n_bbr, n_cubic, 60)


def realized(prefix: str, asks: str, cfg: EvidenceSettings = CFG) -> tuple[list[str], list[str], list[tuple[int, int]]]:
    """A trial's rounds, one per letter of `asks`: "r" the ask was realized, "h" held (a rollout
    in flight: the bucket ran the arm in force before, and counts for it), "d" dropped (the
    bucket was mixed or had too few samples: not counted).  Returns each round's ask, the arms
    of the counted buckets and the (bbr, cubic) counts each ask was made from."""
    n = {BBR: 0, CUBIC: 0}
    in_force = CUBIC  # a prefix runs CUBIC before its trial
    asked, counted, counts = [], [], []
    for what in asks:
        counts.append((n[BBR], n[CUBIC]))
        arm = next_arm(POP, prefix, SINCE, n[BBR], n[CUBIC], cfg)
        asked.append(arm)
        if what != "h":
            in_force = arm
        if what != "d":
            n[in_force] += 1
            counted.append(in_force)
    counts.append((n[BBR], n[CUBIC]))
    return asked, counted, counts


# --- the schedule --------------------------------------------------------------------------------


@pytest.mark.parametrize("block_rounds", [1, 2, 3])
def test_each_pair_of_blocks_has_one_bbr_and_one_cubic_block(block_rounds: int) -> None:
    cfg = EvidenceSettings(trial_block_rounds=block_rounds)
    for prefix in PREFIXES[:200]:
        asked, counted, counts = realized(prefix, "r" * 8 * block_rounds, cfg)
        assert asked == counted  # every ask realized
        assert counts[-1] == (4 * block_rounds, 4 * block_rounds)
        blocks = [counted[b * block_rounds : (b + 1) * block_rounds] for b in range(8)]
        for block in blocks:  # a block is one arm throughout
            assert len(set(block)) == 1
        for pair in range(4):
            assert {blocks[2 * pair][0], blocks[2 * pair + 1][0]} == {BBR, CUBIC}
            assert blocks[2 * pair][0] == first_arm(POP, prefix, SINCE, pair, cfg.trial_salt)


def test_arm_at_is_next_arm_with_every_ask_realized() -> None:
    for block_rounds in (1, 2, 3):
        cfg = EvidenceSettings(trial_block_rounds=block_rounds)
        for prefix in PREFIXES[:50]:
            n = {BBR: 0, CUBIC: 0}
            for index in range(10 * block_rounds):
                arm = next_arm(POP, prefix, SINCE, n[BBR], n[CUBIC], cfg)
                assert arm_at(POP, prefix, SINCE, index, cfg) == arm
                n[arm] += 1


def test_a_block_of_two_rounds_lasts_two_buckets() -> None:
    cfg = EvidenceSettings(trial_block_rounds=2)
    for prefix in PREFIXES[:100]:
        for r in range(16):
            assert arm_at(POP, prefix, SINCE, r, cfg) == arm_at(POP, prefix, SINCE, r // 2, CFG)
        first = next_arm(POP, prefix, SINCE, 0, 0, cfg)
        one = (1, 0) if first == BBR else (0, 1)
        assert next_arm(POP, prefix, SINCE, *one, cfg) == first  # half a block: the same arm again
        two = (2 * one[0], 2 * one[1])
        assert next_arm(POP, prefix, SINCE, *two, cfg) == OTHER[first]


def test_an_ask_that_was_not_realized_is_asked_again() -> None:
    """A dropped bucket (mixed, too few samples) changes no count: the same arm is asked again,
    and the counted buckets follow the planned schedule, only later."""
    asks = "rdrdddrrdrdrrddr"
    for prefix in PREFIXES[:100]:
        asked, counted, _ = realized(prefix, asks)
        assert counted == [arm_at(POP, prefix, SINCE, k, CFG) for k in range(asks.count("r"))]
        for k in range(len(asks) - 1):
            if asks[k] == "d":
                assert asked[k + 1] == asked[k]


@pytest.mark.parametrize("block_rounds", [1, 2])
def test_a_held_ask_is_made_up_for(block_rounds: int) -> None:
    """A held round's bucket counts for the arm in force; the arm a whole block behind is asked
    for until it catches up, so the arms stay balanced and the pairs get done."""
    cfg = EvidenceSettings(trial_block_rounds=block_rounds)
    rng = np.random.default_rng(11)
    for prefix in PREFIXES[:300]:
        asks = "".join(rng.choice(["r", "h", "d"], p=[0.6, 0.25, 0.15], size=40 * block_rounds))
        asked, _, counts = realized(prefix, asks, cfg)
        for k, (arm, (n_bbr, n_cubic)) in enumerate(zip(asked, counts, strict=False)):
            if n_bbr // block_rounds != n_cubic // block_rounds:
                assert arm == (BBR if n_bbr < n_cubic else CUBIC)
            assert abs(n_bbr - n_cubic) <= block_rounds + asks[:k].count("h")
        assert min(counts[-1]) // block_rounds * 2 >= cfg.trial_blocks  # every pair done


def test_the_first_arm_is_bbr_about_half_the_time() -> None:
    n = len(PREFIXES)
    bbr = sum(next_arm(POP, p, SINCE, 0, 0, CFG) == BBR for p in PREFIXES)
    # binomial(2000, 1/2): sd 22.4; 4 sd either side
    assert abs(bbr - n / 2) < 4 * math.sqrt(n / 4)
    # every pair flips its own coin: the second pair's order is independent of the first's
    same = sum(next_arm(POP, p, SINCE, 0, 0, CFG) == next_arm(POP, p, SINCE, 1, 1, CFG) for p in PREFIXES)
    assert abs(same - n / 2) < 4 * math.sqrt(n / 4)
    # and so is the same prefix's coin at another start
    other = sum(next_arm(POP, p, SINCE, 0, 0, CFG) == next_arm(POP, p, SINCE + 300, 0, 0, CFG) for p in PREFIXES)
    assert abs(other - n / 2) < 4 * math.sqrt(n / 4)


def test_the_schedule_is_stable() -> None:
    for prefix in PREFIXES[:50]:
        arms = [arm_at(POP, prefix, SINCE, r, CFG) for r in range(8)]
        assert arms == [arm_at(POP, prefix, SINCE, r, EvidenceSettings()) for r in range(8)]
        assert first_arm(POP, prefix, SINCE, 0, CFG.trial_salt) == arms[0] == next_arm(POP, prefix, SINCE, 0, 0, CFG)
        # the same counts give the same ask, whatever rounds they took
        assert next_arm(POP, prefix, SINCE, 2, 1, CFG) == next_arm(POP, prefix, SINCE, 2, 1, EvidenceSettings())
    # the salt is part of the coin
    flips = [first_arm(POP, p, SINCE, 0, CFG.trial_salt) != first_arm(POP, p, SINCE, 0, "other") for p in PREFIXES]
    assert 0 < sum(flips) < len(PREFIXES)
    # a fixed value: a change of the hash would change every running trial's schedule
    got = [arm_at(POP, "192.0.2.0/24", SINCE, r, CFG) for r in range(8)]
    assert got == [CUBIC, BBR, CUBIC, BBR, CUBIC, BBR, BBR, CUBIC]
    assert next_arm(POP, "192.0.2.0/24", SINCE, 3, 2, CFG) == CUBIC  # pair 2 (cubic first) is behind on cubic


# --- the rule ------------------------------------------------------------------------------------


def test_keep_when_the_lower_bound_is_above_zero() -> None:
    v = judge(effect(0.3, 0.1, 0.5), 4, CFG)
    assert v.action == KEEP
    assert (
        v.why == "trial kept after 4 blocks: effect +30% [+10%, +50%] over 2 bbr / 2 cubic buckets, lower bound above 0"
    )


def test_revert_when_the_upper_bound_is_below_zero() -> None:
    v = judge(effect(-0.3, -0.5, -0.1, 3, 2), 5, CFG)
    assert v.action == REVERT
    assert v.why.startswith("trial reverted after 5 blocks: effect -30% [-50%, -10%] over 3 bbr / 2 cubic buckets")
    assert v.why.endswith("upper bound below 0")


def test_the_blocks_are_the_buckets_the_effect_counted() -> None:
    """Not the rounds: a trial whose rounds were held or dropped has fewer blocks than rounds."""
    v = judge(effect(0.3, 0.1, 0.5, 2, 2), 9, CFG)
    assert v.action == KEEP and v.why.startswith("trial kept after 4 blocks")
    v = judge(effect(0.3, 0.1, 0.5, 2, 1), 9, CFG)  # 3 blocks realized in 9 rounds: not yet
    assert v.action == GO_ON and v.why.startswith("trial block 4 of at most 8")
    # blocks of two buckets: 5 buckets are 2 whole blocks
    cfg = EvidenceSettings(trial_block_rounds=2)
    assert judge(effect(0.3, 0.1, 0.5, 3, 2), 5, cfg).action == GO_ON
    assert judge(effect(0.3, 0.1, 0.5, 4, 4), 8, cfg).why.startswith("trial kept after 4 blocks")


def test_go_on_while_the_interval_holds_zero() -> None:
    for n_bbr, n_cubic in [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (3, 3), (4, 3), (5, 3), (7, 3)]:
        v = judge(effect(0.05, -0.1, 0.2, n_bbr, n_cubic), n_bbr + n_cubic, CFG)
        assert v.action == GO_ON
        blocks = n_bbr + n_cubic
        assert v.why.startswith(f"trial block {blocks + 1} of at most {CFG.trial_blocks}: effect +5% [-10%, +20%]")


def test_never_before_min_blocks() -> None:
    assert CFG.trial_min_blocks == 4
    for n_bbr, n_cubic in [(0, 0), (1, 1), (2, 1), (1, 2), (3, 0)]:
        assert judge(effect(3.0, 2.0, 4.0, n_bbr, n_cubic), 20, CFG).action == GO_ON
        assert judge(effect(-0.9, -0.95, -0.8, n_bbr, n_cubic), 20, CFG).action == GO_ON
    cfg = EvidenceSettings(trial_min_blocks=2, trial_blocks=6)
    assert judge(effect(3.0, 2.0, 4.0, 1, 0), 1, cfg).action == GO_ON
    assert judge(effect(3.0, 2.0, 4.0, 1, 1), 2, cfg).action == KEEP


@pytest.mark.parametrize("at_limit", ["revert", "keep"])
def test_at_the_limit_the_settings_decide(at_limit: str) -> None:
    """The limit is the pairs done: trial_blocks / 2 blocks on each arm."""
    cfg = EvidenceSettings(trial_at_limit=at_limit)
    for n_bbr, n_cubic in [(4, 4), (5, 4), (4, 6), (7, 7)]:
        v = judge(effect(0.05, -0.1, 0.2, n_bbr, n_cubic), n_bbr + n_cubic, cfg)
        assert v.action == {"revert": REVERT, "keep": KEEP}[at_limit]
        assert v.why.startswith(f"trial ended at its limit of {cfg.trial_blocks} blocks, inconclusive")
        assert v.why.endswith(f"the settings' decision: {at_limit}")
    # 8 blocks, but not 4 on each arm (held rounds): the last pair is not done, it goes on
    assert judge(effect(0.05, -0.1, 0.2, 5, 3), 8, cfg).action == GO_ON
    assert judge(effect(0.05, -0.1, 0.2, 4, 3), 7, cfg).action == GO_ON
    # a conclusive interval at the limit is the rule's, not the settings'
    assert judge(effect(0.3, 0.1, 0.5, 4, 4), 8, cfg).action == KEEP
    assert judge(effect(-0.3, -0.5, -0.1, 4, 4), 8, cfg).action == REVERT
    # blocks of two buckets: the limit is 4 blocks of 2 on each arm
    two = dataclasses.replace(cfg, trial_block_rounds=2)
    assert judge(effect(0.05, -0.1, 0.2, 8, 7), 15, two).action == GO_ON
    assert judge(effect(0.05, -0.1, 0.2, 8, 8), 16, two).why.startswith("trial ended at its limit of 8 blocks")


@pytest.mark.parametrize("at_limit", ["revert", "keep"])
def test_a_trial_that_runs_out_of_time_ends_at_its_limit(at_limit: str) -> None:
    """Rounds whose asks were not realized (held, mixed) do not end a trial, the time does:
    max_rounds (0: 3 x trial_blocks x trial_block_rounds) rounds after its start."""
    cfg = EvidenceSettings(trial_at_limit=at_limit)
    assert cfg.max_rounds == 24
    slow = effect(0.05, -0.1, 0.2, 3, 2)
    assert judge(slow, 23, cfg).action == GO_ON
    for rounds in (24, 30):
        v = judge(slow, rounds, cfg)
        assert v.action == {"revert": REVERT, "keep": KEEP}[at_limit]
        assert v.why.startswith(f"trial ran out of time ({rounds} rounds, 5 of 8 blocks realized), inconclusive")
        assert v.why.endswith(f"the settings' decision: {at_limit}")
    # a conclusive interval is still the rule's
    assert judge(effect(0.3, 0.1, 0.5, 3, 2), 30, cfg).action == KEEP
    # the setting, and its default with blocks of two rounds
    assert judge(slow, 10, dataclasses.replace(cfg, trial_max_rounds=10)).why.startswith("trial ran out of time")
    assert judge(slow, 9, dataclasses.replace(cfg, trial_max_rounds=10)).action == GO_ON
    assert EvidenceSettings(trial_block_rounds=2).max_rounds == 48
    assert judge(slow, 47, EvidenceSettings(trial_block_rounds=2)).action == GO_ON


def test_an_effect_without_an_estimate_goes_on() -> None:
    missing = none("too few buckets: 1 bbr, 3 cubic (needs 2 each)", n_a=1, n_b=3)
    for rounds in range(CFG.max_rounds):
        v = judge(missing, rounds, CFG)
        assert v.action == GO_ON
        assert "effect n/a (too few buckets: 1 bbr, 3 cubic (needs 2 each))" in v.why
    assert judge(missing, CFG.max_rounds, CFG).action == REVERT  # the default at the limit
    assert judge(missing, CFG.max_rounds, dataclasses.replace(CFG, trial_at_limit="keep")).action == KEEP
    assert judge(none("no arm buckets in the trial"), CFG.max_rounds, CFG).why.startswith(
        "trial ran out of time (24 rounds, 0 of 8 blocks realized)"
    )
    # an estimate without an interval is no evidence either
    no_interval = Effect(0.5, math.nan, math.nan, LEVEL, math.log(1.5), math.nan, 3, 3, 10)
    assert judge(no_interval, 6, CFG).action == GO_ON


def test_short() -> None:
    assert short(effect(0.3, 0.1, 0.5)) == "+30% [+10%, +50%]"
    assert short(none("no samples")) == "n/a (no samples)"


# --- the blocks the rule counts against the buckets the effect counts ---------------------------

B = 300
DELAY = 30  # controller/control/settings.py's default round delay for 5-minute buckets


def judged(since: int, boundary: int, rounds: int) -> Effect:
    """The effect that decide() judges at round `rounds` of a trial started at `since` (round 0
    ran in the bucket starting at `boundary`), each round's bucket on its planned arm."""
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
    until = boundary + rounds * B + (since - boundary)  # the round at `rounds` buckets after the start
    trial = Trial(POP, PREFIXES[0], since, until, "trial", "", 0)
    ev = Evidence(
        CFG, B, [trial], pd.DataFrame(rows, columns=CELL_COLUMNS), pd.DataFrame(columns=GOODPUT_COLUMNS), until
    )
    assert ev.window(trial)[0] == boundary  # the window starts at the bucket boundary
    ev.compute()
    return ev.effect(trial)


@pytest.mark.parametrize("delay", [0, DELAY])
def test_every_bucket_of_the_trial_counts(delay: int) -> None:
    """A round on the boundary and one 30 s after it (a trial started mid-bucket) count the same
    buckets: the first bucket too, and every whole bucket before the judging round."""
    for rounds in (4, 6, 8):
        e = judged(SINCE + delay, SINCE, rounds)
        assert (e.n_a, e.n_b) == (rounds // 2, rounds // 2)
        # what decide() passes: rounds_done = (now - since) // bucket_seconds
        v = judge(e, rounds, CFG)
        assert f"over {rounds // 2} bbr / {rounds // 2} cubic buckets" in v.why
        assert v.action == GO_ON or f"after {rounds} blocks" in v.why or "limit of 8 blocks" in v.why
