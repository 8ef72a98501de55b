"""The operator's controls in decide() (controller/scoring/decide.py), pure: a lowered cap shrinks
the POP that round (weakest evidence first), pins hold whatever the rules say, the deny list
beats a BBR pin."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from controller.evidence.model import BBR, Effect
from controller.evidence.settings import EvidenceSettings
from controller.scoring.decide import OVER_CAP, decide, empty_state, summarize, weakest_first
from controller.scoring.pins import Pin
from controller.scoring.settings import ScoringSettings
from tests.controller.scoring.test_decide import HOUR, NOW, score, state

CFG = ScoringSettings(holdout_fraction=0.0, min_hold_seconds=0)
EV = EvidenceSettings()


def kept(prefix: str, low: float, estimate: float = math.nan) -> dict:
    """On BBR for good, kept by a trial whose effect interval's lower bound was `low`."""
    row = state(prefix, "keep", selected_since=NOW - 48 * HOUR)
    row.update(trial_since=NOW - 60 * HOUR, trial_effect=estimate, trial_low=low, trial_high=math.nan)
    return row


def pin(prefix: str, algorithm: str, pop: str = "p1") -> Pin:
    return Pin(pop, prefix, algorithm, "alice", "ticket 42", NOW * 1_000_000_000 - 3600 * 10**9)


def decided(scores: list[dict], previous: list[dict], cfg: ScoringSettings = CFG, **kw: object) -> pd.DataFrame:
    prev = pd.DataFrame(previous) if previous else empty_state()
    frame = pd.DataFrame(scores) if scores else pd.DataFrame({k: [] for k in score("x")})
    return decide(frame, prev, NOW, cfg, **kw).set_index("prefix")  # type: ignore[arg-type]


def test_weakest_first_orders_by_lower_bound_then_estimate_then_duty_then_prefix() -> None:
    low = np.array([0.10, math.nan, 0.02, 0.02, 0.02, 0.02])
    est = np.array([0.20, 0.50, 0.10, math.nan, 0.10, 0.10])
    duty = np.array([1.0, 1.0, 0.9, 1.0, 0.8, 0.8])
    prefixes = np.array(["a", "b", "c", "d", "f", "e"], dtype=object)
    assert prefixes[weakest_first(low, est, duty, prefixes)].tolist() == ["b", "d", "e", "f", "c", "a"]


def test_a_lowered_cap_reverts_the_weakest_evidence_in_that_round() -> None:
    lows = {"198.18.1.0/24": 0.30, "198.18.2.0/24": math.nan, "198.18.3.0/24": 0.01, "198.18.4.0/24": 0.12}
    previous = [kept(p, low) for p, low in lows.items()]
    scores = [score(p) for p in lows] + [score("198.18.9.0/24")]  # a candidate: no room for it
    out = decided(scores, previous, ScoringSettings(holdout_fraction=0.0, max_per_pop=2))
    assert out["decision"].to_dict() == {
        "198.18.1.0/24": "keep",
        "198.18.2.0/24": "revert",  # no interval: no evidence, leaves first
        "198.18.3.0/24": "revert",  # the lowest lower bound
        "198.18.4.0/24": "keep",
        "198.18.9.0/24": "skip",
    }
    reason = str(out.at["198.18.3.0/24", "reason"])
    assert reason.startswith(f"{OVER_CAP}: --max-bbr-per-pop 2 with 4 on BBR") and "+1%" in reason
    assert "no trial effect interval" in str(out.at["198.18.2.0/24", "reason"])
    assert str(out.at["198.18.9.0/24", "reason"]).startswith("capped")
    assert (out.loc[out["decision"] == "revert", "cooldown_until"] == 0).all()  # not the prefix's fault
    assert (out.loc[out["decision"] == "revert", "algorithm"] == "cubic").all()
    (summary,) = summarize(out.reset_index())
    assert (summary.selected, summary.reverted, summary.over_cap) == (2, 2, 2)


def test_the_cap_also_ends_running_trials_weakest_first() -> None:
    since = NOW - 2 * 300
    previous = [
        {**state("198.18.1.0/24", "trial", selected_since=since), "trial_since": since},
        {**state("198.18.2.0/24", "trial", selected_since=since), "trial_since": since},
    ]
    effects = {
        ("p1", "198.18.1.0/24"): Effect(0.2, -0.05, 0.4, 0.9, 0.18, 0.05, 2, 1, 30),
        ("p1", "198.18.2.0/24"): Effect(0.1, -0.1, 0.3, 0.9, 0.09, 0.05, 2, 1, 30),
    }
    cfg = ScoringSettings(holdout_fraction=0.0, max_per_pop=1)
    scores = [score(r["prefix"]) for r in previous]
    out = decided(scores, previous, cfg, evidence=EV, trial_effects=effects)
    assert out.at["198.18.2.0/24", "decision"] == "revert"  # the lower bound -10% < -5%
    assert str(out.at["198.18.2.0/24", "reason"]).startswith(f"{OVER_CAP}: --max-bbr-per-pop 1 with 2 on BBR")
    assert "trial effect lower bound -10%" in str(out.at["198.18.2.0/24", "reason"])
    assert out.at["198.18.2.0/24", "cooldown_until"] == 0
    assert out.at["198.18.1.0/24", "decision"] == "trial"


def test_within_the_cap_nothing_leaves() -> None:
    previous = [kept("198.18.1.0/24", 0.1), kept("198.18.2.0/24", 0.2)]
    out = decided([score("198.18.1.0/24"), score("198.18.2.0/24")], previous, ScoringSettings(max_per_pop=2))
    assert set(out["decision"]) == {"keep"}


def test_pins_hold_whatever_the_rules_say() -> None:
    since = NOW - 2 * 300
    previous = [
        kept("198.18.1.0/24", 0.2),  # on BBR: pinned cubic -> leaves the config
        {**state("198.18.2.0/24", "trial", selected_since=since), "trial_since": since},  # in a trial
        kept("198.18.3.0/24", 0.3),  # on BBR, not pinned: over the cap of 1 (the BBR pins count)
    ]
    scores = [score("198.18.1.0/24"), score("198.18.2.0/24"), score("198.18.3.0/24")]
    scores.append(score("198.18.4.0/24", duty=0.0))  # never a candidate: pinned bbr
    pins = {
        ("p1", "198.18.1.0/24"): pin("198.18.1.0/24", "cubic"),
        ("p1", "198.18.2.0/24"): pin("198.18.2.0/24", "bbr"),
        ("p1", "198.18.4.0/24"): pin("198.18.4.0/24", "bbr"),
        ("p1", "198.18.5.0/24"): pin("198.18.5.0/24", "bbr"),  # no data, no state: still pinned
    }
    cfg = ScoringSettings(holdout_fraction=0.0, max_per_pop=1)
    out = decided(scores, previous, cfg, evidence=EV, trial_effects={}, pins=pins)
    assert out["decision"].to_dict() == {
        "198.18.1.0/24": "pin",
        "198.18.2.0/24": "pin",
        "198.18.3.0/24": "revert",
        "198.18.4.0/24": "pin",
        "198.18.5.0/24": "pin",
    }
    assert out["algorithm"].to_dict() == {
        "198.18.1.0/24": "cubic",
        "198.18.2.0/24": BBR,
        "198.18.3.0/24": "cubic",
        "198.18.4.0/24": BBR,
        "198.18.5.0/24": BBR,
    }
    capped, pinned_reason = (str(out.at[p, "reason"]) for p in ("198.18.3.0/24", "198.18.2.0/24"))
    assert capped.startswith(f"{OVER_CAP}: --max-bbr-per-pop 1 with 4 on BBR, 3 of them")
    assert pinned_reason.startswith("pinned to bbr by alice at 2024-03-01 11:00 UTC: ticket 42")
    pinned = out[out["decision"] == "pin"]
    assert (pinned["trial_since"] == 0).all() and (pinned["selected_since"] == 0).all()  # the trial ended
    assert pinned["baseline_low_rate"].isna().all()
    (summary,) = summarize(out.reset_index())
    assert (summary.pinned, summary.selected, summary.trials) == (4, 3, 0)


def test_a_pinned_prefix_stays_pinned_round_after_round() -> None:
    pins = {("p1", "198.18.1.0/24"): pin("198.18.1.0/24", "cubic")}
    previous: list[dict] = []
    for k in range(3):  # a steadily bad candidate: every round would select it
        out = decide(
            pd.DataFrame([score("198.18.1.0/24")]),
            pd.DataFrame(previous) if previous else empty_state(),
            NOW + k * 300,
            CFG,
            pins=pins,
        )
        assert out[["decision", "algorithm"]].values.tolist() == [["pin", "cubic"]]
        previous = out[[c for c in empty_state().columns]].to_dict("records")
    unpinned = decide(pd.DataFrame([score("198.18.1.0/24")]), pd.DataFrame(previous), NOW + 900, CFG)
    assert unpinned["decision"].tolist() == ["select"]  # unpinned: the rounds decide it again


def test_the_deny_list_beats_a_bbr_pin_not_a_cubic_one() -> None:
    pins = {
        ("p1", "198.18.7.0/24"): pin("198.18.7.0/24", "bbr"),
        ("p1", "198.18.8.0/24"): pin("198.18.8.0/24", "cubic"),
    }

    def refuse(prefix: str) -> str | None:
        return f"{prefix} overlaps denied range 198.18.0.0/16"

    out = decided([score("198.18.7.0/24"), score("198.18.8.0/24")], [], pins=pins, refuse=refuse)
    assert out.at["198.18.7.0/24", "decision"] == "skip"
    assert out.at["198.18.7.0/24", "algorithm"] == "cubic"
    assert str(out.at["198.18.7.0/24", "reason"]).startswith("denied: 198.18.7.0/24 overlaps")
    assert str(out.at["198.18.7.0/24", "reason"]).endswith("pinned to bbr, not applied: the deny list wins")
    assert (out.at["198.18.8.0/24", "decision"], out.at["198.18.8.0/24", "algorithm"]) == ("pin", "cubic")


def test_a_denied_prefix_on_bbr_is_reverted_with_its_reason() -> None:
    def refuse(prefix: str) -> str | None:
        return f"{prefix} overlaps denied range 198.18.1.0/24" if prefix == "198.18.1.0/24" else None

    out = decided([score("198.18.1.0/24")], [kept("198.18.1.0/24", 0.2)], refuse=refuse)
    assert out.at["198.18.1.0/24", "decision"] == "revert"
    assert str(out.at["198.18.1.0/24", "reason"]) == "denied: 198.18.1.0/24 overlaps denied range 198.18.1.0/24"
    assert out.at["198.18.1.0/24", "cooldown_until"] == 0
