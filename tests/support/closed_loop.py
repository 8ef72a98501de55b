"""A closed-loop simulation of trials: per-sample telemetry, edge hosts that follow the published
arm, the real `decide` and the real evidence code (controller/evidence/switchback.py), at the
default settings.  Pure and in memory: no store, no Kafka.  tests/controller/evidence/
test_closed_loop.py asserts its rates; bench/closed_loop.py prints the long table that
docs/report.md shows.

The conditions (`Conditions`, the issue's): two POPs; per POP `candidates` poor prefixes (the
scores make them candidates every round) with a true BBR effect each, cycling through `effects`,
and `controls` prefixes that are never candidates (the POP's concurrent controls). Per bucket,
prefix and arm: n ~ U{8..12} qualifying samples with ln(rate) = mu_prefix + pop_shock[bucket] +
prefix_shock[prefix, bucket] + ln(1 + effect) * [bbr] + N(0, 0.6); the POP shock has sd 0.15,
the prefix shock sd 0.10 (`loading`: a prefix may carry the POP shock times a factor, U(lo,
hi)). `pre_buckets` buckets of CUBIC history come before the first round (the window the scoring
reads). Rounds run 30 s after each bucket boundary; round r's decision sets the arm of bucket r.
A prefix's first BBR ask waits `wave` rounds (1-3, drawn) for its canary wave, its samples
staying on CUBIC meanwhile; later toggles and the watch's holdback buckets are realized at once
(the rollout skips the canary for a prefix that passed it, controller/rollout/engine.py).

"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from controller.evidence.model import BBR, CUBIC, Effect, none
from controller.evidence.settings import EvidenceSettings
from controller.evidence.switchback import Series, pop_controls, trial_effect, watch_effect
from controller.scoring.decide import HOLDOUT, KEEP, REVERT, STATE_COLUMNS, TRIAL, decide, empty_state
from controller.scoring.query import SCORE_COLUMNS
from controller.scoring.settings import ScoringSettings

BUCKET = 300
DELAY = 30
T0 = 1_700_006_400  # a bucket boundary (and a day boundary)


@dataclass(frozen=True)
class Conditions:
    sample_sd: float = 0.6
    pop_shock_sd: float = 0.15
    loading: tuple[float, float] = (1.0, 1.0)  # each prefix carries the POP shock times U(lo, hi)
    prefix_shock_sd: float = 0.10
    samples: tuple[int, int] = (8, 12)
    wave: tuple[int, int] = (1, 3)
    pre_buckets: int = 36
    rounds: int = 48
    pops: int = 2
    candidates: int = 40
    controls: int = 40
    effects: tuple[float, ...] = (-0.4, 0.0, 0.2, 0.6)
    drop_to: float | None = None  # a kept prefix's effect becomes this ...
    drop_after: int = 6  # ... this many rounds after it was kept


@dataclass
class PrefixRecord:
    pop: str
    prefix: str
    effect: float  # true effect at the start
    candidate: bool
    mu: float
    since: int = 0  # trial start (round time)
    first_bbr: int = -1  # round of the first BBR ask
    wave: int = 0
    passed: bool = False
    realized: str = CUBIC
    asked: dict[int, str] = field(default_factory=dict)
    outcome: str = "not trialled"  # keep | revert | running | holdout | not trialled
    decided_round: int = -1
    final: Effect | None = None
    kept_round: int = -1
    drop_round: int = -1
    watch_revert_round: int = -1
    counted_arms: list[str] = field(default_factory=list)
    inconclusive: bool = False


class Store:
    """Per-prefix bucket statistics kept in arrays (what sql/queries/evidence_arm_buckets.sql reads)."""

    def __init__(self, keys: Sequence[tuple[str, str]], buckets: int) -> None:
        self.index = {k: i for i, k in enumerate(keys)}
        shape = (len(keys), buckets)
        self.n = np.zeros(shape, dtype=np.int64)
        self.mean = np.full(shape, math.nan)
        self.var = np.full(shape, math.nan)
        self.p10 = np.full(shape, math.nan)
        self.arm = np.full(shape, "", dtype=object)
        self.filled = 0

    def series(self, key: tuple[str, str], statistic: str) -> Series:
        i, m = self.index[key], self.filled
        ts = T0 + (np.arange(m) - PRE[0]) * BUCKET
        n = self.n[i, :m]
        if statistic == "p10":
            from controller.evidence.switchback import P10_VARIANCE

            y, v = np.log(self.p10[i, :m]), P10_VARIANCE * self.var[i, :m] / np.maximum(n, 1)
        else:
            y, v = self.mean[i, :m], self.var[i, :m] / np.maximum(n, 1)
        return Series(ts, self.arm[i, :m].copy(), n.copy(), y.copy(), v.copy())


PRE = [36]  # the pre-trial buckets of the running simulation (Store.series' time origin)


def scores_frame(records: Sequence[PrefixRecord]) -> pd.DataFrame:
    n = len(records)
    cand = np.array([r.candidate for r in records])
    cols: dict[str, object] = {
        "pop": [r.pop for r in records],
        "prefix": [r.prefix for r in records],
        "family": np.full(n, 4, dtype="int64"),
        "samples": np.full(n, 360, dtype="int64"),
        "qualifying": np.full(n, 360, dtype="int64"),
        "counted_buckets": np.full(n, 36, dtype="int64"),
        "bad_buckets": np.where(cand, 30, 2).astype("int64"),
        "transitions": np.where(cand, 3, 2).astype("int64"),
        "duty_cycle": np.where(cand, 30 / 36, 2 / 36),
        "flap_ratio": np.where(cand, 3 / 35, 2 / 35),
        "median_delivery_rate": np.full(n, 2e6),
        "low_delivery_rate": np.full(n, 1e6),
        "median_min_rtt_ms": np.full(n, 40.0),
        "low_rtt_buckets": np.zeros(n, dtype="int64"),
    }
    return pd.DataFrame({k: cols[k] for k in SCORE_COLUMNS})


def simulate(
    cond: Conditions, seed: int, scoring: ScoringSettings | None = None, evidence: EvidenceSettings | None = None
) -> list[PrefixRecord]:
    """One run: every candidate's record at the end (see the module docstring)."""
    rng = np.random.default_rng(seed)
    cfg = scoring or ScoringSettings()
    ev = evidence or EvidenceSettings()
    records: list[PrefixRecord] = []
    for p in range(cond.pops):
        pop = f"sim{p}"
        for i in range(cond.candidates + cond.controls):
            cand = i < cond.candidates
            effect = cond.effects[i % len(cond.effects)] if cand else 0.0
            prefix = f"2001:db8:{p:x}:{i:x}00::/56"
            records.append(PrefixRecord(pop, prefix, effect, cand, math.log(1e6) + rng.normal(0, 0.5)))
    keys = [(r.pop, r.prefix) for r in records]
    total = cond.pre_buckets + cond.rounds
    PRE[0] = cond.pre_buckets
    store = Store(keys, total)
    pop_index = np.array([int(r.pop[3:]) for r in records])
    mus = np.array([r.mu for r in records])
    loadings = rng.uniform(cond.loading[0], cond.loading[1], len(records)) if cond.loading != (1.0, 1.0) else 1.0
    scores = scores_frame(records)
    previous = empty_state()

    def fill(bucket: int, arms: list[str], lifts: np.ndarray) -> None:
        k = len(keys)
        pop_shock = rng.normal(0, cond.pop_shock_sd, cond.pops)[pop_index]
        shock = loadings * pop_shock + rng.normal(0, cond.prefix_shock_sd, k)
        n = rng.integers(cond.samples[0], cond.samples[1] + 1, k)
        width = cond.samples[1]
        y = (mus + shock + lifts)[:, None] + rng.normal(0, cond.sample_sd, (k, width))
        mask = np.arange(width)[None, :] < n[:, None]
        mean = np.where(mask, y, 0.0).sum(axis=1) / n
        var = np.where(mask, (y - mean[:, None]) ** 2, 0.0).sum(axis=1) / (n - 1)
        ordered = np.sort(np.where(mask, np.exp(y), np.inf), axis=1)  # numpy's linear p10 of each row
        pos = 0.1 * (n - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        rows = np.arange(k)
        p10 = ordered[rows, lo] + (pos - lo) * (ordered[rows, hi] - ordered[rows, lo])
        store.n[:, bucket], store.mean[:, bucket], store.var[:, bucket], store.p10[:, bucket] = n, mean, var, p10
        store.arm[:, bucket] = arms
        store.filled = bucket + 1

    for b in range(cond.pre_buckets):
        fill(b, [CUBIC] * len(keys), np.zeros(len(keys)))
    for r in range(cond.rounds):
        now = T0 + r * BUCKET + DELAY
        until = T0 + r * BUCKET
        prev_dec = dict(zip(zip(previous["pop"], previous["prefix"], strict=True), previous["decision"], strict=True))
        prev_since = dict(zip(zip(previous["pop"], previous["prefix"], strict=True), previous["trial_since"],
                              strict=True))  # fmt: skip
        prev_sel = dict(zip(zip(previous["pop"], previous["prefix"], strict=True), previous["selected_since"],
                            strict=True))  # fmt: skip
        watched = {k for k, d in prev_dec.items() if d == KEEP}
        trials = {k for k, d in prev_dec.items() if d == TRIAL}
        controls = control_table(store, records)
        t_eff: dict[tuple[str, str], Effect] = {}
        w_eff: dict[tuple[str, str], Effect] = {}
        for k in trials:
            rec = records[store.index[k]]
            t_eff[k] = trial_effect(store.series(k, ev.statistic), int(prev_since[k]), until, rec.asked,
                                    controls.get(k[0]) if ev.controls else None, ev, BUCKET)  # fmt: skip
        for k in watched:
            rec = records[store.index[k]]
            w_eff[k] = watch_effect(store.series(k, ev.statistic), int(prev_sel[k]), until, rec.asked,
                                    controls.get(k[0]) if ev.controls else None, ev, BUCKET,
                                    pre_until=int(prev_since.get(k, 0)))  # fmt: skip
        decisions = decide(scores, previous, now, cfg, evidence=ev, trial_effects=t_eff, watch_effects=w_eff)
        arms: list[str] = []
        lifts = np.zeros(len(keys))
        for row in decisions[["pop", "prefix", "decision", "algorithm", "trial_since", "trial_ended", "reason",
                              "trial_low", "trial_high", "trial_effect"]].itertuples(index=False):  # fmt: skip
            k = (str(row.pop), str(row.prefix))
            rec = records[store.index[k]]
            ask = CUBIC if row.algorithm == CUBIC else BBR
            ended = str(row.trial_ended)
            if row.decision in (TRIAL, KEEP) or (row.decision == "select"):
                rec.asked[until] = ask
            if row.decision == TRIAL and rec.since == 0:
                rec.since = int(row.trial_since)  # type: ignore[arg-type]
                rec.outcome = "running"
            if row.decision == HOLDOUT and rec.outcome == "not trialled":
                rec.outcome = "holdout"
            if ended in (KEEP, REVERT) and rec.decided_round < 0:
                rec.outcome = ended
                rec.decided_round = r
                rec.inconclusive = str(row.reason).startswith("inconclusive")
                rec.final = t_eff.get(k)
                if ended == KEEP:
                    rec.kept_round = r
            if rec.outcome == "running" and k in t_eff:
                rec.final = t_eff[k]
            if row.decision == REVERT and rec.kept_round >= 0 and rec.watch_revert_round < 0 and r > rec.kept_round:
                rec.watch_revert_round = r
            # the hosts: a first BBR ask waits for its canary wave
            if ask == BBR and not rec.passed:
                if rec.first_bbr < 0:
                    rec.first_bbr = r
                    rec.wave = int(rng.integers(cond.wave[0], cond.wave[1] + 1))
                if r - rec.first_bbr >= rec.wave:
                    rec.passed = True
            rec.realized = ask if (ask == CUBIC or rec.passed) else CUBIC
            if row.decision in ("revert", "skip", HOLDOUT):
                rec.realized = CUBIC
            arms.append(rec.realized)
            effect = rec.effect
            if cond.drop_to is not None and rec.kept_round >= 0 and r >= rec.kept_round + cond.drop_after:
                effect = cond.drop_to
                if rec.drop_round < 0:
                    rec.drop_round = r
            lifts[store.index[k]] = math.log1p(effect) if rec.realized == BBR else 0.0
        order = [store.index[(str(p), str(x))] for p, x in zip(decisions["pop"], decisions["prefix"], strict=True)]
        arm_by_row = ["" for _ in keys]
        for j, i in enumerate(order):
            arm_by_row[i] = arms[j]
        fill(cond.pre_buckets + r, arm_by_row, lifts)
        previous = decisions[list(STATE_COLUMNS)].reset_index(drop=True)
    for rec in records:
        if rec.since and rec.decided_round < 0:
            rec.final = rec.final or none("no effect")
        if rec.since:
            rec.counted_arms = counted_sequence(store, rec, cond)
    return [r for r in records if r.candidate]


def counted_sequence(store: Store, rec: PrefixRecord, cond: Conditions) -> list[str]:
    """The realized arms of the trial's counted buckets (asked = realized), in time order."""
    i = store.index[(rec.pop, rec.prefix)]
    end = rec.decided_round if rec.decided_round >= 0 else cond.rounds
    out = []
    for r in range((rec.since - T0) // BUCKET, end):
        ts = T0 + r * BUCKET
        arm = store.arm[i, cond.pre_buckets + r]
        if rec.asked.get(ts) == arm and arm:
            out.append(arm)
    return out


def control_table(store: Store, records: Sequence[PrefixRecord]) -> dict:
    """pop_controls over every prefix's CUBIC buckets (what sql/queries/evidence_pop_controls.sql reads)."""
    m = store.filled
    rows = np.arange(len(records))
    ts = np.broadcast_to(T0 + (np.arange(m) - PRE[0]) * BUCKET, (len(rows), m))
    cubic = store.arm[rows, :m] == CUBIC
    pops = np.array([r.pop for r in records], dtype=object)
    prefixes = np.array([r.prefix for r in records], dtype=object)
    frame = pd.DataFrame(
        {
            "pop": np.broadcast_to(pops[:, None], (len(rows), m))[cubic],
            "prefix": np.broadcast_to(prefixes[:, None], (len(rows), m))[cubic],
            "ts": ts[cubic],
            "samples": store.n[rows, :m][cubic],
            "mean_log": store.mean[rows, :m][cubic],
        }
    )
    return pop_controls(frame, 3, BUCKET)


@dataclass(frozen=True)
class TableRow:
    effect: float
    trials: int
    kept: float
    reverted: float
    inconclusive: float
    running: float
    coverage: float
    mean_rounds: float
    alternating: float  # share of ended trials resting on >= 2 realized blocks per arm, >= 2 switches


def alternates(arms: Sequence[str]) -> bool:
    switches = sum(a != b for a, b in itertools.pairwise(arms))
    return arms.count(BBR) >= 2 and arms.count(CUBIC) >= 2 and switches >= 2


def table(records: Sequence[PrefixRecord], effects: Sequence[float]) -> list[TableRow]:
    out = []
    for e in effects:
        rs = [r for r in records if math.isclose(r.effect, e) and r.since]
        if not rs:
            continue
        n = len(rs)
        ended = [r for r in rs if r.outcome in (KEEP, REVERT)]
        cov = [r for r in rs if r.final is not None and r.final.has_interval]
        covered = sum(r.final.low <= e <= r.final.high for r in cov if r.final is not None)
        out.append(
            TableRow(
                effect=e,
                trials=n,
                kept=sum(r.outcome == KEEP for r in rs) / n,
                reverted=sum(r.outcome == REVERT and not r.inconclusive for r in rs) / n,
                inconclusive=sum(r.outcome == REVERT and r.inconclusive for r in rs) / n,
                running=sum(r.outcome == "running" for r in rs) / n,
                coverage=covered / len(cov) if cov else math.nan,
                mean_rounds=float(np.mean([r.decided_round - (r.since - T0) // BUCKET for r in ended]))
                if ended
                else math.nan,
                alternating=sum(alternates(r.counted_arms) for r in ended) / len(ended) if ended else math.nan,
            )
        )
    return out


def format_table(rows: Sequence[TableRow]) -> str:
    lines = [
        "| true effect | trials | kept | reverted | inconclusive | running | interval holds the truth "
        "| mean rounds to a decision | decisions on alternating blocks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.effect * 100:+.0f} % | {r.trials} | {r.kept:.0%} | {r.reverted:.0%} | {r.inconclusive:.0%} "
            f"| {r.running:.0%} | {r.coverage:.0%} | {r.mean_rounds:.1f} | {r.alternating:.0%} |"
        )
    return "\n".join(lines)


def run(cond: Conditions, seeds: Sequence[int], evidence: EvidenceSettings | None = None) -> list[PrefixRecord]:
    out: list[PrefixRecord] = []
    for s in seeds:
        out.extend(simulate(cond, s, evidence=evidence))
    return out


__all__ = ["Conditions", "PrefixRecord", "TableRow", "alternates", "format_table", "replace", "run", "simulate",
           "table"]  # fmt: skip
