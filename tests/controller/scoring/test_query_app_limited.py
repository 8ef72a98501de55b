"""App-limited samples in the scoring (migration 009), on ClickHouse 18.16 and chDB.

A sample flagged app-limited (tcpinfo.app_limited, tcp_info's delivery_rate_app_limited) measured
how fast the server had data to send: by default the scoring does not count it as qualifying
(neither in `qualifying` nor in a bucket's statistics); include_app_limited counts it.  Checked
on the rollup path (tcpinfo_5m_nal / tcpinfo_5m) and the raw path, against the pandas reference
(an app-limited sample left out = a sample that does not qualify), with separate cache keys; and
migration 009 on a store that already holds telemetry, run twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pandas as pd
import pytest

from controller.scoring.explain import explain
from controller.scoring.query import prefix_timeline, refresh, score_prefixes, window_for
from controller.scoring.round import run_round
from controller.scoring.settings import ScoringSettings
from controller.store import Store, open_store
from controller.store.migrate import apply_migrations
from controller.store.sql import migrations, render_markers, split_statements
from tests.support import scoring_synth as synth
from tests.support.scoring_reference import reference_scores

NOW = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
CFG = ScoringSettings(holdout_fraction=0.0)
RAW_CFG = replace(CFG, bucket_seconds=60, lookback_seconds=36 * 60)  # not 5 minutes: raw tcpinfo
BUCKETS = 36

#: good path, but a server often idle: its app-limited samples look poor
IDLE_SERVER = "203.0.113.0/24"
#: nothing but app-limited samples
ONLY_IDLE = "203.0.114.0/24"
#: a poor path, with a few app-limited samples too
POOR = "203.0.115.0/24"
SPECIAL = {
    IDLE_SERVER: synth.Pattern(bad=(False,), app_limited=12),
    ONLY_IDLE: synth.Pattern(bad=(False,), qualifying=0, app_limited=8),
    POOR: synth.Pattern(bad=(True,), app_limited=3),
}


def population() -> dict[str, synth.Pattern]:
    patterns = {f"198.51.{i}.0/24": synth.NORMAL for i in range(20)}
    patterns.update(SPECIAL)
    return patterns


def load(store: Store, cfg: ScoringSettings, pop: str = "pop1", seed: int = 1) -> pd.DataFrame:
    window = window_for(NOW, cfg)
    samples = synth.samples_frame(pop, population(), int(window.start.timestamp()), BUCKETS, cfg.bucket_seconds, seed)
    synth.insert_samples(store, samples)
    return samples


def scores_of(store: Store, cfg: ScoringSettings, version: int, pop: str = "pop1") -> pd.DataFrame:
    window = window_for(NOW, cfg)
    keys = refresh(store, cfg, window, pop, version)
    return score_prefixes(store, cfg, window, pop, keys)


def row_of(df: pd.DataFrame, prefix: str) -> dict[str, Any]:
    rows = df[df["prefix"] == prefix]
    assert len(rows) == 1, rows
    return {str(k): v for k, v in rows.iloc[0].to_dict().items()}


def assert_same_scores(sql: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert len(sql) > 0
    pd.testing.assert_frame_equal(sql, ref, check_exact=False, rtol=1e-9)


def test_source_names_the_mode() -> None:
    assert CFG.source == "rollup:nal" and replace(CFG, include_app_limited=True).source == "rollup"
    assert RAW_CFG.source == "raw:60:102400:nal"
    assert replace(RAW_CFG, include_app_limited=True).source == "raw:60:102400"
    assert ScoringSettings.from_sources({"include_app_limited": True}).include_app_limited


@pytest.mark.parametrize("cfg", [CFG, RAW_CFG], ids=["rollup", "raw"])
def test_app_limited_samples_count_only_with_the_setting(store: Store, cfg: ScoringSettings) -> None:
    samples = load(store, cfg)
    window = window_for(NOW, cfg)
    included = replace(cfg, include_app_limited=True)

    default = scores_of(store, cfg, 1)
    assert_same_scores(default, reference_scores(synth.app_limited_left_out(samples), cfg, window))
    idle = row_of(default, IDLE_SERVER)
    assert idle["samples"] == 20 * BUCKETS and idle["qualifying"] == 8 * BUCKETS
    assert idle["counted_buckets"] == BUCKETS and idle["duty_cycle"] < cfg.min_duty  # an ordinary prefix
    only = row_of(default, ONLY_IDLE)
    assert only["samples"] == 8 * BUCKETS and only["qualifying"] == 0 and only["counted_buckets"] == 0
    assert row_of(default, POOR)["duty_cycle"] == 1.0

    every = scores_of(store, included, 2)
    assert_same_scores(every, reference_scores(samples, included, window))
    idle = row_of(every, IDLE_SERVER)
    assert idle["qualifying"] == 20 * BUCKETS and idle["duty_cycle"] == 1.0  # the idle samples drag it down
    assert row_of(every, ONLY_IDLE)["counted_buckets"] == BUCKETS

    # each mode keeps its own cache: back to the default, its buckets are current and unchanged
    again = scores_of(store, cfg, 3)
    pd.testing.assert_frame_equal(again, default)
    sources = store.query_rows("SELECT DISTINCT source, version FROM scoring_versions ORDER BY version")
    assert [(str(s), int(v)) for s, v in sources] == [(cfg.source, 1), (included.source, 2)]

    # the decisions: the idle server's prefix is selected only when its idle samples count
    chosen = run_round(store, cfg, NOW, pop="pop1", dry_run=True).decisions.set_index("prefix")["decision"]
    assert (chosen[IDLE_SERVER], chosen[ONLY_IDLE]) == ("skip", "skip") and chosen[POOR] != "skip"
    chosen = run_round(store, included, NOW, pop="pop1", dry_run=True).decisions.set_index("prefix")["decision"]
    assert chosen[IDLE_SERVER] != "skip" and chosen[ONLY_IDLE] != "skip" and chosen[POOR] != "skip"


@pytest.mark.parametrize("cfg", [CFG, RAW_CFG], ids=["rollup", "raw"])
def test_explain_shows_the_share_left_out(store: Store, cfg: ScoringSettings) -> None:
    load(store, cfg)
    window = window_for(NOW, cfg)
    keys = refresh(store, cfg, window, "pop1", 1)
    timeline = prefix_timeline(store, cfg, window, "pop1", IDLE_SERVER, keys)
    assert len(timeline) == BUCKETS
    assert (timeline["qualifying"] == 8).all() and (timeline["app_limited"] == 12).all()
    at = NOW + dt.timedelta(seconds=cfg.bucket_seconds)  # one bucket later: 35 buckets with data
    told = explain(store, cfg, "pop1", IDLE_SERVER, at)
    lines = [ln for ln in told.splitlines() if ln.startswith("  2024-")]
    assert all(ln.split()[2:5] == ["20", "8", "12"] for ln in lines[:-1]), lines
    assert lines[-1].split()[2:5] == ["0", "0", "0"] and lines[-1].endswith("no data")
    n = 12 * (BUCKETS - 1)
    assert f"app-limited: {n} of {20 * (BUCKETS - 1)} qualifying samples in the window (60%), left out" in told
    assert "(app-limited ones left out)" in told
    told = explain(store, replace(cfg, include_app_limited=True), "pop1", IDLE_SERVER, at)
    assert f"app-limited: {n} of {20 * (BUCKETS - 1)} qualifying samples in the window (60%), counted" in told
    bad = [ln for ln in told.splitlines() if ln.startswith("  2024-") and ln.endswith("BAD")]
    assert len(bad) == BUCKETS - 1 and all(ln.split()[2:5] == ["20", "20", "12"] for ln in bad), bad


def _tables(store: Store) -> dict[str, str]:
    rows = store.query_rows("SELECT name, engine FROM system.tables WHERE database = currentDatabase()")
    return {str(n): str(e) for n, e in rows}


def test_migration_009_on_a_store_with_telemetry(store_url: str) -> None:
    """Telemetry from before 009 is not in tcpinfo_5m_nal: the default scoring sees no samples in
    its buckets, include_app_limited scores it as before; new telemetry fills both; every
    statement of 009 runs again without changing anything."""
    store = open_store(store_url)
    try:
        # the scoring cache of today's code (013) with the telemetry tables of before 009
        before = [m for m in migrations() if m.version < 9 or m.version == 13]
        apply_migrations(store, before)
        included = replace(CFG, include_app_limited=True)
        load(store, CFG)
        old_scores = scores_of(store, included, 1)
        assert row_of(old_scores, IDLE_SERVER)["qualifying"] == 20 * BUCKETS

        assert 9 in apply_migrations(store).applied
        tables = _tables(store)
        assert tables["tcpinfo_5m_nal"] == "AggregatingMergeTree" and tables["tcpinfo_5m_nal_mv"] == "MaterializedView"
        pd.testing.assert_frame_equal(scores_of(store, included, 2), old_scores)  # the same cache, the same scores
        assert scores_of(store, CFG, 3).empty  # no samples in the default's source yet

        # a second POP's telemetry after the migration reaches both rollups
        fresh = load(store, CFG, pop="pop2", seed=5)
        window = window_for(NOW, CFG)
        assert_same_scores(
            scores_of(store, CFG, 4, "pop2"), reference_scores(synth.app_limited_left_out(fresh), CFG, window)
        )
        assert_same_scores(scores_of(store, included, 5, "pop2"), reference_scores(fresh, included, window))

        # re-runnable: each statement of 009 again (as after a run that failed half-way)
        m009 = next(m for m in migrations() if m.version == 9)
        statements = split_statements(render_markers(m009.text, store.version()))
        assert len(statements) == 2
        for statement in statements:
            store.execute(statement)
        assert apply_migrations(store).applied == []
        assert _tables(store) == tables
        counts = store.query_rows("SELECT pop, toUInt64(countMerge(samples)) FROM tcpinfo_5m_nal GROUP BY pop")
        assert [(str(p), int(n)) for p, n in counts] == [("pop2", len(fresh))]
    finally:
        store.close()
