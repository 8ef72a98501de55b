"""Trials through real rounds (controller/scoring/round.py on chDB and ClickHouse 18.16): the
samples a round reads are attributed by the socket's own congestion control; a prefix BBR helps
is kept, one whose rate BBR halves is reverted; and the effect the deciding round stored is the
effect the effect model computes again from the same store (`Evidence`), to the last digit."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd

from controller.evidence.load import Evidence, stored_trials
from controller.evidence.settings import EvidenceSettings
from controller.scoring.round import run_round
from controller.scoring.settings import ScoringSettings
from controller.store import Store

B = 60
T0 = 1_709_290_800  # 2024-03-01 11:00 UTC, a whole hour
CFG = ScoringSettings(
    bucket_seconds=B, lookback_seconds=8 * B, min_buckets=4, min_samples=2, holdout_fraction=0.0, min_bytes=102400
)
EV = EvidenceSettings()
HELPED, HURT = "192.0.2.0/24", "198.51.100.0/24"
NORMAL = [f"2001:db8:0:{i:x}00::/56" for i in range(1, 9)]
SCALE = {HELPED: 2.0, HURT: 0.5}


def _bucket(rng: np.random.Generator, k: int, algo: dict[str, str]) -> pd.DataFrame:
    rows = []
    start = T0 + k * B
    for prefix in [HELPED, HURT, *NORMAL]:
        bad = prefix in SCALE
        cc = algo.get(prefix, "cubic")
        scale = SCALE[prefix] if bad and cc == "bbr" else 1.0
        lo, hi = (1e6, 1.3e6) if bad else (8e6, 20e6)
        for _ in range(6):
            rows.append((start + int(rng.integers(0, B)), prefix, cc, int(rng.uniform(lo, hi) * scale), 0))
        if bad:  # app-limited samples at a poor rate: left out of every figure by default
            rows.append((start + int(rng.integers(0, B)), prefix, cc, 10_000, 1))
    return pd.DataFrame(rows, columns=["time", "prefix", "cc", "delivery_rate", "app_limited"])


def _insert(store: Store, df: pd.DataFrame) -> None:
    n = len(df)
    store.insert_columns(
        "tcpinfo",
        {
            "time": df["time"].to_numpy(dtype="int64").astype("datetime64[s]"),
            "pop": ["p1"] * n,
            "prefix": df["prefix"].tolist(),
            "family": np.where(df["prefix"].str.contains(":"), 10, 2).astype("uint8"),
            "cc": df["cc"].tolist(),
            "bytes_acked": np.full(n, 1_000_000, dtype="uint64"),
            "delivery_rate": df["delivery_rate"].to_numpy(dtype="uint64"),
            "min_rtt": np.full(n, 40_000, dtype="uint32"),
            "app_limited": df["app_limited"].to_numpy(dtype="uint8"),
        },
    )


def test_trials_keep_the_helped_revert_the_hurt_and_store_the_models_effect(store: Store) -> None:
    rng = np.random.default_rng(7)
    algo: dict[str, str] = {}
    decided: dict[str, tuple[str, float, float, float]] = {}
    for k in range(20):
        _insert(store, _bucket(rng, k, algo))
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
    ev = Evidence.load(store, EV, list(trials.values()), B, T0 + 30 * B, CFG.min_bytes, with_goodput=False)
    for prefix, (_, estimate, low, high) in decided.items():
        e = ev.effect(trials[prefix])
        assert (e.estimate, e.low, e.high) == (estimate, low, high)  # the same numbers, exactly
        assert math.isfinite(e.mde) and e.samples > 0
    # the app-limited samples were read and left out: one in seven of the bad prefixes' samples
    assert 0.10 < ev.app_limited_share() < 0.18
