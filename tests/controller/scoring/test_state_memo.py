"""StateMemo (controller/scoring/state.py): the state a round wrote, kept in the process, is the
state the store returns for the next round, row for row and bit for bit, through selections,
trials that start, keep and revert, and a kill switch; and it is used only when the store names
its rounds as the ones in force (chDB and ClickHouse 18.16)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from controller.scoring.round import run_round
from controller.scoring.state import StateMemo, latest_rounds, load_previous
from controller.store import Store
from controller.store.outcomes import KILLED, PublishOutcome, write_outcomes
from tests.support.trial_timeline import CFG, EV, HELPED, HURT, T0, B, insert_bucket, trial_bucket


def _at(k: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(T0 + k * B, dt.UTC)


def _same(memo_state: pd.DataFrame, stored: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(memo_state.reset_index(drop=True), stored.reset_index(drop=True), check_exact=True)


def test_the_kept_state_is_the_stored_state_through_trials(store: Store) -> None:
    rng = np.random.default_rng(7)
    memo = StateMemo()
    algo: dict[str, str] = {}
    used = 0
    decisions_seen: set[str] = set()
    for k in range(20):
        insert_bucket(store, trial_bucket(rng, k, algo))
        now = _at(k + 1)
        stored = load_previous(store, "", now)
        used += memo.holds(latest_rounds(store, "", now))  # the store names the memo's round
        kept = load_previous(store, "", now, memo=memo)
        _same(kept, stored)
        res = run_round(store, CFG, now, evidence=EV, memo=memo)
        assert memo.rounds == {"p1": res.round_id}
        rows = res.decisions.set_index("prefix")
        algo = {p: str(rows.at[p, "algorithm"]) for p in rows.index}
        decisions_seen |= {str(rows.at[p, "decision"]) for p in (HELPED, HURT) if p in rows.index}
    assert used >= 18  # every round after the first had the memo
    assert {"trial", "keep", "revert"} <= decisions_seen  # the timeline went through trials both ways
    # a kill switch on the last round: the kept state goes through the same change as the stored one
    (desired,) = res.states
    write_outcomes(store, [(desired, PublishOutcome("p1", KILLED))])
    assert memo.holds(latest_rounds(store, "", _at(21)))
    _same(load_previous(store, "", _at(21), memo=memo), load_previous(store, "", _at(21)))
    assert memo.columns is None  # handed over: the round that used it keeps its own once written


def test_the_memo_is_not_used_for_rounds_it_does_not_hold(store: Store) -> None:
    rng = np.random.default_rng(3)
    memo = StateMemo()
    for k in range(6):
        insert_bucket(store, trial_bucket(rng, k, {}))
    first = run_round(store, CFG, _at(6), memo=memo)
    assert memo.rounds == {"p1": first.round_id}
    # another controller's round (no memo) is the latest now: the memo does not name it
    other = run_round(store, CFG, _at(7))
    latest = {"p1": (other.round_id, "recorded", None)}
    assert not memo.holds(latest)
    poisoned = memo.columns
    assert poisoned is not None
    # were it used, the state would say so
    poisoned["decision"] = np.full(len(poisoned["decision"]), "poisoned", dtype=object)
    state = load_previous(store, "", _at(8), memo=memo)
    assert "poisoned" not in set(state["decision"])
    # a round at an earlier time than the memo's: the store's rounds up to it
    memo.remember(other.decisions, other.round_id)
    assert set(load_previous(store, "", _at(6), memo=memo)["decision"]) == set(first.decisions["decision"])
    # the memo holds copies: a caller changing the round's decisions does not change it
    other.decisions["decision"] = "changed"
    assert memo.columns is not None and "changed" not in set(memo.columns["decision"])
    # a dry run neither takes nor changes what the memo holds
    run_round(store, CFG, _at(9), dry_run=True, memo=memo)
    assert memo.rounds == {"p1": other.round_id}
