"""Trials through real rounds (controller/scoring/round.py on chDB and ClickHouse 18.16): the
samples a round reads are attributed by the socket's own congestion control; a prefix BBR helps
is kept, one whose rate BBR halves is reverted; and the effect the deciding round stored is the
effect the effect model computes again from the same store (`Evidence`), to the last digit."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np

from controller.evidence.load import Evidence, SampleRule, stored_trials
from controller.scoring.round import run_round
from controller.store import Store
from tests.support.trial_timeline import CFG, EV, HELPED, HURT, T0, B, insert_bucket, trial_bucket


def test_trials_keep_the_helped_revert_the_hurt_and_store_the_models_effect(store: Store) -> None:
    rng = np.random.default_rng(7)
    algo: dict[str, str] = {}
    decided: dict[str, tuple[str, float, float, float]] = {}
    for k in range(20):
        insert_bucket(store, trial_bucket(rng, k, algo))
        now = dt.datetime.fromtimestamp(T0 + (k + 1) * B, dt.UTC)
        res = run_round(store, CFG, now, evidence=EV)
        rows = res.decisions.set_index("prefix")
        algo = {p: str(rows.at[p, "algorithm"]) for p in rows.index}
        for p in (HELPED, HURT):
            if p in rows.index and p not in decided and rows.at[p, "decision"] in ("keep", "revert"):
                r = {str(k): v for k, v in rows.loc[p].to_dict().items()}
                decided[p] = (
                    str(r["decision"]),
                    float(r["trial_effect"]),
                    float(r["trial_low"]),
                    float(r["trial_high"]),
                )
        if len(decided) == 2:
            break
    assert decided[HELPED][0] == "keep"
    assert decided[HURT][0] == "revert"
    assert decided[HELPED][2] > 0 and decided[HURT][3] < 0

    end = dt.datetime.fromtimestamp(T0 + 30 * B, dt.UTC)
    trials = {t.prefix: t for t in stored_trials(store, end)}
    assert trials[HELPED].outcome == "keep" and trials[HURT].outcome == "revert"
    ev = Evidence.for_window(store, EV, SampleRule.of(CFG, B), list(trials.values()), T0 + 30 * B, with_goodput=False)
    for prefix, (_, estimate, low, high) in decided.items():
        e = ev.effect(trials[prefix])
        assert (e.estimate, e.low, e.high) == (estimate, low, high)  # the same numbers, exactly
        assert math.isfinite(e.mde) and e.samples > 0
    # the app-limited samples were read and left out: one in seven of the bad prefixes' samples
    assert 0.10 < ev.app_limited_share() < 0.18
