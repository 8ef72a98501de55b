"""The bucket-mask score query (windows of up to 64 buckets) and the array one (longer windows).

On ClickHouse 18.16 and chDB, random timelines with gaps (buckets where a prefix did not
count), in windows of 36, 64 (the last bit of a mask) and 70 buckets (the array query):
the scores equal the plain reference, and for a window the masks hold, the mask query
plus controller/scoring/flaps.py give exactly the array query's scores.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from controller.scoring.query import (
    base_params,
    normalize_scores,
    packs_masks,
    prefix_timeline,
    refresh,
    score_prefixes,
    timeline_sql,
    window_for,
)
from controller.scoring.settings import ScoringSettings
from controller.store import Store
from controller.store.sql import query, splice
from tests.support import scoring_synth as synth
from tests.support.scoring_reference import reference_scores, reference_timeline

NOW = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
BUCKET = 20  # raw tcpinfo, any number of buckets


def random_samples(start: int, buckets: int, seed: int) -> pd.DataFrame:
    """~40 prefixes in two POPs, a few samples per bucket: some buckets count, some not, rates at random."""
    rng = np.random.default_rng(seed)
    n = 60 * buckets
    return pd.DataFrame(
        {
            "time": start - BUCKET + rng.integers(0, (buckets + 2) * BUCKET, n),  # also outside the window
            "pop": rng.choice(["popA", "popB"], n),
            "prefix": [f"192.0.2.{i}/32" for i in rng.integers(0, 40, n)],
            "family": 4,
            "bytes_acked": rng.choice([50_000, 1_000_000], n, p=[0.2, 0.8]),
            "delivery_rate": rng.integers(1, 50_000_000, n).astype("uint64"),
            "min_rtt": rng.integers(1_000, 200_000, n).astype("uint32"),
        }
    )


@pytest.mark.parametrize("buckets", [36, 64, 70])
def test_scores_match_the_reference(store: Store, buckets: int) -> None:
    cfg = replace(
        ScoringSettings(), bucket_seconds=BUCKET, lookback_seconds=BUCKET * buckets, min_samples=2, min_buckets=2
    )
    window = window_for(NOW, cfg)
    assert window.buckets == buckets and packs_masks(window) == (buckets <= 64)
    samples = random_samples(int(window.start.timestamp()), buckets, seed=buckets)
    synth.insert_samples(store, samples)
    keys = refresh(store, cfg, window, "", 1)
    scores = score_prefixes(store, cfg, window, "", keys)
    ref = reference_scores(samples, cfg, window)
    # the data flaps and has gaps: the flap count is not trivially 0 or counted - 1
    assert (scores["transitions"] > 0).any() and (scores["counted_buckets"] < buckets).any()
    assert ((scores["transitions"] > 0) & (scores["transitions"] < scores["counted_buckets"] - 1)).any()
    assert (reference_timeline(samples, cfg, window)["bucket"] == int(window.end.timestamp()) - BUCKET).any()
    pd.testing.assert_frame_equal(scores, ref, check_exact=False, rtol=1e-9)
    # exact: the integer columns, and the flap ratio from them
    for column in ("counted_buckets", "bad_buckets", "transitions"):
        assert scores[column].tolist() == ref[column].tolist()
    assert scores["flap_ratio"].tolist() == ref["flap_ratio"].tolist()
    if packs_masks(window):  # the array query on the same cache rows: exactly the same scores
        arrays = splice(query("scoring_prefixes_long"), {"timeline": timeline_sql(keys)})
        long_scores = normalize_scores(store.query_df(arrays, base_params(cfg, window, "")))
        averages = ["median_delivery_rate", "low_delivery_rate", "median_min_rtt_ms"]  # float sums: the
        # server adds them in the order its threads meet the rows, so the last bit may differ run to run
        pd.testing.assert_frame_equal(
            scores.drop(columns=averages), long_scores.drop(columns=averages), check_exact=True
        )
        pd.testing.assert_frame_equal(scores[averages], long_scores[averages], check_exact=False, rtol=1e-12)
    # explain's timeline of one prefix still reads the same cache rows
    some = str(scores["prefix"].iloc[0])
    tl = prefix_timeline(store, cfg, window, str(scores["pop"].iloc[0]), some, keys)
    assert int(tl["counted"].astype(int).sum()) == int(scores["counted_buckets"].iloc[0])
