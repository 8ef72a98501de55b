"""The controller's decisions per prefix: pure pandas, no I/O.

Input: the round's scores (one row per prefix, controller/scoring/query.py), the
previous state (controller/scoring/state.py: who is on BBR since when, holdouts,
cooldowns, baselines), the round time and the configuration.  Output: one row per
prefix with a decision and its reason:

  select   moves to BBR this round (a candidate, within the caps; with trials off)
  trial    a switchback trial goes on (controller/evidence/trial.py): the arm its
           realized buckets call for
  keep     stays on BBR: kept by its trial's rule, or selected with trials off; watched
           (its holdback buckets run CUBIC, `watch_arm`: the row's algorithm is cubic there)
  revert   back to CUBIC: its trial's upper bound fell below 0 (cooldown), it ended
           inconclusive at its limit (`trial_retry` instead of the cooldown), its watch's
           holdback interval fell below -revert_margin after `min_hold` (cooldown), or it has
           not been seen for `expire`
  holdout  a candidate kept on CUBIC as the control group (stable hash choice)
  skip     stays on CUBIC: not a candidate, too little data, low RTT, cooldown, capped,
           or denied: config validation would refuse the prefix (`refuse`)
  pin      an operator's pin (controller/scoring/pins.py): the pinned algorithm, whatever the
           rules above say; a running trial ends, no hold, holdout or baseline is kept

Candidate: counted_buckets >= min_buckets, duty_cycle >= min_duty,
flap_ratio <= max_flap, and not low-RTT (the per-bucket median min_rtt is below
min_rtt_ms in more than half of the counted buckets, i.e. its median is).  The effects a
decision reads (`trial_effects`, `watch_effects`) come from the one effect model
(controller/evidence/switchback.py); `effect` and `holdout_effect` (low_delivery_rate now /
its baseline, and the POP holdouts' median of the same) are recorded for the report's
population check, never decided on.  Times are epoch seconds; 0 means "not set".

`refuse(prefix)` (optional) says why config validation would refuse a prefix
(controller/rollout/validate.py `prefix_problem`: deny list, built-in ranges,
length, canonical form) or None.  A refused prefix is never a candidate nor a
holdout; it is skipped with the reason "denied: ...", and reverted (no cooldown)
when it was on BBR, so it never reaches a config.  Only candidates and prefixes
carrying state are asked.  A denied prefix pinned to BBR is not pinned (the deny list wins:
validation would refuse the POP's config); a cubic pin of it holds.

The cap `max_per_pop` (--max-bbr-per-pop) holds in the round it is given, also when lowered
below what is on BBR: the POP shrinks to the cap that round.  Pinned BBR prefixes count against
it but never leave for it; of the others on BBR (kept, or in a trial going on), those with the
weakest evidence leave first, decision `revert`, reason "over cap: ...", no cooldown.  Weakest
evidence, in this order (`weakest_first`): the lowest lower bound of the prefix's trial effect
interval (the effect model, controller/evidence/model.py; a prefix without an interval, e.g. a
trial with too few blocks so far or one kept while trials were off, has no evidence and leaves
first), then the lowest effect estimate, then the lowest duty cycle (the score: the less often it
is bad on CUBIC, the less it needs BBR), then the prefix (a stable order).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.evidence.model import BBR, CUBIC, Effect, none
from controller.evidence.settings import EvidenceSettings
from controller.evidence.trial import GO_ON, INCONCLUSIVE, judge, next_arm, watch_arm, watch_verdict
from controller.evidence.trial import KEEP as KEEP_VERDICT
from controller.evidence.trial import REVERT as REVERT_VERDICT
from controller.scoring.frames import by_pop_prefix, columns_of, frame, pop_bounds, sorting, texts
from controller.scoring.pins import Pin, pin_reason
from controller.scoring.query import SCORE_COLUMNS
from controller.scoring.settings import ScoringSettings
from schemas.addresses import prefix_family

if TYPE_CHECKING:
    import pandas as pd

SELECT, KEEP, REVERT, HOLDOUT, SKIP, TRIAL = "select", "keep", "revert", "holdout", "skip", "trial"
PIN = "pin"  # an operator's pin: on BBR when its `algorithm` is not cubic
OVER_CAP = "over cap"  # the start of the reason of a prefix reverted for the cap
ON_BBR = (SELECT, KEEP)  # on BBR for good; a TRIAL row is on BBR while its `algorithm` is bbr

# State columns carried from round to round (see sql/migrations/003_controller.sql).
STATE_COLUMNS: dict[str, str] = {
    "pop": "object",
    "prefix": "object",
    "decision": "object",
    "selected_since": "int64",
    "holdout_since": "int64",
    "cooldown_until": "int64",
    "last_seen": "int64",
    "baseline_low_rate": "float64",
    "trial_since": "int64",
    "trial_effect": "float64",
    "trial_low": "float64",
    "trial_high": "float64",
}

EXPIRE_SECONDS_DEFAULT = 7 * 86400


@dataclass(frozen=True)
class PopSummary:
    pop: str
    scored: int
    selected: int  # on BBR after the round (select + keep)
    new: int
    kept: int
    reverted: int
    holdout: int
    skipped: int
    holdout_change: float
    trials: int = 0  # in a trial after the round (on either arm)
    kept_by_trial: int = 0  # trials that ended keep this round
    reverted_by_trial: int = 0  # trials that ended revert this round
    over_cap: int = 0  # reverted this round for --max-bbr-per-pop
    pinned: int = 0  # pinned prefixes (either algorithm)


def holdout_hash(pop: str, prefix: str, salt: str) -> float:
    """A stable number in [0, 1) for (pop, prefix): below holdout_fraction = control group."""
    digest = hashlib.blake2b(f"{salt}|{pop}|{prefix}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def empty_state() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in STATE_COLUMNS.items()})


def _fmt_rate(bytes_per_s: float) -> str:
    if not math.isfinite(bytes_per_s):
        return "n/a"
    return f"{bytes_per_s * 8 / 1e6:.2f} Mbit/s"


def _pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 100:+.0f}%"


def _fmt_hours(seconds: float) -> str:
    """A duration for a reason text: hours, or minutes / seconds below two of the next unit (a lab clock)."""
    if abs(seconds) >= 7200:
        return f"{seconds / 3600:.1f} h"
    if abs(seconds) >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def decide(
    scores: pd.DataFrame,
    previous: pd.DataFrame,
    now: int,
    cfg: ScoringSettings,
    expire_seconds: int = EXPIRE_SECONDS_DEFAULT,
    refuse: Callable[[str], str | None] | None = None,
    evidence: EvidenceSettings | None = None,
    trial_effects: Mapping[tuple[str, str], Effect] | None = None,
    pins: Mapping[tuple[str, str], Pin] | None = None,
    watch_effects: Mapping[tuple[str, str], Effect] | None = None,
) -> pd.DataFrame:
    """Decisions for every scored or stateful prefix; see the module docstring.

    `pins`: (pop, prefix) -> the operator's pin in force (controller/scoring/pins.py); a pinned
    prefix without data or state gets a row too.

    `evidence`: the trial settings (None or trial_blocks 0: no trials, a selected prefix goes
    straight to BBR); `trial_effects`: (pop, prefix) -> the effect of the prefix's running trial
    over its buckets so far (controller/evidence: the caller reads the samples);
    `watch_effects`: (pop, prefix) -> the holdback effect of each watched prefix on BBR
    (controller/evidence/switchback.py `watch_effect`; evidence.holdback 0: no watch).

    `scores`: columns of controller.scoring.query.SCORE_COLUMNS; `previous`:
    STATE_COLUMNS (the previous round's rows), one row per (pop, prefix) each.
    Returns one row per (pop, prefix), sorted by pop then prefix, with the score
    columns, decision, algorithm, reason, holdout and the new state.  Numpy on
    columns: no per-row pandas work (the frames are only unpacked and packed).
    """
    if pins:
        previous = with_pinned_rows(previous, scores, pins)
    n, cols, scored = joined_columns(scores, previous)
    prev_dec = cols["prev_decision"]
    counted = cols["counted_buckets"]
    duty = cols["duty_cycle"]
    flap = cols["flap_ratio"]
    rtt = cols["median_min_rtt_ms"]
    low = cols["low_delivery_rate"]
    baseline = cols["baseline_low_rate"]
    selected_since = cols["selected_since"].copy()
    holdout_since = cols["holdout_since"].copy()
    cooldown_until = cols["cooldown_until"].copy()
    last_seen = cols["last_seen"].copy()
    seen = scored & (cols["samples"] > 0)
    last_seen[seen] = now

    was_bbr = (prev_dec == SELECT) | (prev_dec == KEEP)
    was_trial = prev_dec == TRIAL
    was_holdout = prev_dec == HOLDOUT
    in_cooldown = cooldown_until > now
    eligible = scored & (counted >= cfg.min_buckets)
    measurable = eligible & np.isfinite(low) & (low > 0)
    low_rtt = eligible & (cols["low_rtt_buckets"] * 2 > counted)  # median min_rtt below
    candidate = eligible & ~low_rtt & (duty >= cfg.min_duty) & (flap <= cfg.max_flap)
    pops = cols["pop"]
    prefixes = cols["prefix"]
    bounds = pop_bounds(pops)
    pin_algo = np.full(n, "", dtype=object)
    pin_text = np.full(n, "", dtype=object)
    if pins:  # rows are sorted by (pop, prefix): look each pin up, not each row
        spans = {str(pops[a]): (a, b) for a, b in bounds}
        for (p, x), pin in pins.items():
            a, b = spans.get(p, (0, 0))
            j = a + int(np.searchsorted(prefixes[a:b], x)) if b > a else b
            if j < b and prefixes[j] == x:
                pin_algo[j], pin_text[j] = pin.algorithm, pin_reason(pin)
    denied = np.full(n, "", dtype=object)
    if refuse is not None:
        for j in np.flatnonzero(candidate | was_bbr | was_trial | was_holdout | (pin_algo != "")).tolist():
            denied[j] = refuse(str(prefixes[j])) or ""
    refused = denied != ""
    pinned = (pin_algo != "") & ~(refused & (pin_algo != CUBIC))  # the deny list beats a BBR pin
    pinned_bbr = pinned & (pin_algo != CUBIC)
    candidate &= ~refused & ~pinned
    was_bbr &= ~pinned
    was_trial &= ~pinned
    was_holdout &= ~pinned
    hashed = np.zeros(n, dtype=bool)
    for j in np.flatnonzero((candidate | was_holdout) & ~was_bbr & ~was_trial).tolist():
        hashed[j] = holdout_hash(pops[j], prefixes[j], cfg.holdout_salt) < cfg.holdout_fraction
    expired = (~seen) & (last_seen > 0) & (now - last_seen >= expire_seconds)

    # Holdouts: candidates in the hash group, and earlier holdouts that are still seen.
    holdout = hashed & ~was_bbr & ~was_trial & ~in_cooldown & ~refused & (candidate | (was_holdout & ~expired))
    new_holdout = holdout & ~was_holdout
    holdout_since[new_holdout] = now
    baseline_out = baseline.copy()
    baseline_out[new_holdout] = low[new_holdout]
    holdout_since[~holdout] = 0

    # Prefixes on BBR for good: they stay (the no-flip-flop hysteresis) unless denied or gone.
    # Whether BBR helps a prefix is judged by its trial (like for like: the same prefix's BBR and
    # CUBIC blocks, with an interval), never by a point ratio against a window baseline.
    held = was_bbr & (now - selected_since < cfg.min_hold_seconds)  # not released for a quiet spell
    revert_denied = (was_bbr | was_trial) & refused
    revert_expired = ((was_bbr & ~held) | was_trial) & ~refused & expired
    keep = was_bbr & ~revert_expired & ~revert_denied

    # The watch: a prefix on BBR keeps running CUBIC in its holdback buckets and goes back to CUBIC
    # (with a cooldown) when they show BBR worse, once its min hold is over.
    watch_cfg = evidence if evidence is not None and evidence.holdback > 0 else None
    watching = watch_cfg is not None
    revert_watch = np.zeros(n, dtype=bool)
    watch_why = np.full(n, "", dtype=object)
    if watch_cfg is not None:
        for j in np.flatnonzero(keep).tolist():
            key = (str(pops[j]), str(prefixes[j]))
            eff = (watch_effects or {}).get(key) or none("no holdback samples read", watch_cfg.level)
            verdict = watch_verdict(eff, cfg.revert_margin)
            watch_why[j] = verdict.why
            if verdict.action == REVERT_VERDICT and not held[j]:
                revert_watch[j] = True
        keep &= ~revert_watch

    # Running trials: the sequential rule on the effect of their blocks so far.
    trial_since = cols["trial_since"].copy()
    t_eff, t_low, t_high = cols["trial_effect"].copy(), cols["trial_low"].copy(), cols["trial_high"].copy()
    arm = np.full(n, "", dtype=object)
    trial_go = np.zeros(n, dtype=bool)
    trial_keep = np.zeros(n, dtype=bool)
    trial_revert = np.zeros(n, dtype=bool)
    trial_why = np.full(n, "", dtype=object)
    inconclusive = np.zeros(n, dtype=bool)
    ev = evidence if evidence is not None and evidence.trials else None
    running = was_trial & ~revert_denied & ~revert_expired
    for j in np.flatnonzero(running).tolist():
        key = (str(pops[j]), str(prefixes[j]))
        if ev is None:  # trials switched off since: the prefix stays on BBR
            trial_keep[j] = True
            trial_why[j] = "trials switched off: stays on BBR"
            continue
        rounds_done = max(0, (now - int(trial_since[j])) // cfg.bucket_seconds)
        eff = (trial_effects or {}).get(key) or none("no samples read for the trial", ev.level)
        t_eff[j], t_low[j], t_high[j] = eff.estimate, eff.low, eff.high
        verdict = judge(eff, rounds_done, ev)
        trial_why[j] = verdict.why
        if verdict.action == GO_ON:
            trial_go[j] = True
            arm[j] = next_arm(key[0], key[1], int(trial_since[j]), eff.n_a, eff.n_b, ev)
        elif verdict.action == KEEP_VERDICT:
            trial_keep[j] = True
        else:
            trial_revert[j] = True
            inconclusive[j] = verdict.why.startswith(INCONCLUSIVE)
    keep |= trial_keep

    # The cap holds this round: over it (lowered, or pins added), the weakest evidence leaves first.
    over_cap = np.zeros(n, dtype=bool)
    # a prefix that never had a trial has no interval (the store reads its trial columns as 0)
    had_trial = trial_since > 0
    evidence_low = np.where(had_trial, t_low, math.nan)  # the lower bounds the cap ranked by (for the reasons)
    evidence_eff = np.where(had_trial, t_eff, math.nan)
    on_now = keep | trial_go  # counts against the POP's cap, with the BBR pins
    for a, b in bounds:
        limit = max(0, cfg.max_per_pop - int(pinned_bbr[a:b].sum()))
        idx = a + np.flatnonzero(on_now[a:b])
        if len(idx) > limit:
            ranked = idx[weakest_first(evidence_low[idx], evidence_eff[idx], duty[idx], prefixes[idx])]
            over_cap[ranked[: len(idx) - limit]] = True
    keep &= ~over_cap
    trial_keep &= ~over_cap
    trial_go &= ~over_cap
    on_now = keep | trial_go

    # New selections: candidates not on BBR, not holdout, not cooling down; capped per POP.
    pending = candidate & ~was_bbr & ~was_trial & ~holdout & ~in_cooldown
    select = np.zeros(n, dtype=bool)
    capped = np.zeros(n, dtype=bool)
    for a, b in bounds:
        if not pending[a:b].any():
            continue
        room = max(0, cfg.max_per_pop - int(on_now[a:b].sum()) - int(pinned_bbr[a:b].sum()))
        allowed = min(room, cfg.max_new_per_round)
        idx = a + np.flatnonzero(pending[a:b])
        order = np.lexsort((prefixes[idx], low[idx], flap[idx], -duty[idx]))  # worst duty first
        ranked = idx[order]
        select[ranked[:allowed]] = True
        capped[ranked[allowed:]] = True
    new_trial = np.zeros(n, dtype=bool)
    if ev is not None:  # a selection starts a trial: its first block's arm
        new_trial = select.copy()
        select[:] = False
        for j in np.flatnonzero(new_trial).tolist():
            arm[j] = next_arm(str(pops[j]), str(prefixes[j]), now, 0, 0, ev)
        trial_since[new_trial] = now
        t_eff[new_trial] = t_low[new_trial] = t_high[new_trial] = math.nan
    in_trial = trial_go | new_trial

    revert_effect = (trial_revert & ~over_cap) | revert_watch
    reverted = revert_effect | revert_expired | revert_denied | over_cap
    decision = np.full(n, SKIP, dtype=object)
    decision[keep] = KEEP
    decision[reverted] = REVERT
    decision[holdout] = HOLDOUT
    decision[in_trial] = TRIAL
    decision[select] = SELECT
    decision[pinned] = PIN
    is_select = select
    is_trial = in_trial & ~select
    is_holdout = holdout & ~select & ~in_trial
    is_revert = reverted & ~holdout & ~select & ~in_trial
    is_keep = keep & ~reverted & ~holdout & ~select & ~in_trial
    is_skip = ~(is_select | is_trial | is_holdout | is_revert | is_keep | pinned)

    selected_since[select] = now
    selected_since[trial_keep] = now
    baseline_out[select | new_trial] = low[select | new_trial]
    cooldown_until[revert_effect] = now + cfg.cooldown_seconds
    if ev is not None:  # an inconclusive trial is no verdict against BBR: a shorter wait
        cooldown_until[revert_effect & inconclusive] = now + ev.trial_retry_seconds
    selected_since[~(keep | select | in_trial)] = 0
    selected_since[in_trial] = trial_since[in_trial]
    clear_baseline = ~(keep | select | holdout | in_trial) | pinned
    baseline_out[clear_baseline] = math.nan
    # the trial's start stays on the rows it decided (kept: while on BBR; reverted: that round)
    if watching:  # a selection with trials off is watched from its start: trial_since marks it
        trial_since[is_select] = now
    clear_trial = ~(in_trial | is_keep | (is_revert & (was_trial | revert_watch)) | (is_select & watching)) | pinned
    trial_since[clear_trial] = 0
    t_eff[clear_trial] = t_low[clear_trial] = t_high[clear_trial] = math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        effect = np.where(measurable & (baseline > 0), low / baseline, math.nan)  # descriptive only
    holdout_change = np.full(n, math.nan)
    mature_holdout = holdout & ~new_holdout & (now - holdout_since >= cfg.min_hold_seconds) & np.isfinite(effect)
    for a, b in bounds:
        values = effect[a:b][mature_holdout[a:b]]
        holdout_change[a:b] = float(np.median(values)) if len(values) else math.nan

    reason = np.full(n, "", dtype=object)
    texts = Texts(cfg, now, duty, flap, counted)
    put = texts.put
    put(reason, is_select | (is_trial & new_trial), texts.select, rtt, low)
    for j in np.flatnonzero(is_trial & new_trial).tolist():
        reason[j] = f"{reason[j]}; trial starts, first block {arm[j]}"
    from_trial = (is_trial & ~new_trial) | (is_keep & trial_keep) | (is_revert & trial_revert & ~over_cap)
    reason[from_trial] = trial_why[from_trial]
    reason[is_revert & revert_watch] = watch_why[is_revert & revert_watch]
    kept_before = is_keep & ~trial_keep
    by_trial = (trial_since > 0) & np.isfinite(t_eff)
    put(reason, kept_before & by_trial, texts.kept, t_eff, t_low, t_high)
    put(reason, kept_before & ~by_trial, texts.held, selected_since)
    keep_arm = np.full(n, cfg.algorithm, dtype=object)
    if watch_cfg is not None:
        bucket = now - now % max(cfg.bucket_seconds, 1)
        for j in np.flatnonzero(is_keep).tolist():
            if watch_why[j]:
                reason[j] = f"{reason[j]}; {watch_why[j]}"
            if watch_arm(str(pops[j]), str(prefixes[j]), int(selected_since[j]), bucket, cfg.bucket_seconds,
                         watch_cfg) == CUBIC:  # fmt: skip
                keep_arm[j] = CUBIC
                reason[j] = f"{reason[j]}; holdback bucket on CUBIC"
    for j in np.flatnonzero(is_revert & revert_effect).tolist():
        wait = ev.trial_retry_seconds if ev is not None and inconclusive[j] else cfg.cooldown_seconds
        reason[j] = (
            f"{reason[j]}; {'may be selected again after' if inconclusive[j] else 'cooldown'} {_fmt_hours(wait)}"
        )
    has_denial = refused
    put(reason, is_revert & has_denial, texts.denied, denied)
    put(reason, is_revert & ~has_denial & ~revert_effect & ~over_cap, texts.no_traffic, last_seen)
    cap_counts = np.zeros(n, dtype=np.int64)  # on BBR before the cap, per POP (BBR pins included)
    pin_counts = np.zeros(n, dtype=np.int64)
    for a, b in bounds:
        cap_counts[a:b] = int((over_cap | on_now | pinned_bbr)[a:b].sum())
        pin_counts[a:b] = int(pinned_bbr[a:b].sum())
    put(reason, is_revert & over_cap, texts.over_cap, cap_counts, pin_counts, evidence_low)
    reason[pinned] = pin_text[pinned]
    put(reason, is_holdout, texts.holdout, candidate)
    # skip: the first rule that applies, in this order
    left = is_skip.copy()
    for rule, fn, args in (
        (refused, texts.denied, (denied,)),
        (candidate & in_cooldown, texts.cooldown, (cooldown_until,)),
        (capped, texts.capped, ()),
        (in_cooldown, texts.cooldown, (cooldown_until,)),
        (~scored, None, "no data in the window"),
        (cols["qualifying"] == 0, None, f"no qualifying flows (bytes_acked > {cfg.min_bytes} B) in the window"),
        (~eligible, texts.too_few, ()),
        (low_rtt, texts.low_rtt, (cols["low_rtt_buckets"], rtt)),
        (left, texts.not_candidate, ()),
    ):
        here = left & rule
        if fn is None:
            reason[here] = args
        else:
            put(reason, here, fn, *args)
        left &= ~here

    for j in np.flatnonzero((pin_algo != "") & ~pinned).tolist():
        reason[j] = f"{reason[j]}; pinned to {pin_algo[j]}, not applied: the deny list wins"

    final_cooldown = np.where(cooldown_until > now, cooldown_until, 0)
    # Rows worth writing: every scored prefix, plus unscored ones carrying state.
    keep_row = scored | ~is_skip | (final_cooldown > 0)
    out: dict[str, np.ndarray] = {name: cols[name] for name in SCORE_COLUMNS}
    out.update(
        {
            "decision": decision,
            "algorithm": np.where(
                pinned,
                pin_algo,
                np.where(is_keep, keep_arm, np.where(is_select | (is_trial & (arm == BBR)), cfg.algorithm, CUBIC)),
            ).astype(object),
            "reason": reason,
            "holdout": holdout.astype("uint8"),
            "selected_since": selected_since,
            "holdout_since": holdout_since,
            "cooldown_until": final_cooldown,
            "last_seen": last_seen,
            "baseline_low_rate": baseline_out,
            "effect": effect,
            "holdout_effect": holdout_change,
            "trial_since": trial_since,
            "trial_effect": t_eff,
            "trial_low": t_low,
            "trial_high": t_high,
            "new": is_select | (is_trial & new_trial),
            "trial_ended": np.where(is_keep & trial_keep, KEEP, np.where(is_revert & revert_effect, REVERT, "")).astype(
                object
            ),
            "scored": scored,
        }
    )
    return frame(out, None if keep_row.all() else keep_row)


def weakest_first(low: np.ndarray, estimate: np.ndarray, duty: np.ndarray, prefixes: np.ndarray) -> np.ndarray:
    """The order in which prefixes on BBR leave for the cap (see the module docstring): the lowest
    lower bound of the trial effect interval first (none: first of all), then the lowest effect
    estimate (none: first), then the lowest duty cycle, then the prefix.  Pure."""
    lo = np.where(np.isfinite(low), low, -np.inf)
    est = np.where(np.isfinite(estimate), estimate, -np.inf)
    return np.lexsort((prefixes.astype(str), duty, est, lo))


def with_pinned_rows(previous: pd.DataFrame, scores: pd.DataFrame, pins: Mapping[tuple[str, str], Pin]) -> pd.DataFrame:
    """`previous` plus an empty state row (decision '') for each pinned (pop, prefix) that has
    neither scores nor state, so a pin reaches the decisions (and the config) without data."""
    import pandas as pd

    known = set(zip(texts(previous["pop"]).tolist(), texts(previous["prefix"]).tolist(), strict=True))
    known |= set(zip(texts(scores["pop"]).tolist(), texts(scores["prefix"]).tolist(), strict=True))
    missing = sorted(k for k in pins if k not in known)
    if not missing:
        return previous
    extra = {
        name: [k[0] for k in missing]
        if name == "pop"
        else [k[1] for k in missing]
        if name == "prefix"
        else [""] * len(missing)
        if dtype == "object"
        else np.full(len(missing), math.nan if dtype == "float64" else 0, dtype=dtype)
        for name, dtype in STATE_COLUMNS.items()
    }
    rows = pd.DataFrame(extra)
    return rows if previous.empty else pd.concat([previous, rows], ignore_index=True)


def joined_columns(scores: pd.DataFrame, previous: pd.DataFrame) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
    """The scores and the previous state as columns over the union of their (pop, prefix)s,
    sorted; scores missing: 0 / NaN (family: the prefix's), state missing: 0 / NaN / ''.
    Returns (rows, columns, scored)."""
    s, skey = by_pop_prefix(columns_of(scores, SCORE_COLUMNS))
    p, pkey = by_pop_prefix(columns_of(previous, STATE_COLUMNS), unique=True)  # a duplicate: the first counts
    index = dict(zip(skey.tolist(), range(len(skey)), strict=True))
    at = np.fromiter((index.get(k, -1) for k in pkey.tolist()), dtype=np.int64, count=len(pkey))
    only_prev = np.flatnonzero(at < 0)
    n_s = len(skey)
    if len(only_prev):  # state rows without scores go where they sort among the scored rows
        spots = np.searchsorted(skey, pkey[only_prev]) if n_s else np.zeros(len(only_prev), dtype=np.int64)
        position = np.arange(n_s) + np.searchsorted(spots, np.arange(n_s), side="right")
        prev_position = spots + np.arange(len(only_prev))
    else:
        position, prev_position = np.arange(n_s), np.zeros(0, dtype=np.int64)
    n = n_s + len(only_prev)
    scored = np.zeros(n, dtype=bool)
    scored[position] = True
    cols: dict[str, np.ndarray] = {}
    for name, dtype in SCORE_COLUMNS.items():
        if dtype == "object":
            col = np.empty(n, dtype=object)
            col[position] = s[name]
            col[prev_position] = p[name][only_prev]
        else:
            col = np.zeros(n, dtype=dtype) if dtype == "int64" else np.full(n, math.nan)
            col[position] = s[name]
        cols[name] = col
    if len(only_prev):  # rows carried from the state without data: their prefix's family, not 0
        cols["family"][prev_position] = [prefix_family(str(x)) for x in p["prefix"][only_prev].tolist()]
    row_of_prev = np.empty(len(pkey), dtype=np.int64)  # each state row's row in the union
    matched = at >= 0
    row_of_prev[matched] = position[at[matched]]
    row_of_prev[only_prev] = prev_position
    decision = np.full(n, "", dtype=object)
    decision[row_of_prev] = p["decision"]
    cols["prev_decision"] = decision
    for name in ("selected_since", "holdout_since", "cooldown_until", "last_seen", "trial_since"):
        col = np.zeros(n, dtype="int64")
        col[row_of_prev] = p[name]
        cols[name] = col
    for name in ("baseline_low_rate", "trial_effect", "trial_low", "trial_high"):
        col = np.full(n, math.nan)
        col[row_of_prev] = p[name]
        cols[name] = col
    return n, cols, scored


class Texts:
    """The reason texts, each built once per distinct set of values (most prefixes share one)."""

    def __init__(self, cfg: ScoringSettings, now: int, duty: np.ndarray, flap: np.ndarray, counted: np.ndarray) -> None:
        self.cfg = cfg
        self.now = now
        self.duty, self.flap, self.counted = duty, flap, counted

    def put(self, out: np.ndarray, rows: np.ndarray, fn: Callable[..., str], *columns: np.ndarray) -> None:
        """out[rows] = fn(row values of `columns`...), memoized on those values."""
        idx = np.flatnonzero(rows)
        if not len(idx):
            return
        memo: dict[tuple[Any, ...], str] = {}
        picked = [c[idx] for c in (self.duty, self.flap, self.counted, *columns)]
        values = [c.tolist() for c in picked]
        # the key: floats by their bits (-0.0 and 0.0 print differently but compare equal)
        keys = [c.view(np.int64).tolist() if c.dtype == np.float64 else v for c, v in zip(picked, values, strict=True)]
        texts = []
        for key, args in zip(zip(*keys, strict=True), zip(*values, strict=True), strict=True):
            text = memo.get(key)
            if text is None:
                text = memo[key] = fn(*args)
            texts.append(text)
        out[idx] = texts

    def duty_s(self, du: float, fl: float, c: int) -> str:
        return f"duty {du:.2f} flap {fl:.2f} over {c} buckets"

    def select(self, du: float, fl: float, c: int, rtt: float, low: float) -> str:
        return f"candidate: {self.duty_s(du, fl, c)}, min_rtt {rtt:.1f} ms; baseline low rate {_fmt_rate(low)}"

    def held(self, du: float, fl: float, c: int, since: int) -> str:
        return f"on BBR for {_fmt_hours(self.now - since)} (no trial: trials are off)"

    def kept(self, du: float, fl: float, c: int, eff: float, lo: float, hi: float) -> str:
        return f"on BBR: kept by its trial (effect {_pct(eff)} [{_pct(lo)}, {_pct(hi)}])"

    def denied(self, du: float, fl: float, c: int, why: str) -> str:
        return f"denied: {why}"

    def no_traffic(self, du: float, fl: float, c: int, seen: int) -> str:
        return f"no traffic for {_fmt_hours(self.now - seen)}: released"

    def holdout(self, du: float, fl: float, c: int, candidate: bool) -> str:
        what = "candidate" if candidate else "earlier candidate"
        return f"holdout (control group, {self.cfg.holdout_fraction:.0%} by hash): {what}, {self.duty_s(du, fl, c)}"

    def cooldown(self, du: float, fl: float, c: int, until: int) -> str:
        return f"cooldown after a revert: {_fmt_hours(until - self.now)} left"

    def capped(self, du: float, fl: float, c: int) -> str:
        cfg = self.cfg
        return (
            f"capped: candidate ({self.duty_s(du, fl, c)}) but max {cfg.max_new_per_round} new per round, "
            f"{cfg.max_per_pop} per POP"
        )

    def over_cap(self, du: float, fl: float, c: int, on_bbr: int, pinned: int, low: float) -> str:
        pins = f", {pinned} of them pinned" if pinned else ""
        evidence = f"trial effect lower bound {_pct(low)}" if math.isfinite(low) else "no trial effect interval"
        return (
            f"{OVER_CAP}: --max-bbr-per-pop {self.cfg.max_per_pop} with {on_bbr} on BBR{pins}; the weakest "
            f"evidence leaves first ({evidence}, duty {du:.2f})"
        )

    def too_few(self, du: float, fl: float, c: int) -> str:
        return (
            f"too few samples: counted in {c} buckets, needs {self.cfg.min_buckets} "
            f"(>= {self.cfg.min_samples} qualifying samples per bucket)"
        )

    def low_rtt(self, du: float, fl: float, c: int, buckets: int, rtt: float) -> str:
        return (
            f"low RTT: median min_rtt below {self.cfg.min_rtt_ms:g} ms in {buckets} of {c} buckets (mean {rtt:.1f} ms)"
        )

    def not_candidate(self, du: float, fl: float, c: int) -> str:
        cfg = self.cfg
        return f"not a candidate: {self.duty_s(du, fl, c)} (needs duty >= {cfg.min_duty:g}, flap <= {cfg.max_flap:g})"


def summarize(decisions: pd.DataFrame) -> list[PopSummary]:
    """Per-POP counts of a round's decisions (for the log line and the metrics); rows sorted by POP."""
    pops = texts(decisions["pop"])
    order = sorting(pops)
    dec = texts(decisions["decision"])
    scored = decisions["scored"].to_numpy(dtype=bool)
    changes = decisions["holdout_effect"].to_numpy(dtype="float64")
    if order is not None:
        pops, dec, scored, changes = pops[order], dec[order], scored[order], changes[order]
    out = []
    algo = texts(decisions["algorithm"])
    new = decisions["new"].to_numpy(dtype=bool) if "new" in decisions else dec == SELECT
    ended = texts(decisions["trial_ended"]) if "trial_ended" in decisions else np.full(len(dec), "", dtype=object)
    reasons = texts(decisions["reason"]) if "reason" in decisions else np.full(len(dec), "", dtype=object)
    capped = np.array([r.startswith(OVER_CAP) for r in reasons.tolist()], dtype=bool)
    if order is not None:
        algo, new, ended, capped = algo[order], new[order], ended[order], capped[order]
    for a, b in pop_bounds(pops):
        d = dec[a:b]
        select, keep = int((d == SELECT).sum()), int((d == KEEP).sum())
        trial = d == TRIAL
        trial_bbr = int((trial & (algo[a:b] == "bbr")).sum())
        pin = d == PIN
        pin_bbr = int((pin & (algo[a:b] != CUBIC)).sum())
        finite = changes[a:b][~np.isnan(changes[a:b])]
        out.append(
            PopSummary(
                pop=str(pops[a]),
                scored=int(scored[a:b].sum()),
                selected=select + keep + trial_bbr + pin_bbr,
                new=int(new[a:b].sum()),
                kept=keep,
                reverted=int((d == REVERT).sum()),
                holdout=int((d == HOLDOUT).sum()),
                skipped=int((d == SKIP).sum()),
                holdout_change=float(finite[0]) if len(finite) else math.nan,
                trials=int(trial.sum()),
                kept_by_trial=int((ended[a:b] == KEEP).sum()),
                reverted_by_trial=int((ended[a:b] == REVERT).sum()),
                over_cap=int(capped[a:b].sum()),
                pinned=int(pin.sum()),
            )
        )
    return out
