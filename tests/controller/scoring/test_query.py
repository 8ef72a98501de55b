"""The scoring SQL on ClickHouse 18.16 and chDB: known timelines, the pandas reference, rounds."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from controller.scoring.query import prefix_timeline, refresh, score_prefixes, window_for
from controller.scoring.round import run_round
from controller.scoring.settings import ScoringSettings
from controller.scoring.state import load_previous
from controller.store import Store
from tests.support import scoring_synth as synth
from tests.support.scoring_reference import reference_scores, reference_timeline


def cell(df: pd.DataFrame, prefix: str, column: str) -> Any:
    return df.at[prefix, column]


def row_of(df: pd.DataFrame, prefix: str) -> dict[str, Any]:
    return {str(k): v for k, v in df.loc[prefix].to_dict().items()}


NOW = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
CFG = ScoringSettings(holdout_fraction=0.0)

SPECIAL = {
    "203.0.113.0/24": synth.STEADY_BAD,
    "2001:db8:0:100::/56": synth.STEADY_BAD,
    "203.0.114.0/24": synth.FLAPPING,
    "203.0.115.0/24": synth.LOW_RTT,
    "203.0.116.0/24": synth.TOO_FEW,
    "203.0.117.0/24": synth.SMALL_FLOWS,
}


def population(extra: dict[str, synth.Pattern]) -> dict[str, synth.Pattern]:
    patterns = {f"198.51.{i}.0/24": synth.NORMAL for i in range(20)}
    patterns.update(extra)
    return patterns


def assert_same_scores(sql: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert len(sql) > 0
    pd.testing.assert_frame_equal(sql, ref, check_exact=False, rtol=1e-9)


def test_known_timelines(store: Store) -> None:
    window = window_for(NOW, CFG)
    samples = synth.samples_frame("pop1", population(SPECIAL), int(window.start.timestamp()), 36)
    synth.insert_samples(store, samples)
    result = run_round(store, CFG, NOW, pop="pop1")
    d = result.decisions.set_index("prefix")
    assert cell(d, "203.0.113.0/24", "decision") == "select"
    assert cell(d, "2001:db8:0:100::/56", "decision") == "select"
    assert cell(d, "203.0.113.0/24", "duty_cycle") == 1.0
    assert cell(d, "203.0.113.0/24", "flap_ratio") == 0.0
    assert cell(d, "203.0.114.0/24", "decision") == "skip"
    assert cell(d, "203.0.114.0/24", "flap_ratio") > 0.5
    assert cell(d, "203.0.115.0/24", "reason").startswith("low RTT")
    assert cell(d, "203.0.115.0/24", "median_min_rtt_ms") < 10
    assert cell(d, "203.0.116.0/24", "counted_buckets") == 0
    assert cell(d, "203.0.116.0/24", "reason").startswith("too few samples")
    assert cell(d, "203.0.117.0/24", "qualifying") == 0
    assert cell(d, "203.0.117.0/24", "reason").startswith("no qualifying flows")
    normal = d[d.index.str.startswith("198.51.")]
    assert (normal["decision"] == "skip").all()
    assert (normal["counted_buckets"] == 36).all()
    assert [s.pop for s in result.states] == ["pop1"]
    assert sorted(e.prefix for e in result.states[0].entries) == ["2001:db8:0:100::/56", "203.0.113.0/24"]
    # the same scores as the pandas reference
    keys = refresh(store, CFG, window, "pop1", 1)
    sql_scores = score_prefixes(store, CFG, window, "pop1", keys)
    assert_same_scores(sql_scores, reference_scores(samples, CFG, window))
    # every scored prefix was written, with the decision
    rows = store.query_rows("SELECT prefix, decision FROM selections WHERE round_id = %(r)s", {"r": result.round_id})
    assert dict((str(p), str(dec)) for p, dec in rows) == d["decision"].to_dict()
    # explain's timeline of the bad prefix: bad in every bucket, the threshold above its statistic
    tl = prefix_timeline(store, CFG, window, "pop1", "203.0.113.0/24", keys)
    assert len(tl) == 36
    assert tl["bad"].astype(bool).all()
    assert (tl["stat"] < tl["threshold"]).all()


def test_random_data_matches_reference(store: Store) -> None:
    rng = np.random.default_rng(7)
    window = window_for(NOW, CFG)
    start = int(window.start.timestamp())
    n = 6000
    samples = pd.DataFrame(
        {
            "time": start - 600 + rng.integers(0, 36 * 300 + 1200, n),  # also outside the window
            "pop": rng.choice(["popA", "popB"], n),
            "prefix": [f"192.0.2.{i}/32" for i in rng.integers(0, 40, n)],
            "family": 4,
            "bytes_acked": rng.choice([50_000, 102_400, 102_401, 5_000_000], n),
            "delivery_rate": rng.integers(1, 50_000_000, n).astype("uint64"),
            "min_rtt": rng.integers(1_000, 200_000, n).astype("uint32"),
        }
    )
    synth.insert_samples(store, samples)
    cfg = replace(CFG, min_samples=2, min_buckets=3)
    keys = refresh(store, cfg, window, "", 1)
    assert_same_scores(score_prefixes(store, cfg, window, "", keys), reference_scores(samples, cfg, window))
    # the raw-table path (a non-default qualifying threshold) on the same data
    raw_cfg = replace(cfg, min_bytes=1_000_000)
    keys = refresh(store, raw_cfg, window, "", 2)
    assert_same_scores(score_prefixes(store, raw_cfg, window, "", keys), reference_scores(samples, raw_cfg, window))


def test_late_data_recomputes_the_bucket(store: Store) -> None:
    window = window_for(NOW, CFG)
    start = int(window.start.timestamp())
    samples = synth.samples_frame("pop1", population({"203.0.113.0/24": synth.STEADY_BAD}), start, 36)
    synth.insert_samples(store, samples)
    cfg = replace(CFG, min_samples=9)  # 8 samples per bucket: nothing counts yet
    keys = refresh(store, cfg, window, "pop1", 1)
    before = score_prefixes(store, cfg, window, "pop1", keys).set_index("prefix")
    assert cell(before, "203.0.113.0/24", "counted_buckets") == 0
    late = synth.samples_frame("pop1", {"203.0.113.0/24": synth.STEADY_BAD}, start + 35 * 300, 1, seed=9)
    synth.insert_samples(store, late)
    keys = refresh(store, cfg, window, "pop1", 2)
    assert sorted({k.version for k in keys}) == [1, 2]  # only the changed bucket was recomputed
    after = score_prefixes(store, cfg, window, "pop1", keys)
    assert after.set_index("prefix").loc["203.0.113.0/24", "counted_buckets"] == 1
    assert_same_scores(after, reference_scores(pd.concat([samples, late]), cfg, window))


def test_without_trials_no_point_ratio_reverts(store: Store) -> None:
    """Without trials (run_round without evidence) a prefix on BBR stays whatever its window's
    low rate did: reverts by effect come from trials (tests/controller/evidence/test_rounds.py)."""
    cfg = replace(CFG, min_hold_seconds=3600)
    window = window_for(NOW, cfg)
    start = int(window.start.timestamp())
    first = population({"203.0.113.0/24": synth.STEADY_BAD, "203.0.118.0/24": synth.STEADY_BAD})
    synth.insert_samples(store, synth.samples_frame("pop1", first, start, 36))
    r1 = run_round(store, cfg, NOW, pop="pop1")
    chosen = r1.decisions.set_index("prefix")["decision"]
    assert chosen["203.0.113.0/24"] == "select" and chosen["203.0.118.0/24"] == "select"
    # three hours on BBR: one prefix improves (still below the others), the other gets worse
    second = population(
        {
            "203.0.113.0/24": replace(synth.STEADY_BAD, rate_scale=3.0),
            "203.0.118.0/24": replace(synth.STEADY_BAD, rate_scale=0.5),
        }
    )
    synth.insert_samples(store, synth.samples_frame("pop1", second, start + 36 * 300, 36, seed=2))
    later = NOW + dt.timedelta(hours=3)
    r2 = run_round(store, cfg, later, pop="pop1")
    d = r2.decisions.set_index("prefix")
    assert cell(d, "203.0.113.0/24", "decision") == "keep"
    assert cell(d, "203.0.113.0/24", "effect") > 2.0  # descriptive only
    assert cell(d, "203.0.118.0/24", "decision") == "keep"
    assert cell(d, "203.0.118.0/24", "effect") < 0.7
    assert [e.prefix for e in r2.states[0].entries] == ["203.0.113.0/24", "203.0.118.0/24"]
    state = load_previous(store, "pop1", later).set_index("prefix")
    assert cell(state, "203.0.118.0/24", "cooldown_until") == 0
    assert cell(state, "203.0.113.0/24", "selected_since") == int(NOW.timestamp())


def test_accelerated_clock_reads_raw(store: Store) -> None:
    cfg = replace(CFG, bucket_seconds=20, lookback_seconds=720)
    assert not cfg.uses_rollup
    window = window_for(NOW, cfg)
    samples = synth.samples_frame(
        "lab",
        population({"203.0.113.0/24": synth.STEADY_BAD}),
        int(window.start.timestamp()),
        36,
        bucket_seconds=20,
    )
    synth.insert_samples(store, samples)
    result = run_round(store, cfg, NOW, pop="lab", dry_run=True)
    d = result.decisions.set_index("prefix")
    assert cell(d, "203.0.113.0/24", "decision") == "select"
    assert cell(d, "203.0.113.0/24", "counted_buckets") == 36
    assert store.query_rows("SELECT count() FROM selections")[0][0] == 0  # dry run writes nothing
    keys = refresh(store, cfg, window, "lab", 5)
    sql_scores = score_prefixes(store, cfg, window, "lab", keys)
    assert_same_scores(sql_scores, reference_scores(samples, cfg, window))
    tl = reference_timeline(samples, cfg, window)
    assert tl["bucket"].nunique() == 36
