"""The error rates of the trial rule at the default EvidenceSettings, by simulation.

controller/evidence/trial.py's rule looks at the data every round, so its error rates are above
the interval's nominal level; this module measures them on whole simulated trials and asserts
bounds set from the measurement (docs/report.md, "Trial error rates at the defaults", gives
the table).  `error_rate_table` returns the table for a bench; `pytest -s` prints it.

One simulated trial, as the controller runs it (controller/scoring/decide.py and
controller/evidence/load.py):

* round 0 selects the prefix and asks for `next_arm(..., 0, 0, cfg)`; round r (r >= 1) judges
  the effect over the counted buckets before it, `judge(effect, r, cfg)` (r = rounds since the
  trial began), and when the verdict is "go on" asks for `next_arm(..., n_bbr, n_cubic, cfg)`
  with the arm buckets the effect counted.  Round r's ask sets the arm of bucket r.
* one timing: rounds run `DELAY` after the bucket boundary (`dyncc control`'s default), and the
  effect's window starts at the boundary at or before the trial's start (`Evidence.window`), so
  every bucket counts, the first one too; at round r the buckets 0 .. r-1 are whole.
* not every ask is realized (`Asks`): a share of rounds is held by a rollout in flight (the
  bucket keeps the arm in force before, CUBIC before the trial, and counts for it) and a share
  of buckets is mixed or has too few samples (not counted: `arm_buckets` leaves it out).  The
  schedule advances on what was counted, so an ask that was not realized is asked again or
  made up for.  `IDEAL` realizes every ask (then the arms are `arm_at`'s planned schedule).
* the effect is `two_sample` (`effect_of`, the same in plain Python) on the ln(p10) of the
  counted bbr and cubic buckets, which is what `trial_effects` computes over `arm_buckets` rows
  in the window `Evidence.window` gives (test_the_simulated_effect_is_the_controllers checks
  this on simulated trials).

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
modelled beyond the dropped share.  Without drift and at a zero effect the Welch t interval is
scale-free, so the zero-effect rates do not depend on the sd; the others do (a larger sd: lower
power, fewer false reverts at +20 %).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pandas as pd
import pytest

from controller.evidence.load import CELL_COLUMNS, GOODPUT_COLUMNS, Evidence, Trial
from controller.evidence.model import ARMS, BBR, CUBIC, Effect, t_quantile, two_sample
from controller.evidence.settings import EvidenceSettings
from controller.evidence.trial import GO_ON, KEEP, REVERT, Verdict, arm_at, judge, next_arm

BUCKET = 300  # s: production's 5-minute bucket
DAY_BUCKETS = 86400 // BUCKET
DELAY = min(30, BUCKET // 10)  # s: controller/control/settings.py's default round delay
T0 = 1_700_000_100  # a bucket boundary
POP = "sim"
EFFECTS = (-0.30, -0.20, 0.0, 0.20, 0.50)  # true effect of BBR on the p10: exp(d) - 1
TRIALS = 2000
SEED = 20240611
LIMIT_REASONS = ("trial ended at its limit", "trial ran out of time")

Rule = Callable[[Effect, int, EvidenceSettings], Verdict]


@dataclass(frozen=True)
class Noise:
    """Per-bucket ln(p10) model; see the module docstring."""

    sd: float = 0.35  # independent per-bucket noise
    walk_sd: float = 0.03  # random-walk step per bucket
    diurnal: float = 0.25  # amplitude of a daily cycle
    samples: int = 10  # qualifying samples per bucket (only Effect.samples depends on it)


@dataclass(frozen=True)
class Asks:
    """The shares of the controller's asks that are not realized; see the module docstring."""

    held: float = 0.20  # rounds held by a rollout in flight: the bucket keeps the arm in force
    dropped: float = 0.10  # buckets mixed or with too few samples: not counted

    @property
    def name(self) -> str:
        if not self.held and not self.dropped:
            return "ideal"
        return f"held {self.held * 100:g} %, dropped {self.dropped * 100:g} %"


IDEAL = Asks(0.0, 0.0)
ASKS = (IDEAL, Asks())


@dataclass(frozen=True)
class Row:
    """The outcomes of `trials` simulated trials at one true effect."""

    asks: str
    effect: float
    trials: int
    keep: float  # share ended keep by the rule (lower bound > 0)
    revert: float  # share ended revert by the rule (upper bound < 0)
    limit: float  # share ended at the limit (the settings' trial_at_limit decision), out of time included
    out_of_time: float  # share of those that ran out of rounds before their pairs were done
    limit_action: str
    blocks: float  # mean blocks realized when the trial ended
    rounds: float  # mean rounds (since the trial began) when it ended

    @property
    def kept(self) -> float:
        """Every keep, by the rule or at the limit."""
        return self.keep + (self.limit if self.limit_action == KEEP else 0.0)

    @property
    def reverted(self) -> float:
        """Every revert, by the rule or at the limit."""
        return self.revert + (self.limit if self.limit_action == REVERT else 0.0)


def trial_key(i: int) -> tuple[str, int]:
    """The prefix and the bucket boundary of round 0 of simulated trial i (distinct inputs to
    the schedule's hash); the trial's `since` is DELAY after the boundary."""
    return f"10.{i // 256 % 256}.{i % 256}.0/24", T0 + (i % 977) * BUCKET


def bucket_values(trials: int, buckets: int, noise: Noise, rng: np.random.Generator) -> np.ndarray:
    """ln(p10) of trials × buckets on CUBIC (the BBR lift is added per bucket by its arm)."""
    mu = math.log(1e6) + rng.normal(0.0, 1.0, (trials, 1))
    phase = rng.uniform(0.0, DAY_BUCKETS, (trials, 1))
    k = np.arange(buckets)
    daily = noise.diurnal * np.sin(2 * np.pi * (k + phase) / DAY_BUCKETS)
    walk = np.cumsum(rng.normal(0.0, noise.walk_sd, (trials, buckets)), axis=1)
    return mu + daily + walk + rng.normal(0.0, noise.sd, (trials, buckets))


def effect_of(a: list[float], b: list[float], samples: int, cfg: EvidenceSettings) -> Effect:
    """`two_sample` (controller/evidence/model.py) of bbr values `a` against cubic values `b`,
    in plain Python: the same figures (its smallest detectable effect apart, which the rule does
    not read) without numpy's overhead on a handful of values, which would make the table
    several times slower.  test_effect_of_is_two_sample checks the two against each other."""
    na, nb = len(a), len(b)
    if na < cfg.min_arm_buckets or nb < cfg.min_arm_buckets:
        return two_sample(np.array(a), np.array(b), samples, cfg.level, cfg.min_arm_buckets, ARMS)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((y - ma) ** 2 for y in a) / (na - 1) / na
    vb = sum((y - mb) ** 2 for y in b) / (nb - 1) / nb
    d, se = ma - mb, math.sqrt(va + vb)
    low = high = d
    if se > 0:
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        t = t_quantile(1 - (1 - cfg.level) / 2, max(df, 1.0))
        low, high = d - t * se, d + t * se
    return Effect(math.expm1(d), math.expm1(low), math.expm1(high), cfg.level, d, se, na, nb, samples)


@dataclass
class Outcome:
    action: str
    limit: bool  # ended at the limit: the settings' decision, not the interval's
    out_of_time: bool
    blocks: int
    rounds: int
    # per bucket: (the arm it ran, counted, ln p10), and per judging round r: the effect it judged
    buckets: list[tuple[str, bool, float]] = field(default_factory=list)
    judged: dict[int, Effect] = field(default_factory=dict)


def run_trial(
    base: np.ndarray,
    held: np.ndarray,
    dropped: np.ndarray,
    i: int,
    effect: float,
    cfg: EvidenceSettings,
    noise: Noise,
    rule: Rule,
) -> Outcome:
    """The rounds of trial i until its verdict is not "go on" (see the module docstring).

    base: ln p10 per bucket on CUBIC; held / dropped: per bucket, whether round r's ask was held
    and whether bucket r is not counted."""
    prefix, boundary = trial_key(i)
    since = boundary + DELAY
    lift = math.log1p(effect)
    ys: dict[str, list[float]] = {BBR: [], CUBIC: []}
    out = Outcome(GO_ON, False, False, 0, 0)
    in_force = CUBIC  # before its trial a prefix runs CUBIC
    ask = next_arm(POP, prefix, since, 0, 0, cfg)  # round 0
    for r in range(1, cfg.max_rounds + 1):
        k = r - 1  # bucket k ran round k's ask unless it was held
        if not held[k]:
            in_force = ask
        y = float(base[k]) + (lift if in_force == BBR else 0.0)
        out.buckets.append((in_force, not dropped[k], y))
        if not dropped[k]:
            ys[in_force].append(y)
        a, b = ys[BBR], ys[CUBIC]
        eff = effect_of(a, b, noise.samples * (len(a) + len(b)), cfg)
        out.judged[r] = eff
        verdict = rule(eff, r, cfg)
        if verdict.action != GO_ON:
            out.action = verdict.action
            out.limit = verdict.why.startswith(LIMIT_REASONS)
            out.out_of_time = verdict.why.startswith(LIMIT_REASONS[1])
            out.blocks = (len(a) + len(b)) // cfg.trial_block_rounds
            out.rounds = r
            return out
        ask = next_arm(POP, prefix, since, len(a), len(b), cfg)
    raise AssertionError("the rule did not end the trial in max_rounds")  # judge always ends it


def draws(
    effect: float, trials: int, cfg: EvidenceSettings, noise: Noise, asks: Asks, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(base values, held, dropped) of `trials` trials, trials × max_rounds each; the values do
    not depend on `asks`, so the ideal and the realistic rows see the same buckets."""
    rng = np.random.default_rng([seed, round(effect * 1000) + 1000])
    base = bucket_values(trials, cfg.max_rounds, noise, rng)
    u = np.random.default_rng([seed, round(effect * 1000) + 1000, 1]).uniform(size=(2, trials, cfg.max_rounds))
    return base, u[0] < asks.held, u[1] < asks.dropped


def simulate(
    effect: float,
    asks: Asks | None = None,
    trials: int = TRIALS,
    cfg: EvidenceSettings | None = None,
    noise: Noise | None = None,
    seed: int = SEED,
    rule: Rule = judge,
) -> Row:
    """`trials` whole trials at the true `effect`."""
    cfg = cfg or EvidenceSettings()
    noise = noise or Noise()
    asks = asks or Asks()
    base, held, dropped = draws(effect, trials, cfg, noise, asks, seed)
    keep = revert = limit = out_of_time = blocks = rounds = 0
    for i in range(trials):
        out = run_trial(base[i], held[i], dropped[i], i, effect, cfg, noise, rule)
        blocks += out.blocks
        rounds += out.rounds
        out_of_time += out.out_of_time
        if out.limit:
            limit += 1
        elif out.action == KEEP:
            keep += 1
        else:
            revert += 1
    n = trials
    return Row(asks.name, effect, n, keep / n, revert / n, limit / n, out_of_time / n, cfg.trial_at_limit,
               blocks / n, rounds / n)  # fmt: skip


def error_rate_table(
    trials: int = TRIALS,
    effects: Sequence[float] = EFFECTS,
    asks: Sequence[Asks] = ASKS,
    cfg: EvidenceSettings | None = None,
    noise: Noise | None = None,
    seed: int = SEED,
) -> list[Row]:
    """The table: one Row per (asks, true effect).  A bench can call this."""
    return [simulate(e, a, trials, cfg, noise, seed) for a in asks for e in effects]


def format_table(rows: Sequence[Row]) -> str:
    """A markdown table of `rows`."""
    lines = [
        "| asks | true effect | keep (rule) | revert (rule) | at the limit | of which out of time "
        "| mean blocks | mean rounds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.asks} | {r.effect * 100:+.0f} % | {r.keep * 100:.1f} % | {r.revert * 100:.1f} % "
            f"| {r.limit * 100:.1f} % ({r.limit_action}) | {r.out_of_time * 100:.1f} % | {r.blocks:.2f} "
            f"| {r.rounds:.2f} |"
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
    """A markdown table of the named rates (by the rule; the limit's decision apart), one column
    per asks setting."""
    names = list(dict.fromkeys(r.asks for r in rows))
    lines = ["| rate (by the rule) | true effect | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for what, effect, name in NAMED:
        cells = []
        for a in names:
            found = [r for r in rows if r.asks == a and math.isclose(r.effect, effect)]
            cells.append(f"{getattr(found[0], name) * 100:.1f} %" if found else "")
        lines.append(f"| {what} | {effect * 100:+.0f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@cache
def table() -> tuple[Row, ...]:
    started = time.perf_counter()
    rows = tuple(error_rate_table())
    print(f"\n{TRIALS} trials per row, default EvidenceSettings, {time.perf_counter() - started:.1f} s\n")
    print(format_table(rows))
    print()
    print(named_rates_table(rows))
    return rows


def row(asks: Asks, effect: float) -> Row:
    return next(r for r in table() if r.asks == asks.name and math.isclose(r.effect, effect))


# Bounds from the measurement (docs/report.md: 10 000 trials per row, ideal / held 20 %, dropped
# 10 %: false keep 9.4 / 9.8 % at 0, 2.3 / 2.2 % at -20 %; false revert 9.6 / 9.9 % at 0, 3.3 /
# 3.1 % at +20 %, 0.7 / 0.6 % at +50 %; keep 47.8 / 49.2 % at +50 %, revert 43.2 / 44.2 % at -30 %)
# plus slack of more than 4 standard errors of a 2000-trial row; a rule that judged the point
# estimate instead of the interval would keep about half the zero-effect trials.
FALSE_KEEP = {0.0: 0.13, -0.20: 0.04}
FALSE_REVERT = {0.0: 0.13, 0.20: 0.05, 0.50: 0.02}
POWER = {0.50: 0.40}  # keep by the rule at least
FOUND = {-0.30: 0.35}  # revert by the rule at least


@pytest.mark.parametrize("asks", ASKS, ids=lambda a: a.name)
def test_false_keep_rates_are_bounded(asks: Asks) -> None:
    for effect, bound in FALSE_KEEP.items():
        r = row(asks, effect)
        assert r.keep < bound, f"{asks.name}, true effect {effect:+.0%}: false keep {r.keep:.3f} >= {bound}"
        assert r.kept == r.keep  # the default at the limit is revert: no keep there


@pytest.mark.parametrize("asks", ASKS, ids=lambda a: a.name)
def test_false_revert_rates_are_bounded(asks: Asks) -> None:
    for effect, bound in FALSE_REVERT.items():
        r = row(asks, effect)
        assert r.revert < bound, f"{asks.name}, true effect {effect:+.0%}: false revert {r.revert:.3f} >= {bound}"


@pytest.mark.parametrize("asks", ASKS, ids=lambda a: a.name)
def test_real_effects_are_found(asks: Asks) -> None:
    cfg = EvidenceSettings()
    for effect, bound in POWER.items():
        assert row(asks, effect).keep > bound
    for effect, bound in FOUND.items():
        assert row(asks, effect).revert > bound
    for effect in EFFECTS:
        r = row(asks, effect)
        assert math.isclose(r.keep + r.revert + r.limit, 1.0)
        assert cfg.trial_min_blocks <= r.blocks <= cfg.trial_blocks + 2
        assert r.blocks <= r.rounds <= cfg.max_rounds


def test_unrealized_asks_cost_rounds_not_evidence() -> None:
    """Held and dropped asks are made up for: the trials take more rounds, judge about as many
    blocks and find about as much; no trial of the ideal case runs out of time."""
    for effect in EFFECTS:
        ideal, real = row(IDEAL, effect), row(Asks(), effect)
        assert ideal.out_of_time == 0.0 and ideal.rounds == ideal.blocks <= EvidenceSettings().trial_blocks
        assert real.rounds > ideal.rounds + 0.5  # the dropped buckets (a held one counts, for the arm in force)
        assert ideal.blocks - 0.1 < real.blocks < ideal.blocks + 0.5  # held buckets may unbalance a pair
        assert real.out_of_time < 0.01
    assert abs(row(Asks(), 0.50).keep - row(IDEAL, 0.50).keep) < 0.06
    assert abs(row(Asks(), -0.30).revert - row(IDEAL, -0.30).revert) < 0.06


def test_the_bounds_catch_a_rule_that_ignores_the_interval() -> None:
    def point_rule(effect: Effect, rounds: int, cfg: EvidenceSettings) -> Verdict:
        if (effect.n_a + effect.n_b) // cfg.trial_block_rounds >= cfg.trial_min_blocks and effect.ok:
            return Verdict(KEEP if effect.estimate > 0 else REVERT, "point estimate")
        return judge(effect, rounds, cfg)

    broken = simulate(0.0, Asks(), trials=400, rule=point_rule)
    assert broken.keep > FALSE_KEEP[0.0] + 0.2 and broken.revert > FALSE_REVERT[0.0] + 0.2


def test_effect_of_is_two_sample() -> None:
    cfg = EvidenceSettings()
    rng = np.random.default_rng(5)
    for na, nb in [(0, 0), (1, 3), (2, 1), (2, 2), (3, 2), (4, 4), (6, 3)]:
        for _ in range(20):
            a, b = rng.normal(14.0, 0.4, na), rng.normal(13.9, 0.3, nb)
            got = effect_of(a.tolist(), b.tolist(), 10 * (na + nb), cfg)
            want = two_sample(a, b, 10 * (na + nb), cfg.level, cfg.min_arm_buckets, ARMS)
            for name in ("ok", "reason", "n_a", "n_b", "samples"):
                assert getattr(got, name) == getattr(want, name)
            if want.ok:
                for name in ("estimate", "low", "high", "d", "se"):
                    assert math.isclose(getattr(got, name), getattr(want, name), rel_tol=1e-9, abs_tol=1e-12)
    # no spread: an interval of width 0
    same = effect_of([14.0, 14.0], [13.0, 13.0], 40, cfg)
    want = two_sample(np.array([14.0, 14.0]), np.array([13.0, 13.0]), 40, cfg.level, 2, ARMS)
    assert same.low == same.high == same.estimate == want.low


def test_the_ideal_trial_runs_the_planned_schedule() -> None:
    cfg, noise = EvidenceSettings(), Noise()
    base, held, dropped = draws(0.2, 20, cfg, noise, IDEAL, 7)
    for i in range(20):
        out = run_trial(base[i], held[i], dropped[i], i, 0.2, cfg, noise, judge)
        prefix, boundary = trial_key(i)
        assert [arm for arm, _, _ in out.buckets] == [
            arm_at(POP, prefix, boundary + DELAY, k, cfg) for k in range(len(out.buckets))
        ]
        assert all(counted for _, counted, _ in out.buckets) and out.rounds == len(out.buckets)


def test_the_simulated_effect_is_the_controllers() -> None:
    """Through Evidence (its window from the bucket boundary before the trial's start,
    arm_buckets and trial_effects: the controller's path) a simulated trial's buckets give the
    effect that `run_trial` judged at each round; a dropped bucket is a mixed one there."""
    cfg, noise = EvidenceSettings(), Noise()
    asks = Asks(held=0.3, dropped=0.2)
    base, held, dropped = draws(0.2, 8, cfg, noise, asks, 7)
    assert held[:, :8].any() and dropped[:, :8].any()
    for i in range(8):
        out = run_trial(base[i], held[i], dropped[i], i, 0.2, cfg, noise, judge)
        prefix, boundary = trial_key(i)
        rows = []
        for k, (arm, counted, y) in enumerate(out.buckets):
            ts = boundary + k * BUCKET
            if counted:
                rows.append((POP, prefix, ts, arm, noise.samples, math.exp(y), 0))
            else:  # mixed: half the samples on each arm, below the purity
                rows += [(POP, prefix, ts, a, noise.samples, math.exp(y), 0) for a in ARMS]
        cells = pd.DataFrame(rows, columns=CELL_COLUMNS)
        since = boundary + DELAY
        for r, want in out.judged.items():
            now = since + r * BUCKET  # round r
            trial = Trial(POP, prefix, since, now, "trial", "", r)
            ev = Evidence(cfg, BUCKET, [trial], cells, pd.DataFrame(columns=GOODPUT_COLUMNS), now)
            ev.compute()
            got = ev.effect(trial)
            assert (got.ok, got.n_a, got.n_b) == (want.ok, want.n_a, want.n_b), (i, r)
            if want.ok:
                assert math.isclose(got.d, want.d, rel_tol=1e-9, abs_tol=1e-12)
                assert math.isclose(got.low, want.low, rel_tol=1e-9)
                assert math.isclose(got.high, want.high, rel_tol=1e-9)


def test_print_table() -> None:
    rows = table()
    assert len(rows) == len(EFFECTS) * len(ASKS)
