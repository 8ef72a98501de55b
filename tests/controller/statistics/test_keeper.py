"""The scoring cache keeper (controller/statistics/keeper.py) on ClickHouse 18.16 and chDB.

A tick computes every closed bucket of the window once, then only new or changed ones (a late
batch); a round after it computes nothing and scores from the keeper's versions exactly what a
round that fills the cache itself scores; a failing store is reported and retried, never raised.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import numpy as np
import pandas as pd
import pytest

from controller.scoring.incremental import score_incrementally
from controller.scoring.query import refresh, score_prefixes, window_for
from controller.scoring.settings import ScoringSettings
from controller.statistics.cache import CacheKey
from controller.statistics.keeper import CacheKeeper, Tick, keep
from controller.statistics.source import CacheSource, epoch_seconds
from controller.store import Store, open_store
from dyncc_common.errors import StoreError
from tests.support import scoring_synth as synth
from tests.support.cache_check import cache_differences

NOW = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
BUCKET = 300
LOOKBACK = 12 * BUCKET
POPS = ("fra", "lax")


def load(store: Store, start: int, buckets: int, seed: int) -> None:
    for i, pop in enumerate(POPS):
        patterns = {f"2001:db8:{i}:{k:x}00::/56": synth.NORMAL for k in range(20)}
        patterns |= {f"2001:db8:{i}:f{k:x}00::/56": synth.FLAPPING for k in range(4)}
        synth.insert_samples(store, synth.samples_frame(pop, patterns, start, buckets, seed=seed + i))


def test_a_tick_fills_the_window_once_then_only_what_changed(store: Store) -> None:
    end = epoch_seconds(NOW) - epoch_seconds(NOW) % BUCKET
    load(store, end - LOOKBACK, 12, seed=1)
    keeper = CacheKeeper(store, CacheSource(), LOOKBACK)
    first = keeper.tick(NOW)
    assert (first.computed, first.buckets) == (24, 24)  # 2 POPs x 12 closed buckets
    assert keeper.tick(NOW).computed == 0
    # a late batch for one bucket 8 buckets back: computed at the next tick (every tick
    # compares the whole window with the source), alone
    load_one = synth.samples_frame("lax", {"2001:db8:1:100::/56": synth.NORMAL}, end - 8 * BUCKET, 1, seed=9)
    synth.insert_samples(store, load_one)
    computed = [keeper.tick(NOW + dt.timedelta(seconds=BUCKET * k)).computed for k in range(3)]
    assert computed == [1, 0, 0]  # the buckets that enter the window later have no data
    # the bucket in progress is never computed: data in it, and a tick before its end
    synth.insert_samples(store, synth.samples_frame("fra", {"2001:db8::/56": synth.NORMAL}, end + 3 * BUCKET, 1))
    keys_before = tick_keys(store, end + 3 * BUCKET)
    assert all(k.bucket_ts < end + 3 * BUCKET for k in keys_before)


def tick_keys(store: Store, now_s: int) -> list[CacheKey]:
    cfg = ScoringSettings(lookback_seconds=LOOKBACK)
    window = window_for(dt.datetime.fromtimestamp(now_s, dt.UTC), cfg)
    return refresh(store, cfg, window, "", 1)


def test_a_round_after_the_keeper_computes_nothing_and_scores_the_same(store: Store) -> None:
    end = epoch_seconds(NOW) - epoch_seconds(NOW) % BUCKET
    load(store, end - LOOKBACK, 12, seed=2)
    tick = CacheKeeper(store, CacheSource(), LOOKBACK).tick(NOW)
    assert tick.computed == 24
    cfg = ScoringSettings(lookback_seconds=LOOKBACK, min_samples=2)
    assert cfg.cache_source == CacheSource()  # the default scoring reads what the keeper wrote
    window = window_for(NOW, cfg)
    round_version = epoch_seconds(NOW) * 1_000_000_000
    keys = refresh(store, cfg, window, "", round_version)
    assert len(keys) == 24 and all(k.version != round_version for k in keys)  # the keeper's versions
    # the state built from the keeper's cache (a controller's first round) equals the full query
    incremental = score_incrementally(store, cfg, window, "", keys, round_version)
    full = score_prefixes(store, cfg, window, "", keys)
    assert len(full) == 48
    pd.testing.assert_frame_equal(incremental, full, check_exact=True)
    flapping = full[full["prefix"].astype(str).str.contains(r":f\d00::", regex=True)]
    assert len(flapping) == 8 and (flapping["bad_buckets"] >= 6).all()  # poor every other bucket at least


def test_keep_reports_a_store_away_and_goes_on(clickhouse_db_url: str) -> None:
    # a store whose server does not answer: port 9 on loopback (discard, nothing listens there)
    away = open_store("clickhouse://default:@127.0.0.1:9/default?connect_timeout=1")
    errors: list[StoreError] = []
    ticks: list[Tick] = []
    calls = iter(range(3))

    def stopped(_timeout: float) -> bool:
        return next(calls) == 2  # three ticks, then stop

    keep(CacheKeeper(away), 0.0, stopped, ticks.append, errors.append)
    assert len(errors) == 3 and not ticks
    away.close()
    # and a store that answers: ticks, no errors
    good = open_store(clickhouse_db_url)
    try:
        from controller.store.migrate import apply_migrations

        apply_migrations(good)
        done = threading.Event()
        runner = threading.Thread(target=keep, args=(CacheKeeper(good), 0.05, done.wait, ticks.append, errors.append))
        runner.start()
        while len(ticks) < 2:
            done.wait(0.05)
        done.set()
        runner.join(10)
        assert not runner.is_alive() and len(errors) == 3 and ticks[0].computed == 0
    finally:
        good.close()


@pytest.mark.parametrize("bucket", [300, 60])
def test_window_ending_before_leaves_the_bucket_in_progress_out(bucket: int) -> None:
    from controller.statistics.source import Window

    now = dt.datetime(2024, 3, 1, 12, 4, 59, tzinfo=dt.UTC)
    window = Window.ending_before(now, bucket, 10 * bucket)
    assert epoch_seconds(window.end) % bucket == 0 and window.end <= now < window.end + dt.timedelta(seconds=bucket)
    assert window.buckets == 10
    assert np.isclose((window.end - window.start).total_seconds(), 10 * bucket)


@pytest.mark.parametrize("first", ["keeper", "round"])
def test_late_data_anywhere_in_the_window_is_in_the_cache_at_the_next_tick(store: Store, first: str) -> None:
    """Issue 33 item 2: a backlog loaded late (a loader killed, restarted) for buckets 35-175
    minutes back.  Before, a tick re-checked only the newest 6 buckets and one older slice (the
    slices turned once per bucket): the three ticks of this bucket computed none of the five, nor
    did the round.  Now every refresh compares the whole window: the next
    keeper tick, or a controller round's own refresh, makes the cache equal the raw data for
    every bucket of the window, and a tick after it computes nothing."""
    lookback = 36 * BUCKET  # the default window (3 h)
    end = epoch_seconds(NOW) - epoch_seconds(NOW) % BUCKET
    load(store, end - lookback, 36, seed=4)
    keeper = CacheKeeper(store, CacheSource(), lookback)
    assert keeper.tick(NOW).computed == 72
    late_back = (7, 11, 12, 20, 35)  # buckets back from the window's end (11: 55 minutes)
    for back in late_back:
        frame = synth.samples_frame("fra", {"2001:db8:0:100::/56": synth.NORMAL}, end - back * BUCKET, 1, seed=back)
        synth.insert_samples(store, frame)
    assert len(cache_differences(store, end - lookback, end)) == len(late_back)  # the partial counts
    if first == "round":  # a controller round refreshes through the same code, with its own version
        cfg = ScoringSettings(lookback_seconds=lookback)
        version = time.time_ns()  # a round's version is its time, after the keeper's tick above
        keys = refresh(store, cfg, window_for(NOW, cfg), "", version)
        assert sorted(k.bucket_ts for k in keys if k.version == version) == sorted(end - b * BUCKET for b in late_back)
        assert cache_differences(store, end - lookback, end) == {}
    for minute in range(3):  # three ticks within the same bucket, a minute apart (--cache-every 1m)
        tick = keeper.tick(NOW + dt.timedelta(seconds=60 * minute))
        assert tick.computed == (len(late_back) if minute == 0 and first == "keeper" else 0), (minute, tick)
        assert tick.buckets == 72
        assert cache_differences(store, end - lookback, end) == {}, minute
