"""Each stage of controller/scoring/decide_stages.py on its own: a few rows built by hand, the
stage's answer checked, and its inputs left as they were (the stages are pure)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from controller.evidence.model import Effect
from controller.evidence.settings import EvidenceSettings
from controller.scoring import decide_stages as stage
from controller.scoring.decide_join import empty_state, joined_columns
from controller.scoring.frames import pop_bounds
from controller.scoring.pins import Pin
from controller.scoring.settings import ScoringSettings
from tests.support.decide_reference import SCORE_COLUMNS

NOW = 1_709_294_400
HOUR = 3600
CFG = ScoringSettings(min_buckets=4, max_per_pop=2, max_new_per_round=1, holdout_fraction=0.0, min_hold_seconds=HOUR)


def rows(scores: list[dict[str, object]], state: list[dict[str, object]] | None = None, cfg: ScoringSettings = CFG):
    """Rows of scored prefixes (defaults: a good candidate) and of state rows."""
    base = {
        "family": 2, "samples": 100, "qualifying": 50, "counted_buckets": 10, "bad_buckets": 8, "transitions": 1,
        "duty_cycle": 0.8, "flap_ratio": 0.1, "median_delivery_rate": 2e6, "low_delivery_rate": 1e6,
        "median_min_rtt_ms": 40.0, "low_rtt_buckets": 0,
    }  # fmt: skip
    s = pd.DataFrame([{**base, **row} for row in scores], columns=list(SCORE_COLUMNS))
    p = empty_state()
    if state:
        defaults = {"selected_since": 0, "holdout_since": 0, "cooldown_until": 0, "last_seen": NOW,
                    "baseline_low_rate": math.nan, "trial_since": 0, "trial_effect": math.nan,
                    "trial_low": math.nan, "trial_high": math.nan}  # fmt: skip
        p = pd.DataFrame([{**defaults, **row} for row in state]).astype(p.dtypes.to_dict())
    n, cols, scored = joined_columns(s, p)
    return stage.Rows(n, cols, scored, NOW, cfg, pop_bounds(cols["pop"]))


def pfx(i: int) -> str:
    return f"198.18.{i}.0/24"


def effect(est: float, low: float, high: float, n: int = 8) -> Effect:
    return Effect(est, low, high, 0.9, math.log1p(est), 0.1, n, n, 100)


def test_candidates_by_buckets_duty_flap_and_rtt() -> None:
    r = rows([
        {"pop": "p", "prefix": pfx(1)},
        {"pop": "p", "prefix": pfx(2), "counted_buckets": 3},
        {"pop": "p", "prefix": pfx(3), "duty_cycle": 0.1},
        {"pop": "p", "prefix": pfx(4), "flap_ratio": 0.9},
        {"pop": "p", "prefix": pfx(5), "low_rtt_buckets": 6},
    ])  # fmt: skip
    before = {k: v.copy() for k, v in r.cols.items()}
    c = stage.candidates(r, 7 * 86400)
    assert c.candidate.tolist() == [True, False, False, False, False]
    assert c.eligible.tolist() == [True, False, True, True, True]
    assert c.low_rtt.tolist() == [False, False, False, False, True]
    assert all(np.array_equal(v, r.cols[k], equal_nan=v.dtype.kind == "f") for k, v in before.items())


def test_candidates_expire_unseen_state_and_cooldown() -> None:
    r = rows([], [
        {"pop": "p", "prefix": pfx(1), "decision": "keep", "last_seen": NOW - 2 * HOUR},
        {"pop": "p", "prefix": pfx(2), "decision": "keep", "last_seen": NOW - 10},
        {"pop": "p", "prefix": pfx(3), "decision": "skip", "cooldown_until": NOW + 1},
    ])  # fmt: skip
    c = stage.candidates(r, HOUR)
    assert c.expired.tolist() == [True, False, False]
    assert c.in_cooldown.tolist() == [False, False, True]
    assert not c.seen.any()


def test_pin_lookup_finds_pins_among_sorted_rows() -> None:
    r = rows([{"pop": "a", "prefix": pfx(1)}, {"pop": "b", "prefix": pfx(1)}, {"pop": "b", "prefix": pfx(2)}])
    pins = {("b", pfx(2)): Pin("b", pfx(2), "cubic", "alice", "why", NOW * 10**9), ("c", pfx(1)): Pin(
        "c", pfx(1), "bbr", "bob", "", NOW * 10**9)}  # fmt: skip
    algo, text = stage.pin_lookup(r, pins)
    assert algo.tolist() == ["", "", "cubic"]
    assert text[2] and not text[0]


def test_deny_list_beats_a_bbr_pin_not_a_cubic_pin() -> None:
    r = rows([{"pop": "p", "prefix": pfx(i)} for i in range(4)], [{"pop": "p", "prefix": pfx(3), "decision": "keep"}])
    c = stage.candidates(r, HOUR)
    pin_algo = np.array(["bbr", "cubic", "bbr", ""], dtype=object)
    asked: list[str] = []

    def refuse(prefix: str) -> str | None:
        asked.append(prefix)
        return "denied" if prefix in (pfx(0), pfx(1), pfx(3)) else None

    s = stage.deny_and_pin(r, c.candidate, pin_algo, refuse)
    assert s.pinned.tolist() == [False, True, True, False]
    assert s.pinned_bbr.tolist() == [False, False, True, False]
    assert s.candidate.tolist() == [False, False, False, False]
    assert s.was_bbr.tolist() == [False, False, False, True]
    assert sorted(asked) == [pfx(i) for i in range(4)]


def test_holdouts_take_the_hash_group_and_set_a_baseline() -> None:
    cfg = ScoringSettings(min_buckets=4, holdout_fraction=1.0)
    r = rows([{"pop": "p", "prefix": pfx(1)}, {"pop": "p", "prefix": pfx(2)}], [
        {"pop": "p", "prefix": pfx(2), "decision": "keep"}], cfg)  # fmt: skip
    c = stage.candidates(r, HOUR)
    s = stage.deny_and_pin(r, c.candidate, np.full(r.n, "", dtype=object), None)
    h = stage.holdouts(r, c, s)
    assert h.holdout.tolist() == [True, False] and h.new_holdout.tolist() == [True, False]
    assert h.holdout_since.tolist() == [NOW, 0] and h.baseline[0] == 1e6


def test_on_bbr_holds_in_min_hold_and_reverts_denied_or_gone() -> None:
    r = rows([], [
        {"pop": "p", "prefix": pfx(1), "decision": "keep", "selected_since": NOW - 60, "last_seen": NOW - 2 * HOUR},
        {"pop": "p", "prefix": pfx(2), "decision": "keep", "selected_since": NOW - 9 * HOUR,
         "last_seen": NOW - 2 * HOUR},
        {"pop": "p", "prefix": pfx(3), "decision": "trial", "trial_since": NOW - HOUR, "last_seen": NOW - 2 * HOUR},
        {"pop": "p", "prefix": pfx(4), "decision": "keep", "selected_since": NOW - 9 * HOUR},
    ])  # fmt: skip
    c = stage.candidates(r, HOUR)
    s = stage.deny_and_pin(r, c.candidate, np.full(r.n, "", dtype=object), lambda x: "no" if x == pfx(4) else None)
    b = stage.on_bbr(r, c, s)
    assert b.held.tolist() == [True, False, False, False]
    assert b.revert_expired.tolist() == [False, True, True, False]
    assert b.revert_denied.tolist() == [False, False, False, True]
    assert b.keep.tolist() == [True, False, False, False]


def test_watch_reverts_a_worse_holdback_after_min_hold_only() -> None:
    r = rows([{"pop": "p", "prefix": pfx(1)}, {"pop": "p", "prefix": pfx(2)}])
    keep, held = np.array([True, True]), np.array([True, False])
    worse = {("p", pfx(1)): effect(-0.5, -0.6, -0.4), ("p", pfx(2)): effect(-0.5, -0.6, -0.4)}
    w = stage.watch(r, keep, held, EvidenceSettings(holdback=4), worse)
    assert w.revert.tolist() == [False, True] and w.keep.tolist() == [True, False]
    assert all(w.why)
    off = stage.watch(r, keep, held, EvidenceSettings(holdback=0), worse)
    assert off.config is None and not off.revert.any() and off.keep is keep
    assert keep.tolist() == [True, True]


def test_trials_keep_revert_go_on_and_trials_off() -> None:
    r = rows([{"pop": "p", "prefix": pfx(i)} for i in range(3)], [
        {"pop": "p", "prefix": pfx(i), "decision": "trial", "trial_since": NOW - 6 * HOUR}
        for i in range(3)])  # fmt: skip
    ev = EvidenceSettings()
    effects = {("p", pfx(0)): effect(0.6, 0.4, 0.8, 40), ("p", pfx(1)): effect(-0.5, -0.7, -0.3, 40)}
    running = np.array([True, True, True])
    t = stage.trials(r, running, ev, effects)
    assert t.keep.tolist() == [True, False, False]
    assert t.revert.tolist() == [False, True, False]
    assert t.go.tolist() == [False, False, True] and t.arm[2] in ("bbr", "cubic")
    assert t.effect[0] == 0.6 and math.isnan(r.cols["trial_effect"][0])
    off = stage.trials(r, running, EvidenceSettings(trial_blocks=0), effects)
    assert off.keep.all() and off.config is None and off.why[0] == "trials switched off: stays on BBR"


def test_cap_lets_the_weakest_evidence_leave_first() -> None:
    r = rows([{"pop": "p", "prefix": pfx(i)} for i in range(4)], [
        {"pop": "p", "prefix": pfx(0), "decision": "trial", "trial_since": NOW - HOUR},
        {"pop": "p", "prefix": pfx(1), "decision": "trial", "trial_since": NOW - HOUR},
        {"pop": "p", "prefix": pfx(2), "decision": "keep"}])  # fmt: skip
    t = stage.trials(r, np.array([True, True, False, False]), EvidenceSettings(), {
        ("p", pfx(0)): effect(0.1, 0.05, 0.2), ("p", pfx(1)): effect(0.1, -0.2, 0.4)})  # fmt: skip
    on_now = np.array([True, True, True, False])
    over = stage.cap(r, on_now, np.array([False, False, False, True]), t)  # one BBR pin: room for 1
    assert over.over.tolist() == [False, True, True, False]  # no interval (2) and the lowest bound (1) leave
    assert math.isnan(over.evidence_low[2]) and over.evidence_low[1] == -0.2


def test_weakest_first_orders_by_bound_estimate_duty_prefix() -> None:
    nan = math.nan
    order = stage.weakest_first(
        np.array([0.1, nan, 0.1, 0.1]), np.array([0.3, 0.5, 0.2, 0.3]), np.array([0.5, 0.9, 0.9, 0.4]),
        np.array(["d", "c", "b", "a"], dtype=object),
    )  # fmt: skip
    assert order.tolist() == [1, 2, 3, 0]


def test_selections_worst_duty_first_within_the_room() -> None:
    r = rows([{"pop": "p", "prefix": pfx(i), "duty_cycle": d} for i, d in enumerate((0.7, 0.9, 0.8))])
    pending = np.array([True, True, True])
    select, capped = stage.selections(r, pending, np.zeros(3, dtype=bool), np.zeros(3, dtype=bool))
    assert select.tolist() == [False, True, False] and capped.tolist() == [True, False, True]
    full, _ = stage.selections(r, pending, np.array([True, True, False]), np.zeros(3, dtype=bool))
    assert not full.any()  # the cap of 2 is full


def test_start_trials_turns_selections_into_trials() -> None:
    r = rows([{"pop": "p", "prefix": pfx(1)}])
    chosen = np.array([True])
    t_on = stage.trials(r, np.array([False]), EvidenceSettings(), {})
    st = stage.start_trials(r, chosen, t_on)
    assert st.new_trial.tolist() == [True] and not st.select.any() and st.since.tolist() == [NOW]
    assert st.arm[0] in ("bbr", "cubic") and t_on.since.tolist() == [0]
    t_off = stage.trials(r, np.array([False]), None, {})
    off = stage.start_trials(r, chosen, t_off)
    assert off.select.tolist() == [True] and not off.new_trial.any()


def test_outcome_precedence() -> None:
    m = np.array
    o = stage.outcome(
        select=m([1, 0, 0, 0, 0, 0, 0], bool), in_trial=m([1, 1, 0, 0, 0, 0, 0], bool),
        holdout=m([0, 0, 1, 0, 0, 0, 0], bool), reverted=m([0, 1, 1, 1, 0, 0, 0], bool),
        keep=m([0, 0, 0, 1, 1, 0, 1], bool), pinned=m([0, 0, 0, 0, 0, 0, 1], bool),
    )  # fmt: skip
    assert o.decision.tolist() == ["select", "trial", "holdout", "revert", "keep", "skip", "pin"]
    assert o.skip.tolist() == [False] * 5 + [True, False]
    assert o.keep.tolist() == [False] * 4 + [True, False, True]  # a pin is kept as the decision 'pin' says


def test_effects_median_over_mature_holdouts() -> None:
    cfg = ScoringSettings(min_buckets=4, holdout_fraction=1.0, min_hold_seconds=HOUR)
    r = rows([{"pop": "p", "prefix": pfx(i), "low_delivery_rate": v} for i, v in enumerate((1e6, 3e6, 2e6))], [
        {"pop": "p", "prefix": pfx(i), "decision": "holdout", "holdout_since": NOW - 2 * HOUR,
         "baseline_low_rate": 1e6} for i in range(3)], cfg)  # fmt: skip
    c = stage.candidates(r, HOUR)
    s = stage.deny_and_pin(r, c.candidate, np.full(r.n, "", dtype=object), None)
    effect_, change = stage.effects(r, c, stage.holdouts(r, c, s))
    assert effect_.tolist() == [1.0, 3.0, 2.0] and change.tolist() == [2.0, 2.0, 2.0]
