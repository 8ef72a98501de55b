"""The error rates of the trial rule at the default EvidenceConfig, by simulation.

controller/evidence/trial.py's rule looks at the data every round, so its error rates are above
the interval's nominal level; this module measures them on whole simulated trials and asserts
bounds set from the measurement (docs/report.md, "Trial error rates at the defaults", gives
the table).  `error_rate_table` returns the table for a bench; `pytest -s` prints it.

One simulated trial, as the controller runs it (controller/scoring/decide.py and
controller/evidence/load.py):

* round 0 selects the prefix and sets the arm of block 0 (`arm_at(..., 0, cfg)`); round r
  (r >= 1) judges the effect over the whole buckets so far, `judge(effect, r // block_rounds,
  cfg)`, and when the verdict is "go on" sets the arm of round r's bucket (`arm_at(..., r,
  cfg)`).  Each round's bucket runs that round's arm; its value is one p10 per bucket.
* the effect is `two_sample` on the ln(p10) of the counted bbr and cubic buckets, which is what
  `trial_effects` computes over `arm_buckets` rows (test_the_simulated_effect_is_the_controllers
  checks this on a simulated trial).
* timing "delayed" (the default of `dyncc control`: rounds run min(30 s, bucket / 10) after the
  bucket boundary, so a trial's `since` is 30 s into the bucket of round 0, and that bucket is
  not counted: `trial_effects` counts buckets with ts >= since); timing "aligned" (delay 0, the
  lab): every round's bucket counts.  At round r the delayed trial has r - 1 buckets, the
  aligned one r.

Per-bucket values (assumptions, `Noise`): ln p10 = mu + ln(1 + effect) * [arm == bbr] + drift +
noise, with mu = ln(1 MB/s) + N(0, 1) per trial (it cancels), the drift a daily cycle of
amplitude 0.25 (random phase) plus a random walk of 0.03 per bucket, and independent noise of
sd 0.35 per bucket.  The 0.35 is an assumption, not a measurement: the repository holds no
production per-bucket spread (docs/performance.md's lab ratios come from 40 transfers per
run, bench/scoring.py's synthetic rows from uniform 0.5x-1.5x sample noise).  The p10 of n
samples whose ln has sd s has a sampling sd of about sqrt(0.1 * 0.9 / n) / phi(z_0.1) * s =
1.71 s / sqrt(n): 0.32 for 10 samples of sd 0.6, so 0.35 stands for a prefix with about ten
qualifying flows per 5-minute bucket.  The value of a bucket is the p10 of its majority arm's
sockets only (arm_cells groups by the socket's congestion control), so the seconds of the
previous arm in a bucket (delay, long connections) change its purity, not its value: not
modelled.  Without drift and at a zero effect the Welch t interval is scale-free, so the
zero-effect rates do not depend on the sd; the others do (a larger sd: lower power, fewer
false reverts at +20 %).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd
import pytest

from controller.evidence.model import ARMS, BBR, Effect, arm_buckets, trial_effects, two_sample
from controller.evidence.settings import EvidenceConfig
from controller.evidence.trial import GO_ON, KEEP, REVERT, Verdict, arm_at, judge

BUCKET = 300  # s: production's 5-minute bucket
DAY_BUCKETS = 86400 // BUCKET
DELAY = min(30, BUCKET // 10)  # s: controller/control/settings.py's default round delay
T0 = 1_700_000_100  # a bucket boundary
POP = "sim"
EFFECTS = (-0.30, -0.20, 0.0, 0.20, 0.50)  # true effect of BBR on the p10: exp(d) - 1
TIMINGS = ("delayed", "aligned")
TRIALS = 2000
SEED = 20240611

Rule = Callable[[Effect, int, EvidenceConfig], Verdict]


@dataclass(frozen=True)
class Noise:
    """Per-bucket ln(p10) model; see the module docstring."""

    sd: float = 0.35  # independent per-bucket noise
    walk_sd: float = 0.03  # random-walk step per bucket
    diurnal: float = 0.25  # amplitude of a daily cycle
    samples: int = 10  # qualifying samples per bucket (only Effect.samples depends on it)


@dataclass(frozen=True)
class Row:
    """The outcomes of `trials` simulated trials at one true effect."""

    timing: str
    effect: float
    trials: int
    keep: float  # share ended keep by the rule (lower bound > 0)
    revert: float  # share ended revert by the rule (upper bound < 0)
    limit: float  # share ended at the limit (the settings' trial_at_limit decision)
    limit_action: str
    blocks: float  # mean blocks done when the trial ended

    @property
    def kept(self) -> float:
        """Every keep, by the rule or at the limit."""
        return self.keep + (self.limit if self.limit_action == KEEP else 0.0)

    @property
    def reverted(self) -> float:
        """Every revert, by the rule or at the limit."""
        return self.revert + (self.limit if self.limit_action == REVERT else 0.0)


def trial_key(i: int) -> tuple[str, int]:
    """The prefix and `since` of simulated trial i (distinct inputs to the schedule's hash)."""
    return f"10.{i // 256 % 256}.{i % 256}.0/24", T0 + (i % 977) * BUCKET


@cache
def schedule(i: int, timing: str, cfg: EvidenceConfig) -> np.ndarray:
    """bbr (True) / cubic per round of trial i, by the controller's `arm_at`."""
    prefix, boundary = trial_key(i)
    since = boundary + (DELAY if timing == "delayed" else 0)
    rounds = cfg.trial_blocks * cfg.trial_block_rounds
    return np.array([arm_at(POP, prefix, since, r, cfg) == BBR for r in range(rounds)])


def bucket_values(is_bbr: np.ndarray, effect: float, noise: Noise, rng: np.random.Generator) -> np.ndarray:
    """ln(p10) of the buckets (one per round) of trials × rounds: `is_bbr` has that shape."""
    trials, rounds = is_bbr.shape
    mu = math.log(1e6) + rng.normal(0.0, 1.0, (trials, 1))
    phase = rng.uniform(0.0, DAY_BUCKETS, (trials, 1))
    k = np.arange(rounds)
    daily = noise.diurnal * np.sin(2 * np.pi * (k + phase) / DAY_BUCKETS)
    walk = np.cumsum(rng.normal(0.0, noise.walk_sd, (trials, rounds)), axis=1)
    return mu + math.log1p(effect) * is_bbr + daily + walk + rng.normal(0.0, noise.sd, (trials, rounds))


@dataclass(frozen=True)
class Outcome:
    action: str
    by_rule: bool
    blocks: int


def run_trial(y: np.ndarray, is_bbr: np.ndarray, timing: str, cfg: EvidenceConfig, noise: Noise, rule: Rule) -> Outcome:
    """The rounds of one trial until its verdict is not "go on" (see the module docstring)."""
    first = 1 if timing == "delayed" else 0
    for r in range(1, len(y) + 1):
        blocks = r // cfg.trial_block_rounds
        ys, arm = y[first:r], is_bbr[first:r]
        effect = two_sample(ys[arm], ys[~arm], noise.samples * len(ys), cfg.level, cfg.min_arm_buckets, ARMS)
        verdict = rule(effect, blocks, cfg)
        if verdict.action != GO_ON:
            # an end before the limit is the rule's; at the limit, only a conclusive interval
            conclusive = effect.ok and effect.has_interval and (effect.low > 0 or effect.high < 0)
            return Outcome(verdict.action, blocks < cfg.trial_blocks or conclusive, blocks)
    raise AssertionError("the rule did not end the trial at its limit")  # judge always ends it


def simulate(
    effect: float,
    timing: str = "delayed",
    trials: int = TRIALS,
    cfg: EvidenceConfig | None = None,
    noise: Noise | None = None,
    seed: int = SEED,
    rule: Rule = judge,
) -> Row:
    """`trials` whole trials at the true `effect`."""
    cfg = cfg or EvidenceConfig()
    noise = noise or Noise()
    rng = np.random.default_rng([seed, round(effect * 1000) + 1000, TIMINGS.index(timing)])
    is_bbr = np.array([schedule(i, timing, cfg) for i in range(trials)])
    y = bucket_values(is_bbr, effect, noise, rng)
    keep = revert = limit = blocks = 0
    for i in range(trials):
        out = run_trial(y[i], is_bbr[i], timing, cfg, noise, rule)
        blocks += out.blocks
        if not out.by_rule:
            limit += 1
        elif out.action == KEEP:
            keep += 1
        else:
            revert += 1
    return Row(timing, effect, trials, keep / trials, revert / trials, limit / trials, cfg.trial_at_limit,
               blocks / trials)  # fmt: skip


def error_rate_table(
    trials: int = TRIALS,
    effects: Sequence[float] = EFFECTS,
    timings: Sequence[str] = TIMINGS,
    cfg: EvidenceConfig | None = None,
    noise: Noise | None = None,
    seed: int = SEED,
) -> list[Row]:
    """The table: one Row per (timing, true effect).  A bench can call this."""
    return [simulate(e, t, trials, cfg, noise, seed) for t in timings for e in effects]


def format_table(rows: Sequence[Row]) -> str:
    """A markdown table of `rows`."""
    lines = [
        "| timing | true effect | keep (rule) | revert (rule) | at the limit | mean blocks |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.timing} | {r.effect * 100:+.0f} % | {r.keep * 100:.1f} % | {r.revert * 100:.1f} % "
            f"| {r.limit * 100:.1f} % ({r.limit_action}) | {r.blocks:.2f} |"
        )
    return "\n".join(lines)


# (what, true effect, the Row field): the rates the rule is judged by
NAMED = (
    ("false keep", 0.0, "keep"),
    ("false keep", -0.20, "keep"),
    ("false revert", 0.0, "revert"),
    ("false revert", 0.20, "revert"),
    ("false revert", 0.50, "revert"),
    ("keep (power)", 0.50, "keep"),
    ("revert", -0.30, "revert"),
)


def named_rates_table(rows: Sequence[Row]) -> str:
    """A markdown table of the named rates (by the rule; the limit's decision apart), one column per timing."""
    timings = list(dict.fromkeys(r.timing for r in rows))
    lines = ["| rate (by the rule) | true effect | " + " | ".join(timings) + " |", "|---|---|" + "---|" * len(timings)]
    for what, effect, field in NAMED:
        cells = []
        for t in timings:
            found = [r for r in rows if r.timing == t and math.isclose(r.effect, effect)]
            cells.append(f"{getattr(found[0], field) * 100:.1f} %" if found else "")
        lines.append(f"| {what} | {effect * 100:+.0f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@cache
def table() -> tuple[Row, ...]:
    started = time.perf_counter()
    rows = tuple(error_rate_table())
    print(f"\n{TRIALS} trials per row, default EvidenceConfig, {time.perf_counter() - started:.1f} s\n")
    print(format_table(rows))
    print()
    print(named_rates_table(rows))
    return rows


def row(timing: str, effect: float) -> Row:
    return next(r for r in table() if r.timing == timing and math.isclose(r.effect, effect))


# Bounds from the measurement (docs/report.md) plus slack; a rule that judged the point
# estimate instead of the interval would keep about half the zero-effect trials.
FALSE_KEEP = {0.0: 0.13, -0.20: 0.04}
FALSE_REVERT = {0.0: 0.13, 0.20: 0.05, 0.50: 0.02}


@pytest.mark.parametrize("timing", TIMINGS)
def test_false_keep_rates_are_bounded(timing: str) -> None:
    for effect, bound in FALSE_KEEP.items():
        r = row(timing, effect)
        assert r.keep < bound, f"{timing}, true effect {effect:+.0%}: false keep {r.keep:.3f} >= {bound}"
        assert r.kept == r.keep  # the default at the limit is revert: no keep there


@pytest.mark.parametrize("timing", TIMINGS)
def test_false_revert_rates_are_bounded(timing: str) -> None:
    for effect, bound in FALSE_REVERT.items():
        r = row(timing, effect)
        assert r.revert < bound, f"{timing}, true effect {effect:+.0%}: false revert {r.revert:.3f} >= {bound}"


@pytest.mark.parametrize("timing", TIMINGS)
def test_real_effects_are_found(timing: str) -> None:
    assert row(timing, 0.50).keep > 0.33
    assert row(timing, -0.30).revert > 0.28
    for effect in EFFECTS:
        r = row(timing, effect)
        assert math.isclose(r.keep + r.revert + r.limit, 1.0)
        assert EvidenceConfig().trial_min_blocks <= r.blocks <= EvidenceConfig().trial_blocks


def test_the_delayed_timing_costs_rounds() -> None:
    """The bucket of round 0 not counted: trials run longer and find less."""
    assert row("delayed", 0.50).blocks > row("aligned", 0.50).blocks
    assert row("delayed", 0.50).keep < row("aligned", 0.50).keep
    assert row("delayed", -0.30).revert < row("aligned", -0.30).revert


def test_the_bounds_catch_a_rule_that_ignores_the_interval() -> None:
    def point_rule(effect: Effect, blocks: int, cfg: EvidenceConfig) -> Verdict:
        if blocks >= cfg.trial_min_blocks and effect.ok:
            return Verdict(KEEP if effect.estimate > 0 else REVERT, "point estimate")
        return judge(effect, blocks, cfg)

    broken = simulate(0.0, "delayed", trials=400, rule=point_rule)
    assert broken.keep > FALSE_KEEP[0.0] + 0.2 and broken.revert > FALSE_REVERT[0.0] + 0.2


def test_the_simulated_effect_is_the_controllers() -> None:
    """Through arm_buckets and trial_effects (the controller's path) a simulated trial's buckets
    give the effect that `run_trial` computes with two_sample."""
    cfg, noise = EvidenceConfig(), Noise()
    rng = np.random.default_rng(7)
    for i in range(5):
        is_bbr = schedule(i, "delayed", cfg)
        y = bucket_values(is_bbr[None, :], 0.2, noise, rng)[0]
        prefix, boundary = trial_key(i)
        since = boundary + DELAY
        rounds = 6
        ts = boundary + BUCKET * np.arange(len(y))
        cells = pd.DataFrame(
            {
                "pop": POP,
                "prefix": prefix,
                "ts": ts,
                "arm": np.where(is_bbr, "bbr", "cubic"),
                "samples": noise.samples,
                "value": np.exp(y),
            }
        )
        # round `rounds` at boundary + rounds * BUCKET + DELAY: the window ends at its bucket start
        got = trial_effects(
            arm_buckets(cells, cfg.purity, cfg.min_arm_samples),
            {(POP, prefix): (since, boundary + rounds * BUCKET)},
            cfg.level,
            cfg.min_arm_buckets,
            BUCKET,
        )[(POP, prefix)]
        ys, arm = y[1:rounds], is_bbr[1:rounds]
        want = two_sample(ys[arm], ys[~arm], noise.samples * len(ys), cfg.level, cfg.min_arm_buckets, ARMS)
        assert got.ok == want.ok and got.n_a == want.n_a and got.n_b == want.n_b
        if want.ok:
            assert math.isclose(got.d, want.d, rel_tol=1e-9, abs_tol=1e-12)
            assert math.isclose(got.low, want.low, rel_tol=1e-9) and math.isclose(got.high, want.high, rel_tol=1e-9)


def test_print_table() -> None:
    rows = table()
    assert len(rows) == len(EFFECTS) * len(TIMINGS)
