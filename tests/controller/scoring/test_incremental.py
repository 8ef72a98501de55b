"""Incremental scoring (controller/scoring/incremental.py) equals a full recompute, round after round.

Random timelines on chDB, ClickHouse 18.16 and the 2 x 2 cluster: POPs with gaps (buckets without
data), rounds that skip buckets, late data inside and outside the re-checked buckets, a settings
change and back, a POP that goes quiet and returns.  Every round's scores from the state must be
exactly (bit for bit) those of scoring_prefixes.sql over the whole window for the same cache keys.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import numpy as np
import pandas as pd

from controller.scoring.incremental import committed_state, score_incrementally, state_params, window_bits
from controller.scoring.query import refresh, score_prefixes, window_for
from controller.scoring.round import run_round
from controller.scoring.settings import ScoringSettings
from controller.store import Store, open_store
from tests.support import scoring_synth as synth

T0 = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
BUCKET = 300


def random_samples(rng: np.random.Generator, pop: str, start: int, buckets: int, prefixes: int) -> pd.DataFrame:
    """Samples of `prefixes` prefixes over `buckets` buckets from `start`, some buckets left empty."""
    n = prefixes * buckets * 6
    times = start + rng.integers(0, buckets * BUCKET, n)
    keep = (times - start) // BUCKET % 7 != rng.integers(0, 7)  # gaps: a random bucket in 7 stays empty
    n = int(keep.sum())
    return pd.DataFrame(
        {
            "time": times[keep],
            "pop": pop,
            "prefix": [f"2001:db8:{pop[-1]}:{i:x}00::/56" for i in rng.integers(0, prefixes, n)],
            "family": 6,
            "bytes_acked": rng.choice([50_000, 200_000, 5_000_000], n),
            "delivery_rate": rng.integers(100_000, 30_000_000, n).astype("uint64"),
            "min_rtt": rng.integers(1_000, 120_000, n).astype("uint32"),
        }
    )


def assert_equal_scores(store: Store, cfg: ScoringSettings, now: dt.datetime, generation: int) -> pd.DataFrame:
    window = window_for(now, cfg)
    keys = refresh(store, cfg, window, "", generation)
    incremental = score_incrementally(store, cfg, window, "", keys, generation)
    full = score_prefixes(store, cfg, window, "", keys)
    assert len(full) > 0
    pd.testing.assert_frame_equal(incremental, full, check_exact=True)
    return incremental


def play_timeline(store: Store, seed: int, rounds: int = 11) -> list[int]:
    """Rounds over a random timeline; returns the number of POPs built per round (for the test)."""
    rng = np.random.default_rng(seed)
    cfg = ScoringSettings(min_samples=2, lookback_seconds=12 * BUCKET)
    now = T0
    start = int(window_for(now, cfg).start.timestamp())
    synth.insert_samples(store, random_samples(rng, "popA", start, 12, 30))
    synth.insert_samples(store, random_samples(rng, "popB", start + 3 * BUCKET, 9, 20))
    built = []
    quiet_b = False
    for i in range(rounds):
        generation = i + 1
        step = int(rng.choice([0, 1, 1, 1, 2, 4]))  # the same bucket again, the next one, a skipped round
        now += dt.timedelta(seconds=step * BUCKET)
        newest = int(window_for(now, cfg).end.timestamp()) - BUCKET
        synth.insert_samples(store, random_samples(rng, "popA", newest, 1, 30))
        if i == 3:
            quiet_b = True  # popB sends nothing for a while (its window empties)
        if i == 8:
            quiet_b = False
        if not quiet_b:
            synth.insert_samples(store, random_samples(rng, "popB", newest, 1, 20))
        if i % 3 == 2:  # late data: inside the re-checked buckets, and one far behind them
            late = newest - int(rng.integers(1, 5)) * BUCKET
            synth.insert_samples(store, random_samples(rng, "popA", late, 1, 30))
            synth.insert_samples(store, random_samples(rng, "popA", newest - 10 * BUCKET, 1, 30))
        run_cfg = cfg
        if i in (5, 6):  # other settings (a new state), then back to the first (its state again)
            run_cfg = replace(cfg, min_samples=3)
        assert_equal_scores(store, run_cfg, now, generation)
        built.append(len(committed_state(store, run_cfg, "")))
    return built


def test_incremental_scores_equal_a_full_recompute(store: Store) -> None:
    built = play_timeline(store, 1)
    assert max(built) == 2  # both POPs held a committed state


def test_incremental_scores_equal_a_full_recompute_on_the_cluster(cluster_db_url: str) -> None:
    from controller.store.migrate import apply_migrations

    store = open_store(cluster_db_url)
    try:
        apply_migrations(store)
        play_timeline(store, 3, rounds=8)
        # every shard holds a part of the state: the per-prefix work ran where the prefixes are
        counts = [int(s.query_rows("SELECT count() FROM scoring_state")[0][0]) for s in store.shard_stores()]
        assert len(counts) == 2 and all(c > 0 for c in counts), counts
    finally:
        store.close()


def test_a_round_reads_only_the_changed_buckets(store: Store) -> None:
    """A warm round adds the new bucket and subtracts the one that slid out: two (pop, bucket)
    contributions instead of the window, and the generations no POP is on are dropped."""
    rng = np.random.default_rng(5)
    cfg = ScoringSettings(min_samples=2, holdout_fraction=0.0)
    window = window_for(T0, cfg)
    start = int(window.start.timestamp())
    synth.insert_samples(store, random_samples(rng, "pop1", start, 36, 10))
    run_round(store, cfg, T0, dry_run=True)
    later = T0 + dt.timedelta(seconds=BUCKET)
    synth.insert_samples(store, random_samples(rng, "pop1", int(window.end.timestamp()), 1, 10))
    run_round(store, cfg, later, dry_run=True)
    rows = store.query_rows(
        "SELECT generation, built_on, count() FROM scoring_state_keys WHERE params = %(p)s "
        "GROUP BY generation, built_on ORDER BY generation",
        {"p": state_params(cfg)},
    )
    (first, base0, n0), (second, base1, n1) = [(int(a), int(b), int(c)) for a, b, c in rows]
    assert base0 == 0 and base1 == first  # the second round built on the first
    assert 28 <= n0 <= 36 and abs(n1 - n0) <= 1  # the buckets with data (1 in 7 left empty)
    generations = {int(g) for (g,) in store.query_rows("SELECT DISTINCT generation FROM scoring_state")}
    assert generations == {second}  # the first generation was dropped
    assert_equal_scores(store, cfg, later, 9)


def test_window_bits_rotate_to_the_window_start() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        width = int(rng.integers(1, 65))
        first = int(rng.integers(0, 10_000))  # bucket number of the window's start
        bits = rng.integers(0, 2, width)
        absolute = sum(1 << ((first + i) % 64) for i in range(width) if bits[i])
        relative = sum(1 << i for i in range(width) if bits[i])
        assert int(window_bits(np.array([absolute], dtype=np.uint64), first % 64)[0]) == relative


def test_late_data_far_behind_is_folded_in_within_a_few_rounds(store: Store) -> None:
    """A batch for a bucket 20 buckets back (beyond the newest six re-checked every round) changes
    the scores within ceil(30 / 6) = 5 rounds, and from the state as from a full recompute."""
    cfg = ScoringSettings(min_samples=9, holdout_fraction=0.0)  # 8 samples per bucket: none counts
    now = T0
    window = window_for(now, cfg)
    start = int(window.start.timestamp())
    synth.insert_samples(store, synth.samples_frame("pop1", {"203.0.113.0/24": synth.STEADY_BAD}, start, 42))
    assert_equal_scores(store, cfg, now, 1)
    late_bucket = int(window.end.timestamp()) - 20 * BUCKET
    late = synth.samples_frame("pop1", {"203.0.113.0/24": synth.STEADY_BAD}, late_bucket, 1, seed=9)
    synth.insert_samples(store, late)
    counted = []
    for i in range(1, 7):
        scores = assert_equal_scores(store, cfg, now + dt.timedelta(seconds=i * BUCKET), 1 + i)
        row = scores[scores["prefix"] == "203.0.113.0/24"]
        counted.append(int(row["counted_buckets"].iloc[0]))
    assert counted[-1] == 1 and counted.index(1) <= 4, counted  # seen by the fifth round at the latest
