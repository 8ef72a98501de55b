"""The controller's decisions per prefix: pure, numpy on columns, no I/O.

`decide` composes the stages of controller/scoring/decide_stages.py in order (candidates, pins
and the deny list, holdouts, prefixes on BBR and expiry, the watch, trials, the cap, selections,
trial starts, the decision, the new state, the descriptive effects); the reasons are built in
controller/scoring/decide_reasons.py and the input joined in controller/scoring/decide_join.py.
The decision words are controller/store/decisions.py's.

Input: the round's scores (one row per prefix, controller/scoring/query.py), the
previous state (controller/scoring/state.py: who is on BBR since when, holdouts,
cooldowns, baselines), the round time and the configuration.  Output: one row per
prefix with a decision and its reason:

  select   moves to BBR this round (a candidate, within the caps; with trials off)
  trial    a switchback trial goes on (controller/evidence/trial.py): the arm its
           realized buckets call for
  keep     stays on BBR: kept by its trial's rule (or earlier: on BBR until reverted), or selected
           with trials off; watched
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
when it was on BBR or in a trial, so it never reaches a config.  Only candidates, prefixes
that were on BBR, in a trial or a holdout, and pinned prefixes are asked.  A denied prefix
pinned to BBR is not pinned (the deny list wins: validation would refuse the POP's config);
a cubic pin of it holds.

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

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from controller.evidence.model import CUBIC, Effect
from controller.evidence.settings import EvidenceSettings
from controller.scoring import decide_stages as stage
from controller.scoring.decide_join import STATE_COLUMNS, empty_state, joined_columns, with_pinned_rows
from controller.scoring.decide_reasons import pin_reasons, reasons, skip_reasons
from controller.scoring.decide_stages import holdout_hash, weakest_first
from controller.scoring.frames import frame, pop_bounds, sorting, texts
from controller.scoring.pins import Pin
from controller.scoring.query import SCORE_COLUMNS
from controller.scoring.settings import ScoringSettings
from controller.store.decisions import HOLDOUT, KEEP, OVER_CAP, PIN, REVERT, SELECT, SKIP, TRIAL
from controller.store.decisions import ON_BBR_FOR_GOOD as ON_BBR

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "HOLDOUT",
    "KEEP",
    "ON_BBR",
    "OVER_CAP",
    "PIN",
    "REVERT",
    "SELECT",
    "SKIP",
    "STATE_COLUMNS",
    "TRIAL",
    "PopSummary",
    "decide",
    "empty_state",
    "holdout_hash",
    "summarize",
    "weakest_first",
    "with_pinned_rows",
]


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


def decide(
    scores: pd.DataFrame,
    previous: pd.DataFrame,
    now: int,
    cfg: ScoringSettings,
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
    columns, in the stages of controller/scoring/decide_stages.py: no per-row pandas work.
    """
    if pins:
        previous = with_pinned_rows(previous, scores, pins)
    n, cols, scored = joined_columns(scores, previous)
    r = stage.Rows(n, cols, scored, now, cfg, pop_bounds(cols["pop"]))
    c = stage.candidates(r, cfg.expire_seconds)
    pin_algo, pin_text = stage.pin_lookup(r, pins)
    s = stage.deny_and_pin(r, c.candidate, pin_algo, refuse)
    h = stage.holdouts(r, c, s)
    b = stage.on_bbr(r, c, s)
    w = stage.watch(r, b.keep, b.held, evidence, watch_effects)
    t = stage.trials(r, s.was_trial & ~b.revert_denied & ~b.revert_expired, evidence, trial_effects)
    over = stage.cap(r, w.keep | t.keep | t.go, s.pinned_bbr, t)
    keep, trial_keep, trial_go = (w.keep | t.keep) & ~over.over, t.keep & ~over.over, t.go & ~over.over
    on_now = keep | trial_go
    pending = s.candidate & ~s.was_bbr & ~s.was_trial & ~h.holdout & ~c.in_cooldown
    chosen, capped = stage.selections(r, pending, on_now, s.pinned_bbr)
    st = stage.start_trials(r, chosen, t)
    in_trial = trial_go | st.new_trial
    revert_effect = (t.revert & ~over.over) | w.revert
    reverted = revert_effect | b.revert_expired | b.revert_denied | over.over
    o = stage.outcome(st.select, in_trial, h.holdout, reverted, keep, s.pinned)
    state = stage.new_state(r, o, keep, trial_keep, in_trial, revert_effect, st, t, w, h, s)
    effect, holdout_change = stage.effects(r, c, h)
    keep_arm = stage.keep_arms(r, o.keep, state.selected_since, w)
    reason = reasons(r, c, s, w, t, st, over, o, state, trial_keep, revert_effect, on_now, keep_arm)
    reason = pin_reasons(skip_reasons(reason, r, c, s, o, state, capped), s.pinned, pin_algo, pin_text)

    final_cooldown = np.where(state.cooldown_until > now, state.cooldown_until, 0)
    keep_row = scored | ~o.skip | (final_cooldown > 0)  # every scored prefix, and those carrying state
    out: dict[str, np.ndarray] = {name: cols[name] for name in SCORE_COLUMNS}
    out.update(
        {
            "decision": o.decision,
            "algorithm": stage.algorithms(o, s.pinned, pin_algo, keep_arm, st.arm, cfg.algorithm),
            "reason": reason,
            "holdout": h.holdout.astype("uint8"),
            "selected_since": state.selected_since,
            "holdout_since": h.holdout_since,
            "cooldown_until": final_cooldown,
            "last_seen": c.last_seen,
            "baseline_low_rate": state.baseline,
            "effect": effect,
            "holdout_effect": holdout_change,
            "trial_since": state.trial_since,
            "trial_effect": state.trial_effect,
            "trial_low": state.trial_low,
            "trial_high": state.trial_high,
            "new": o.select | (o.trial & st.new_trial),
            "trial_ended": np.where(o.keep & trial_keep, KEEP, np.where(o.revert & revert_effect, REVERT, "")).astype(
                object
            ),
            "scored": scored,
        }
    )
    return frame(out, None if keep_row.all() else keep_row)


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
