"""Decision logic (controller/scoring/decide.py): exact decisions on hand-made scores."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from controller.scoring.decide import decide, empty_state, holdout_hash, summarize
from controller.scoring.settings import ScoringSettings


def cell(df: pd.DataFrame, prefix: str, column: str) -> Any:
    return df.at[prefix, column]


def row_of(df: pd.DataFrame, prefix: str) -> dict[str, Any]:
    return {str(k): v for k, v in df.loc[prefix].to_dict().items()}


NOW = 1_709_294_430  # 2024-03-01 12:00:30 UTC
HOUR = 3600
CFG = ScoringSettings(holdout_fraction=0.0)


def score(
    prefix: str,
    duty: float = 1.0,
    flap: float = 0.0,
    counted: int = 36,
    rtt: float = 40.0,
    low: float = 1e6,
    qualifying: int = 288,
    pop: str = "p1",
) -> dict:
    return {
        "pop": pop,
        "prefix": prefix,
        "family": 4,
        "samples": 300,
        "qualifying": qualifying,
        "counted_buckets": counted,
        "bad_buckets": round(duty * counted),
        "transitions": 0,
        "duty_cycle": duty,
        "flap_ratio": flap,
        "median_delivery_rate": 2e6,
        "low_delivery_rate": low,
        "median_min_rtt_ms": rtt,
        "low_rtt_buckets": counted if rtt < 10 else 0,
    }


def state(
    prefix: str,
    decision: str,
    selected_since: int = 0,
    baseline: float = math.nan,
    holdout_since: int = 0,
    cooldown_until: int = 0,
    last_seen: int = NOW - 300,
    pop: str = "p1",
) -> dict:
    return {
        "pop": pop,
        "prefix": prefix,
        "decision": decision,
        "selected_since": selected_since,
        "holdout_since": holdout_since,
        "cooldown_until": cooldown_until,
        "last_seen": last_seen,
        "baseline_low_rate": baseline,
        "trial_since": 0,
        "trial_effect": math.nan,
        "trial_low": math.nan,
        "trial_high": math.nan,
    }


def run(
    scores: list[dict], previous: list[dict] | None = None, cfg: ScoringSettings = CFG, now: int = NOW
) -> pd.DataFrame:
    prev = pd.DataFrame(previous) if previous else empty_state()
    return decide(pd.DataFrame(scores), prev, now, cfg).set_index("prefix")


def test_first_round_rules() -> None:
    out = run(
        [
            score("192.0.2.0/24"),  # steadily bad -> select
            score("198.51.100.0/24", duty=0.5, flap=0.9),  # flapping -> skip
            score("198.51.101.0/24", duty=0.9, flap=0.4),  # bad but flapping too much
            score("203.0.113.0/24", rtt=3.0),  # low RTT
            score("203.0.114.0/24", counted=5),  # too few counted buckets
            score("203.0.115.0/24", counted=0, duty=0.0, qualifying=0),  # small flows only
            score("203.0.116.0/24", duty=0.1),  # fine
        ]
    )
    assert out["decision"].to_dict() == {
        "192.0.2.0/24": "select",
        "198.51.100.0/24": "skip",
        "198.51.101.0/24": "skip",
        "203.0.113.0/24": "skip",
        "203.0.114.0/24": "skip",
        "203.0.115.0/24": "skip",
        "203.0.116.0/24": "skip",
    }
    assert cell(out, "192.0.2.0/24", "algorithm") == "bbr"
    assert cell(out, "192.0.2.0/24", "selected_since") == NOW
    assert cell(out, "192.0.2.0/24", "baseline_low_rate") == 1e6
    assert cell(out, "203.0.113.0/24", "reason").startswith("low RTT")
    assert cell(out, "203.0.114.0/24", "reason").startswith("too few samples")
    assert cell(out, "203.0.115.0/24", "reason").startswith("no qualifying flows")
    assert cell(out, "198.51.101.0/24", "reason").startswith("not a candidate")


def test_without_trials_a_point_ratio_never_reverts() -> None:
    """The mixed-window case: selected while 12 of its 36 buckets were good, its window-average
    "low rate" read 0.11 of the baseline three rounds later although its rate in bad buckets
    never changed.  A point ratio is no evidence: without a trial the prefix stays on BBR."""
    since = NOW - 25 * HOUR
    out = run(
        [score("192.0.2.0/24", duty=1.0, low=0.11e6)],
        [state("192.0.2.0/24", "keep", selected_since=since, baseline=1e6)],
    )
    row = row_of(out, "192.0.2.0/24")
    assert row["decision"] == "keep"
    assert row["reason"].startswith("on BBR for 25.0 h")
    # a revert for a reason that needs no effect still happens: denied, or gone for the expiry
    gone = run([], [state("192.0.2.0/24", "keep", selected_since=since, baseline=1e6, last_seen=NOW - 8 * 86400)])
    assert cell(gone, "192.0.2.0/24", "decision") == "revert"


def test_holdout_is_stable_hash_fraction() -> None:
    cfg = ScoringSettings(holdout_fraction=0.5)
    prefixes = [f"10.0.{i}.0/24" for i in range(40)]
    out = run([score(p) for p in prefixes], cfg=cfg)
    expected = {p: "holdout" if holdout_hash("p1", p, cfg.holdout_salt) < 0.5 else "select" for p in prefixes}
    assert out["decision"].to_dict() == expected
    assert 5 < list(expected.values()).count("holdout") < 35
    held = out[out["decision"] == "holdout"]
    assert (held["holdout"] == 1).all()
    assert (held["holdout_since"] == NOW).all()
    assert (held["algorithm"] == "cubic").all()
    # the same answer in another process / round: a pure function of (salt, pop, prefix)
    first = holdout_hash("p1", prefixes[0], cfg.holdout_salt)
    assert first == holdout_hash("p1", prefixes[0], cfg.holdout_salt)
    assert first != holdout_hash("p2", prefixes[0], cfg.holdout_salt)


def test_caps_take_the_worst_duty_first() -> None:
    cfg = ScoringSettings(holdout_fraction=0.0, max_new_per_round=2, max_per_pop=3)
    out = run(
        [
            score("10.0.1.0/24", duty=0.7),
            score("10.0.2.0/24", duty=0.95),
            score("10.0.3.0/24", duty=0.8),
            score("10.0.4.0/24", duty=0.9),
            score("10.0.9.0/24", duty=0.0),
        ],
        [state("10.0.9.0/24", "keep", selected_since=NOW - HOUR, baseline=1e6)],
        cfg=cfg,
    )
    # one slot is taken by the kept prefix: room 2 -> the two worst duty cycles
    assert out["decision"].to_dict() == {
        "10.0.1.0/24": "skip",
        "10.0.2.0/24": "select",
        "10.0.3.0/24": "skip",
        "10.0.4.0/24": "select",
        "10.0.9.0/24": "keep",
    }
    assert cell(out, "10.0.1.0/24", "reason").startswith("capped")
    cfg_full = ScoringSettings(holdout_fraction=0.0, max_per_pop=1)
    kept = [state("10.0.9.0/24", "keep", selected_since=NOW - HOUR)]
    full = run([score("10.0.2.0/24")], kept, cfg=cfg_full)
    assert cell(full, "10.0.2.0/24", "decision") == "skip"


def test_unscored_state_is_carried_and_expires() -> None:
    out = run([], [state("192.0.2.0/24", "keep", selected_since=NOW - 30 * HOUR, baseline=1e6, last_seen=NOW - HOUR)])
    row = row_of(out, "192.0.2.0/24")
    assert row["decision"] == "keep"
    assert not row["scored"]
    assert row["last_seen"] == NOW - HOUR
    gone = run(
        [],
        [
            state(
                "192.0.2.0/24", "keep", selected_since=NOW - 30 * 24 * HOUR, baseline=1e6, last_seen=NOW - 8 * 24 * HOUR
            )
        ],
    )
    assert cell(gone, "192.0.2.0/24", "decision") == "revert"
    assert cell(gone, "192.0.2.0/24", "reason").startswith("no traffic")
    # a plain skipped prefix without data and without state is not written again
    assert run([], [state("10.0.0.0/24", "skip")]).empty


def test_summary_counts() -> None:
    out = run(
        [score("192.0.2.0/24"), score("198.51.100.0/24", duty=0.1)],
        [state("203.0.113.0/24", "keep", selected_since=NOW - HOUR)],
    )
    (s,) = summarize(out.reset_index())
    assert (s.pop, s.scored, s.selected, s.new, s.kept, s.reverted, s.holdout, s.skipped) == ("p1", 2, 2, 1, 1, 0, 0, 1)
