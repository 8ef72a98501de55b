"""A timeline of one POP whose trials end both ways, for tests that run real rounds on it
(tests/controller/evidence/test_rounds.py, tests/controller/scoring/test_state_memo.py).

HELPED's rate doubles on BBR, HURT's halves; both sit well below the NORMAL prefixes, so the
rounds select and trial them; every bad prefix also has an app-limited sample at a poor rate."""

from __future__ import annotations

import numpy as np
import pandas as pd

from controller.evidence.settings import EvidenceSettings
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


def trial_bucket(rng: np.random.Generator, k: int, algo: dict[str, str]) -> pd.DataFrame:
    """Bucket k's samples; `algo`: prefix -> the algorithm its routes have now (else cubic)."""
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


def insert_bucket(store: Store, df: pd.DataFrame) -> None:
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
