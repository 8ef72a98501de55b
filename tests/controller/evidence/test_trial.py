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
from controller.evidence.trial import (
    GO_ON,
    INCONCLUSIVE,
    KEEP,
    REVERT,
    arm_at,
    first_arm,
    judge,
    next_arm,
    short,
    watch_arm,
    watch_verdict,
)

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
        assert min(counts[-1]) // block_rounds * 2 >= 8  # the pairs get done: 4 at least in 40 rounds


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
    assert v.why == (
        "trial kept after 4 realized blocks: effect +30% [+10%, +50%] over 2 realized pairs (60 samples), "
        "lower bound above 0"
    )


def test_revert_when_the_upper_bound_is_below_zero() -> None:
    v = judge(effect(-0.3, -0.5, -0.1, 3, 2), 5, CFG)
    assert v.action == REVERT
    assert v.why.startswith("trial reverted after 4 realized blocks: effect -30% [-50%, -10%] over 2 realized pairs")
    assert v.why.endswith("upper bound below 0")


def test_the_blocks_are_the_realized_pairs() -> None:
    """Not the rounds, nor a block whose partner has not run yet: a trial whose rounds were held
    or dropped has fewer blocks than rounds, and an unpaired block waits."""
    v = judge(effect(0.3, 0.1, 0.5, 2, 2), 9, CFG)
    assert v.action == KEEP and v.why.startswith("trial kept after 4 realized blocks")
    v = judge(effect(0.3, 0.1, 0.5, 5, 1), 9, CFG)  # one pair and 4 unpaired BBR blocks: not yet
    assert v.action == GO_ON and v.why.startswith("trial: 2 of at most 96 blocks realized in pairs")
    # blocks of two buckets: 3 bbr and 2 cubic buckets are one pair of blocks
    cfg = EvidenceSettings(trial_block_rounds=2)
    assert judge(effect(0.3, 0.1, 0.5, 3, 2), 5, cfg).action == GO_ON
    assert judge(effect(0.3, 0.1, 0.5, 4, 4), 8, cfg).why.startswith("trial kept after 4 realized blocks")


def test_go_on_while_the_interval_holds_zero() -> None:
    for n_bbr, n_cubic in [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (3, 3), (4, 3), (5, 3), (30, 30)]:
        v = judge(effect(0.05, -0.1, 0.2, n_bbr, n_cubic), n_bbr + n_cubic, CFG)
        assert v.action == GO_ON
        blocks = 2 * min(n_bbr, n_cubic)
        assert v.why.startswith(f"trial: {blocks} of at most {CFG.trial_blocks} blocks realized in pairs: "
                                "effect +5% [-10%, +20%]")  # fmt: skip


def test_never_before_min_blocks() -> None:
    assert CFG.trial_min_blocks == 4
    for n_bbr, n_cubic in [(0, 0), (1, 1), (2, 1), (1, 2), (3, 0), (9, 1)]:
        assert judge(effect(3.0, 2.0, 4.0, n_bbr, n_cubic), 20, CFG).action == GO_ON
        assert judge(effect(-0.9, -0.95, -0.8, n_bbr, n_cubic), 20, CFG).action == GO_ON
    cfg = EvidenceSettings(trial_min_blocks=2, trial_blocks=6)
    assert judge(effect(3.0, 2.0, 4.0, 1, 0), 1, cfg).action == GO_ON
    assert judge(effect(3.0, 2.0, 4.0, 1, 1), 2, cfg).action == KEEP


@pytest.mark.parametrize("at_limit", ["revert", "keep"])
def test_at_the_limit_the_settings_decide(at_limit: str) -> None:
    """The limit is the pairs done: trial_blocks / 2 blocks on each arm; the end is inconclusive."""
    cfg = EvidenceSettings(trial_at_limit=at_limit, trial_blocks=8)
    then = "back to CUBIC" if at_limit == "revert" else "stays on BBR, watched"
    for n_bbr, n_cubic in [(4, 4), (5, 4), (4, 6), (7, 7)]:
        v = judge(effect(0.05, -0.1, 0.2, n_bbr, n_cubic), n_bbr + n_cubic, cfg)
        assert v.action == {"revert": REVERT, "keep": KEEP}[at_limit]
        assert v.why.startswith(f"{INCONCLUSIVE}: trial reached its limit of 8 realized blocks")
        assert v.why.endswith(f"{then} (--trial-at-limit {at_limit})")
    # 8 blocks, but not 4 on each arm (held rounds): the last pair is not done, it goes on
    assert judge(effect(0.05, -0.1, 0.2, 5, 3), 8, cfg).action == GO_ON
    assert judge(effect(0.05, -0.1, 0.2, 4, 3), 7, cfg).action == GO_ON
    # a conclusive interval at the limit is the rule's, not the settings'
    assert judge(effect(0.3, 0.1, 0.5, 4, 4), 8, cfg).why.startswith("trial kept")
    assert judge(effect(-0.3, -0.5, -0.1, 4, 4), 8, cfg).why.startswith("trial reverted")
    # blocks of two buckets: the limit is 4 blocks of 2 on each arm
    two = dataclasses.replace(cfg, trial_block_rounds=2)
    assert judge(effect(0.05, -0.1, 0.2, 8, 7), 15, two).action == GO_ON
    assert f"{INCONCLUSIVE}: trial reached its limit of 8" in judge(effect(0.05, -0.1, 0.2, 8, 8), 16, two).why


@pytest.mark.parametrize("at_limit", ["revert", "keep"])
def test_a_trial_that_runs_out_of_time_ends_at_its_limit(at_limit: str) -> None:
    """Rounds whose asks were not realized (held, mixed) do not end a trial, the time does:
    max_rounds (0: 3 x trial_blocks x trial_block_rounds: a day of 5-minute rounds) rounds after its start."""
    cfg = EvidenceSettings(trial_at_limit=at_limit)
    assert cfg.max_rounds == 288 and cfg.max_rounds * 300 == 24 * 3600
    slow = effect(0.05, -0.1, 0.2, 3, 2)
    assert judge(slow, 287, cfg).action == GO_ON
    for rounds in (288, 300):
        v = judge(slow, rounds, cfg)
        assert v.action == {"revert": REVERT, "keep": KEEP}[at_limit]
        assert v.why.startswith(f"{INCONCLUSIVE}: trial ran out of time ({rounds} rounds, 4 of 96 blocks realized")
        assert v.why.endswith(f"(--trial-at-limit {at_limit})")
    # a conclusive interval is still the rule's
    assert judge(effect(0.3, 0.1, 0.5, 3, 2), 300, cfg).why.startswith("trial kept")
    # the setting, and its default with blocks of two rounds
    assert "ran out of time" in judge(slow, 10, dataclasses.replace(cfg, trial_max_rounds=10)).why
    assert judge(slow, 9, dataclasses.replace(cfg, trial_max_rounds=10)).action == GO_ON
    assert EvidenceSettings(trial_block_rounds=2).max_rounds == 576


def test_an_effect_without_an_estimate_goes_on() -> None:
    missing = none("too few realized pairs: 1 bbr, 3 cubic buckets (needs 2 pairs)", n_a=1, n_b=3)
    for rounds in range(0, CFG.max_rounds, 7):
        v = judge(missing, rounds, CFG)
        assert v.action == GO_ON
        assert "effect n/a (too few realized pairs: 1 bbr, 3 cubic buckets (needs 2 pairs))" in v.why
    assert judge(missing, CFG.max_rounds, CFG).action == REVERT  # the default at the limit
    assert judge(missing, CFG.max_rounds, dataclasses.replace(CFG, trial_at_limit="keep")).action == KEEP
    assert judge(none("no arm buckets in the trial"), CFG.max_rounds, CFG).why.startswith(
        f"{INCONCLUSIVE}: trial ran out of time (288 rounds, 0 of 96 blocks realized in pairs)"
    )
    # an estimate without an interval is no evidence either
    no_interval = Effect(0.5, math.nan, math.nan, LEVEL, math.log(1.5), math.nan, 3, 3, 10)
    assert judge(no_interval, 6, CFG).action == GO_ON


def test_short() -> None:
    assert short(effect(0.3, 0.1, 0.5)) == "+30% [+10%, +50%]"
    assert short(none("no samples")) == "n/a (no samples)"


# --- the watch -----------------------------------------------------------------------------------


def test_the_watch_puts_one_bucket_of_each_block_on_cubic() -> None:
    cfg = EvidenceSettings(holdback=4)
    since = SINCE - SINCE % B
    places = []
    for prefix in PREFIXES[:200]:
        arms = [watch_arm(POP, prefix, since + 10, since + k * B, B, cfg) for k in range(40)]
        for block in range(10):
            part = arms[4 * block : 4 * block + 4]
            assert part.count(CUBIC) == 1
            places.append(part.index(CUBIC))
        assert watch_arm(POP, prefix, since, since - B, B, cfg) == BBR  # before the watch began
        assert watch_arm(POP, prefix, since, since, B, EvidenceSettings(holdback=0)) == BBR
    # the place is a uniform draw: 2000 blocks, 500 expected per place (sd 19.4)
    counts = np.bincount(places, minlength=4)
    assert all(abs(c - 500) < 4 * 19.4 for c in counts), counts


def test_the_watch_reverts_only_below_the_margin() -> None:
    assert watch_verdict(effect(-0.3, -0.5, -0.1), 0.0).action == REVERT
    assert "upper bound below 0" in watch_verdict(effect(-0.3, -0.5, -0.1), 0.0).why
    assert watch_verdict(effect(-0.3, -0.5, -0.1), 0.2).action == GO_ON  # -10% is within a 20% margin
    assert watch_verdict(effect(-0.4, -0.6, -0.25), 0.2).action == REVERT
    assert watch_verdict(effect(-0.4, -0.6, -0.25), 0.2).why.endswith("upper bound below -20%")
    assert watch_verdict(effect(0.05, -0.1, 0.2), 0.0).action == GO_ON
    v = watch_verdict(none("too few holdback blocks: 1 (needs 2)"), 0.0)
    assert v.action == GO_ON and v.why == "watched: holdback effect n/a (too few holdback blocks: 1 (needs 2))"


# --- the blocks the rule counts against the buckets the effect counts ---------------------------

B = 300
DELAY = 30  # controller/control/settings.py's default round delay for 5-minute buckets


def judged(since: int, boundary: int, rounds: int, held: int = -1) -> Effect:
    """The effect that decide() judges at round `rounds` of a trial started at `since` (round 0
    ran in the bucket starting at `boundary`), each round's bucket on its planned arm, except
    bucket `held`, which ran the other arm (a held toggle: not counted)."""
    rng = np.random.default_rng(3)
    rows, asked = [], {}
    for k in range(rounds + 1):
        arm = arm_at(POP, PREFIXES[0], since, k, CFG)
        asked[boundary + k * B] = arm
        ran = OTHER[arm] if k == held else arm
        m = float(rng.normal(14.0, 0.2))
        rows.append((POP, PREFIXES[0], boundary + k * B, ran, 20, float(np.exp(m - 0.5)), 0, m, 0.36))
    until = boundary + rounds * B + (since - boundary)  # the round at `rounds` buckets after the start
    trial = Trial(POP, PREFIXES[0], since, until, "trial", "", 0)
    ev = Evidence(
        CFG, B, [trial], pd.DataFrame(rows, columns=CELL_COLUMNS), pd.DataFrame(columns=GOODPUT_COLUMNS), until,
        asked={(POP, PREFIXES[0], since): asked},
    )  # fmt: skip
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
        assert e.samples == 20 * rounds
        # what decide() passes: rounds_done = (now - since) // bucket_seconds
        v = judge(e, rounds, CFG)
        assert f"over {rounds // 2} realized pairs" in v.why


def test_a_bucket_that_ran_the_other_arm_is_not_counted() -> None:
    """The realized arm must be the asked one: a bucket that ran BBR while the trial asked for
    CUBIC (a toggle still waiting for its wave) is neither arm's block."""
    full = judged(SINCE, SINCE, 8)
    for held in range(8):
        e = judged(SINCE, SINCE, 8, held=held)
        assert e.n_a + e.n_b == full.n_a + full.n_b - 1
