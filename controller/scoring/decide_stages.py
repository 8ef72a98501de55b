"""The stages of a round's decisions (controller/scoring/decide.py composes them in this order).

Each stage is a pure function of numpy columns: it reads its inputs, never changes them, and
returns new arrays.  `Rows` is what every stage reads: the joined columns of the round
(controller/scoring/decide_join.py), sorted by (pop, prefix), with the round time and settings.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from controller.evidence.model import BBR, CUBIC, Effect, none
from controller.evidence.settings import EvidenceSettings
from controller.evidence.trial import GO_ON, INCONCLUSIVE, judge, next_arm, watch_arm, watch_verdict
from controller.evidence.trial import KEEP as KEEP_VERDICT
from controller.evidence.trial import REVERT as REVERT_VERDICT
from controller.scoring.pins import Pin, pin_reason
from controller.scoring.settings import ScoringSettings
from controller.store.decisions import HOLDOUT, KEEP, PIN, REVERT, SELECT, SKIP, TRIAL

Mask = np.ndarray
Key = tuple[str, str]


@dataclass(frozen=True)
class Rows:
    """The round's rows: the joined columns, whether each row was scored, the time and settings."""

    n: int
    cols: dict[str, np.ndarray]
    scored: Mask
    now: int
    cfg: ScoringSettings
    bounds: list[tuple[int, int]]  # each POP's rows [a, b)

    @property
    def pops(self) -> np.ndarray:
        return self.cols["pop"]

    @property
    def prefixes(self) -> np.ndarray:
        return self.cols["prefix"]


def holdout_hash(pop: str, prefix: str, salt: str) -> float:
    """A stable number in [0, 1) for (pop, prefix): below holdout_fraction = control group."""
    digest = hashlib.blake2b(f"{salt}|{pop}|{prefix}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@dataclass(frozen=True)
class Candidates:
    seen: Mask  # scored with samples this round
    last_seen: np.ndarray  # now where seen
    in_cooldown: Mask
    eligible: Mask  # enough counted buckets
    measurable: Mask
    low_rtt: Mask
    candidate: Mask  # before deny list and pins
    expired: Mask  # not seen for `expire`


def candidates(r: Rows, expire_seconds: int) -> Candidates:
    """Who qualifies on its scores, who cools down, who has not been seen for `expire_seconds`."""
    cols, cfg, now = r.cols, r.cfg, r.now
    counted = cols["counted_buckets"]
    low = cols["low_delivery_rate"]
    last_seen = cols["last_seen"].copy()
    seen = r.scored & (cols["samples"] > 0)
    last_seen[seen] = now
    eligible = r.scored & (counted >= cfg.min_buckets)
    low_rtt = eligible & (cols["low_rtt_buckets"] * 2 > counted)  # median min_rtt below
    candidate = eligible & ~low_rtt & (cols["duty_cycle"] >= cfg.min_duty) & (cols["flap_ratio"] <= cfg.max_flap)
    return Candidates(
        seen=seen,
        last_seen=last_seen,
        in_cooldown=cols["cooldown_until"] > now,
        eligible=eligible,
        measurable=eligible & np.isfinite(low) & (low > 0),
        low_rtt=low_rtt,
        candidate=candidate,
        expired=(~seen) & (last_seen > 0) & (now - last_seen >= expire_seconds),
    )


def pin_lookup(r: Rows, pins: Mapping[Key, Pin] | None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's pinned algorithm and pin reason ('' = not pinned)."""
    pin_algo = np.full(r.n, "", dtype=object)
    pin_text = np.full(r.n, "", dtype=object)
    if pins:  # rows are sorted by (pop, prefix): look each pin up, not each row
        pops, prefixes = r.pops, r.prefixes
        spans = {str(pops[a]): (a, b) for a, b in r.bounds}
        for (p, x), pin in pins.items():
            a, b = spans.get(p, (0, 0))
            j = a + int(np.searchsorted(prefixes[a:b], x)) if b > a else b
            if j < b and prefixes[j] == x:
                pin_algo[j], pin_text[j] = pin.algorithm, pin_reason(pin)
    return pin_algo, pin_text


@dataclass(frozen=True)
class Standing:
    """The previous decisions after the deny list and the pins."""

    denied: np.ndarray  # why validation would refuse the row ('' = it would not)
    refused: Mask
    pinned: Mask  # a pin that holds (the deny list beats a BBR pin)
    pinned_bbr: Mask
    candidate: Mask  # not refused, not pinned
    was_bbr: Mask  # on BBR for good before, not pinned
    was_trial: Mask
    was_holdout: Mask


def deny_and_pin(
    r: Rows, candidate: Mask, pin_algo: np.ndarray, refuse: Callable[[str], str | None] | None
) -> Standing:
    """The deny list (asked only for candidates and rows carrying state or a pin) and the pins."""
    prev_dec = r.cols["prev_decision"]
    was_bbr = (prev_dec == SELECT) | (prev_dec == KEEP)
    was_trial = prev_dec == TRIAL
    was_holdout = prev_dec == HOLDOUT
    denied = np.full(r.n, "", dtype=object)
    if refuse is not None:
        for j in np.flatnonzero(candidate | was_bbr | was_trial | was_holdout | (pin_algo != "")).tolist():
            denied[j] = refuse(str(r.prefixes[j])) or ""
    refused = denied != ""
    pinned = (pin_algo != "") & ~(refused & (pin_algo != CUBIC))  # the deny list beats a BBR pin
    return Standing(
        denied=denied,
        refused=refused,
        pinned=pinned,
        pinned_bbr=pinned & (pin_algo != CUBIC),
        candidate=candidate & ~refused & ~pinned,
        was_bbr=was_bbr & ~pinned,
        was_trial=was_trial & ~pinned,
        was_holdout=was_holdout & ~pinned,
    )


@dataclass(frozen=True)
class Holdouts:
    holdout: Mask
    new_holdout: Mask
    holdout_since: np.ndarray
    baseline: np.ndarray  # the baseline low rate, set for a new holdout


def holdouts(r: Rows, c: Candidates, s: Standing) -> Holdouts:
    """Candidates in the hash group, and earlier holdouts that are still seen."""
    cfg, pops, prefixes = r.cfg, r.pops, r.prefixes
    hashed = np.zeros(r.n, dtype=bool)
    for j in np.flatnonzero((s.candidate | s.was_holdout) & ~s.was_bbr & ~s.was_trial).tolist():
        hashed[j] = holdout_hash(pops[j], prefixes[j], cfg.holdout_salt) < cfg.holdout_fraction
    holdout = (
        hashed & ~s.was_bbr & ~s.was_trial & ~c.in_cooldown & ~s.refused & (s.candidate | (s.was_holdout & ~c.expired))
    )
    new_holdout = holdout & ~s.was_holdout
    holdout_since = r.cols["holdout_since"].copy()
    holdout_since[new_holdout] = r.now
    baseline = r.cols["baseline_low_rate"].copy()
    baseline[new_holdout] = r.cols["low_delivery_rate"][new_holdout]
    holdout_since[~holdout] = 0
    return Holdouts(holdout, new_holdout, holdout_since, baseline)


@dataclass(frozen=True)
class OnBbr:
    held: Mask  # in its min hold: not released for a quiet spell
    revert_denied: Mask
    revert_expired: Mask
    keep: Mask


def on_bbr(r: Rows, c: Candidates, s: Standing) -> OnBbr:
    """Prefixes on BBR for good stay (the no-flip-flop hysteresis) unless denied or gone.  Whether
    BBR helps is judged by trials and the watch, never by a point ratio against a baseline."""
    held = s.was_bbr & (r.now - r.cols["selected_since"] < r.cfg.min_hold_seconds)
    revert_denied = (s.was_bbr | s.was_trial) & s.refused
    revert_expired = ((s.was_bbr & ~held) | s.was_trial) & ~s.refused & c.expired
    return OnBbr(held, revert_denied, revert_expired, s.was_bbr & ~revert_expired & ~revert_denied)


@dataclass(frozen=True)
class Watch:
    config: EvidenceSettings | None  # None: no watch (holdback 0)
    revert: Mask  # its holdback buckets show BBR worse, min hold over
    why: np.ndarray
    keep: Mask  # the kept prefixes the watch leaves on BBR


def watch(
    r: Rows, keep: Mask, held: Mask, evidence: EvidenceSettings | None, effects: Mapping[Key, Effect] | None
) -> Watch:
    """A prefix on BBR runs CUBIC in its holdback buckets and goes back to CUBIC (with a cooldown)
    when they show BBR worse, once its min hold is over."""
    cfg = evidence if evidence is not None and evidence.holdback > 0 else None
    revert = np.zeros(r.n, dtype=bool)
    why = np.full(r.n, "", dtype=object)
    if cfg is None:
        return Watch(None, revert, why, keep)
    for j in np.flatnonzero(keep).tolist():
        key = (str(r.pops[j]), str(r.prefixes[j]))
        eff = (effects or {}).get(key) or none("no holdback samples read", cfg.level)
        verdict = watch_verdict(eff, r.cfg.revert_margin)
        why[j] = verdict.why
        if verdict.action == REVERT_VERDICT and not held[j]:
            revert[j] = True
    return Watch(cfg, revert, why, keep & ~revert)


@dataclass(frozen=True)
class Trials:
    config: EvidenceSettings | None  # None: trials off
    since: np.ndarray  # trial_since
    effect: np.ndarray  # the effect of each running trial so far: estimate, low, high
    low: np.ndarray
    high: np.ndarray
    arm: np.ndarray  # the next block's arm of a trial going on
    go: Mask
    keep: Mask
    revert: Mask
    why: np.ndarray
    inconclusive: Mask  # reverted at its limit without a conclusive effect


def trials(r: Rows, running: Mask, evidence: EvidenceSettings | None, effects: Mapping[Key, Effect] | None) -> Trials:
    """Running trials: the sequential rule on the effect of their blocks so far."""
    n, cols = r.n, r.cols
    since = cols["trial_since"].copy()
    t_eff, t_low, t_high = cols["trial_effect"].copy(), cols["trial_low"].copy(), cols["trial_high"].copy()
    arm = np.full(n, "", dtype=object)
    go, keep, revert = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    inconclusive = np.zeros(n, dtype=bool)
    why = np.full(n, "", dtype=object)
    ev = evidence if evidence is not None and evidence.trials else None
    for j in np.flatnonzero(running).tolist():
        key = (str(r.pops[j]), str(r.prefixes[j]))
        if ev is None:  # trials switched off since: the prefix stays on BBR
            keep[j] = True
            why[j] = "trials switched off: stays on BBR"
            continue
        rounds_done = max(0, (r.now - int(since[j])) // r.cfg.bucket_seconds)
        eff = (effects or {}).get(key) or none("no samples read for the trial", ev.level)
        t_eff[j], t_low[j], t_high[j] = eff.estimate, eff.low, eff.high
        verdict = judge(eff, rounds_done, ev)
        why[j] = verdict.why
        if verdict.action == GO_ON:
            go[j] = True
            arm[j] = next_arm(key[0], key[1], int(since[j]), eff.n_a, eff.n_b, ev)
        elif verdict.action == KEEP_VERDICT:
            keep[j] = True
        else:
            revert[j] = True
            inconclusive[j] = verdict.why.startswith(INCONCLUSIVE)
    return Trials(ev, since, t_eff, t_low, t_high, arm, go, keep, revert, why, inconclusive)


@dataclass(frozen=True)
class Cap:
    over: Mask  # leaves BBR for --max-bbr-per-pop this round
    evidence_low: np.ndarray  # the lower bounds the cap ranked by (NaN: no trial, no interval)
    evidence_effect: np.ndarray


def cap(r: Rows, on_now: Mask, pinned_bbr: Mask, t: Trials) -> Cap:
    """The cap holds this round: over it (lowered, or pins added), the weakest evidence leaves first."""
    over = np.zeros(r.n, dtype=bool)
    had_trial = t.since > 0  # a prefix that never had a trial has no interval (the store reads 0)
    evidence_low = np.where(had_trial, t.low, math.nan)
    evidence_eff = np.where(had_trial, t.effect, math.nan)
    duty, prefixes = r.cols["duty_cycle"], r.prefixes
    for a, b in r.bounds:
        limit = max(0, r.cfg.max_per_pop - int(pinned_bbr[a:b].sum()))
        idx = a + np.flatnonzero(on_now[a:b])
        if len(idx) > limit:
            ranked = idx[weakest_first(evidence_low[idx], evidence_eff[idx], duty[idx], prefixes[idx])]
            over[ranked[: len(idx) - limit]] = True
    return Cap(over, evidence_low, evidence_eff)


def weakest_first(low: np.ndarray, estimate: np.ndarray, duty: np.ndarray, prefixes: np.ndarray) -> np.ndarray:
    """The order in which prefixes on BBR leave for the cap (see the module docstring): the lowest
    lower bound of the trial effect interval first (none: first of all), then the lowest effect
    estimate (none: first), then the lowest duty cycle, then the prefix.  Pure."""
    lo = np.where(np.isfinite(low), low, -np.inf)
    est = np.where(np.isfinite(estimate), estimate, -np.inf)
    return np.lexsort((prefixes.astype(str), duty, est, lo))


def selections(r: Rows, pending: Mask, on_now: Mask, pinned_bbr: Mask) -> tuple[Mask, Mask]:
    """New selections among `pending`, worst duty first, within the room the POP's cap leaves and
    max_new_per_round: (selected, capped)."""
    cols, cfg, prefixes = r.cols, r.cfg, r.prefixes
    select = np.zeros(r.n, dtype=bool)
    capped = np.zeros(r.n, dtype=bool)
    for a, b in r.bounds:
        if not pending[a:b].any():
            continue
        room = max(0, cfg.max_per_pop - int(on_now[a:b].sum()) - int(pinned_bbr[a:b].sum()))
        allowed = min(room, cfg.max_new_per_round)
        idx = a + np.flatnonzero(pending[a:b])
        order = np.lexsort(
            (prefixes[idx], cols["low_delivery_rate"][idx], cols["flap_ratio"][idx], -cols["duty_cycle"][idx])
        )
        ranked = idx[order]
        select[ranked[:allowed]] = True
        capped[ranked[allowed:]] = True
    return select, capped


@dataclass(frozen=True)
class Started:
    select: Mask  # selected straight onto BBR (trials off)
    new_trial: Mask  # a selection that starts a trial
    arm: np.ndarray
    since: np.ndarray
    effect: np.ndarray
    low: np.ndarray
    high: np.ndarray


def start_trials(r: Rows, select: Mask, t: Trials) -> Started:
    """With trials on, a selection starts a trial: its first block's arm, no effect yet."""
    arm, since = t.arm.copy(), t.since.copy()
    t_eff, t_low, t_high = t.effect.copy(), t.low.copy(), t.high.copy()
    if t.config is None:
        return Started(select, np.zeros(r.n, dtype=bool), arm, since, t_eff, t_low, t_high)
    new_trial = select.copy()
    for j in np.flatnonzero(new_trial).tolist():
        arm[j] = next_arm(str(r.pops[j]), str(r.prefixes[j]), r.now, 0, 0, t.config)
    since[new_trial] = r.now
    t_eff[new_trial] = t_low[new_trial] = t_high[new_trial] = math.nan
    return Started(np.zeros(r.n, dtype=bool), new_trial, arm, since, t_eff, t_low, t_high)


@dataclass(frozen=True)
class Outcome:
    decision: np.ndarray
    select: Mask  # each row in exactly one of these (or pinned)
    trial: Mask
    holdout: Mask
    revert: Mask
    keep: Mask
    skip: Mask


def outcome(select: Mask, in_trial: Mask, holdout: Mask, reverted: Mask, keep: Mask, pinned: Mask) -> Outcome:
    """Each row's decision: pin over select over trial over holdout over revert over keep; else skip."""
    decision = np.full(len(select), SKIP, dtype=object)
    decision[keep] = KEEP
    decision[reverted] = REVERT
    decision[holdout] = HOLDOUT
    decision[in_trial] = TRIAL
    decision[select] = SELECT
    decision[pinned] = PIN
    is_trial = in_trial & ~select
    is_holdout = holdout & ~select & ~in_trial
    is_revert = reverted & ~holdout & ~select & ~in_trial
    is_keep = keep & ~reverted & ~holdout & ~select & ~in_trial
    is_skip = ~(select | is_trial | is_holdout | is_revert | is_keep | pinned)
    return Outcome(decision, select, is_trial, is_holdout, is_revert, is_keep, is_skip)


def keep_arms(r: Rows, is_keep: Mask, selected_since: np.ndarray, w: Watch) -> np.ndarray:
    """The algorithm of each kept row: the configured one, CUBIC in a watched prefix's holdback bucket."""
    arms = np.full(r.n, r.cfg.algorithm, dtype=object)
    if w.config is None:
        return arms
    bs = r.cfg.bucket_seconds
    bucket = r.now - r.now % max(bs, 1)
    for j in np.flatnonzero(is_keep).tolist():
        if watch_arm(str(r.pops[j]), str(r.prefixes[j]), int(selected_since[j]), bucket, bs, w.config) == CUBIC:
            arms[j] = CUBIC
    return arms


def algorithms(
    o: Outcome, pinned: Mask, pin_algo: np.ndarray, keep_arm: np.ndarray, arm: np.ndarray, algorithm: str
) -> np.ndarray:
    """Each row's algorithm: the pin's, the kept arm, the configured one for a selection or a trial's
    BBR block, CUBIC otherwise."""
    on = o.select | (o.trial & (arm == BBR))
    return np.where(pinned, pin_algo, np.where(o.keep, keep_arm, np.where(on, algorithm, CUBIC))).astype(object)


@dataclass(frozen=True)
class State:
    """The state a row carries to the next round."""

    selected_since: np.ndarray
    baseline: np.ndarray
    cooldown_until: np.ndarray  # before dropping the ones over
    trial_since: np.ndarray
    trial_effect: np.ndarray
    trial_low: np.ndarray
    trial_high: np.ndarray


def new_state(
    r: Rows, o: Outcome, keep: Mask, trial_keep: Mask, in_trial: Mask, revert_effect: Mask, st: Started, t: Trials,
    w: Watch, h: Holdouts, s: Standing,
) -> State:  # fmt: skip
    """Since when each row is on BBR or in its trial, its baseline, cooldown and trial columns.  `keep`:
    every row staying on BBR (kept, or kept by its trial), `trial_keep`: those kept by their trial,
    `in_trial`: the trials going on and starting."""
    now, cfg, low, select = r.now, r.cfg, r.cols["low_delivery_rate"], st.select
    selected_since = r.cols["selected_since"].copy()
    selected_since[select] = now
    selected_since[trial_keep] = now
    baseline = h.baseline.copy()
    baseline[select | st.new_trial] = low[select | st.new_trial]
    cooldown_until = r.cols["cooldown_until"].copy()
    cooldown_until[revert_effect] = now + cfg.cooldown_seconds
    if t.config is not None:  # an inconclusive trial is no verdict against BBR: a shorter wait
        cooldown_until[revert_effect & t.inconclusive] = now + t.config.trial_retry_seconds
    trial_since = st.since.copy()
    selected_since[~(keep | select | in_trial)] = 0
    selected_since[in_trial] = trial_since[in_trial]
    baseline[~(keep | select | h.holdout | in_trial) | s.pinned] = math.nan
    # the trial's start stays on the rows it decided (kept: while on BBR; reverted: that round)
    watching = w.config is not None
    if watching:  # a selection with trials off is watched from its start: trial_since marks it
        trial_since[o.select] = now
    clear = ~(in_trial | o.keep | (o.revert & (s.was_trial | w.revert)) | (o.select & watching)) | s.pinned
    t_eff, t_low, t_high = st.effect.copy(), st.low.copy(), st.high.copy()
    trial_since[clear] = 0
    t_eff[clear] = t_low[clear] = t_high[clear] = math.nan
    return State(selected_since, baseline, cooldown_until, trial_since, t_eff, t_low, t_high)


def effects(r: Rows, c: Candidates, h: Holdouts) -> tuple[np.ndarray, np.ndarray]:
    """Descriptive only, for the report's population check: each row's low rate over its baseline,
    and the median of that over the POP's holdouts held at least min_hold: (effect, holdout_change)."""
    low, baseline = r.cols["low_delivery_rate"], r.cols["baseline_low_rate"]
    with np.errstate(divide="ignore", invalid="ignore"):
        effect = np.where(c.measurable & (baseline > 0), low / baseline, math.nan)
    holdout_change = np.full(r.n, math.nan)
    mature = h.holdout & ~h.new_holdout & (r.now - h.holdout_since >= r.cfg.min_hold_seconds) & np.isfinite(effect)
    for a, b in r.bounds:
        values = effect[a:b][mature[a:b]]
        holdout_change[a:b] = float(np.median(values)) if len(values) else math.nan
    return effect, holdout_change
