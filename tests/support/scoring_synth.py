"""Synthetic per-socket samples with known scoring answers (tests, demos).

Each prefix follows a pattern over consecutive buckets; the rest of the POP is
"normal" traffic so the per-bucket threshold sits between the two.  Pure numpy /
pandas: `samples_frame` builds rows, `insert_samples` (I/O) loads them into tcpinfo.
A pattern may add app-limited samples (tcpinfo.app_limited = 1), which the scoring
leaves out unless include_app_limited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

MB = 1_000_000
GOOD_RATE = (8 * MB, 20 * MB)  # normal prefixes: uniform per sample
BAD_RATE = (1 * MB, 2 * MB)  # well below any 20th percentile of the normal ones


@dataclass(frozen=True)
class Pattern:
    """How one prefix behaves in each bucket.

    bad: a per-bucket sequence (cycled) of True = poor rates, False = normal rates;
    qualifying / small: samples per bucket with bytes_acked 1 MB / 50 KB;
    rtt_ms: min_rtt; rate_scale multiplies the rates (effect after BBR);
    app_limited: more samples per bucket with bytes_acked 1 MB flagged app-limited, at poor
    rates (BAD_RATE x rate_scale) whatever the bucket: what a server with little to send measures.
    """

    bad: tuple[bool, ...]
    qualifying: int = 8
    small: int = 0
    rtt_ms: float = 40.0
    rate_scale: float = 1.0
    app_limited: int = 0


STEADY_BAD = Pattern(bad=(True,))
NORMAL = Pattern(bad=(False,))
FLAPPING = Pattern(bad=(True, False))
LOW_RTT = Pattern(bad=(True,), rtt_ms=3.0)
TOO_FEW = Pattern(bad=(True,), qualifying=3)
SMALL_FLOWS = Pattern(bad=(True,), qualifying=0, small=8)


def samples_frame(
    pop: str,
    patterns: dict[str, Pattern],
    start_ts: int,
    buckets: int,
    bucket_seconds: int = 300,
    seed: int = 1,
) -> pd.DataFrame:
    """Rows (time, pop, prefix, family, bytes_acked, delivery_rate, min_rtt, app_limited) for every bucket."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
    labels: list[tuple[str, int]] = []  # (prefix, family) and its row count, one per part
    counts: list[int] = []
    for prefix, pat in sorted(patterns.items()):
        family = 6 if ":" in prefix else 4
        for b in range(buckets):
            n = pat.qualifying + pat.small
            if n + pat.app_limited == 0:
                continue
            lo, hi = BAD_RATE if pat.bad[b % len(pat.bad)] else GOOD_RATE
            rates = rng.integers(lo, hi, n) * pat.rate_scale
            offsets = rng.integers(0, bucket_seconds, n)
            rtt = int(pat.rtt_ms * 1000) + rng.integers(0, 500)
            flagged = pat.app_limited
            if flagged:  # drawn after the rest: patterns without app-limited samples stay as they were
                rates = np.r_[rates, rng.integers(*BAD_RATE, flagged) * pat.rate_scale]
                offsets = np.r_[offsets, rng.integers(0, bucket_seconds, flagged)]
            cols["time"].append(start_ts + b * bucket_seconds + offsets)
            cols["bytes_acked"].append(
                np.r_[np.full(pat.qualifying, 1_000_000), np.full(pat.small, 50_000), np.full(flagged, 1_000_000)]
            )
            cols["delivery_rate"].append(rates.astype("uint64"))
            cols["min_rtt"].append(np.full(n + flagged, rtt))
            cols["app_limited"].append(np.r_[np.zeros(n, dtype="uint8"), np.ones(flagged, dtype="uint8")])
            labels.append((prefix, family))
            counts.append(n + flagged)
    if not labels:
        return pd.DataFrame()
    # one frame at the end (a frame per bucket made this the slowest step of many tests)
    repeat = np.asarray(counts)
    return pd.DataFrame(
        {
            "time": np.concatenate(cols["time"]).astype("int64"),
            "pop": pop,
            "prefix": np.repeat(np.array([p for p, _ in labels], dtype=object), repeat),
            "family": np.repeat(np.array([f for _, f in labels], dtype="int64"), repeat),
            "bytes_acked": np.concatenate(cols["bytes_acked"]).astype("int64"),
            "delivery_rate": np.concatenate(cols["delivery_rate"]),
            "min_rtt": np.concatenate(cols["min_rtt"]).astype("int64"),
            "app_limited": np.concatenate(cols["app_limited"]),
        }
    )


_COLUMNS = ("time", "bytes_acked", "delivery_rate", "min_rtt", "app_limited")


def insert_samples(store: Store, df: pd.DataFrame) -> int:
    """Insert synthetic rows into tcpinfo (the rollups' MVs fill tcpinfo_5m and tcpinfo_5m_nal);
    rows without an app_limited column are not app-limited."""
    flags = df["app_limited"] if "app_limited" in df else np.zeros(len(df))
    return store.insert_columns(
        "tcpinfo",
        {
            "time": df["time"].to_numpy(dtype="int64").astype("datetime64[s]"),
            "pop": df["pop"].astype(str).tolist(),
            "prefix": df["prefix"].astype(str).tolist(),
            "family": df["family"].to_numpy(dtype="uint8"),
            "bytes_acked": df["bytes_acked"].to_numpy(dtype="uint64"),
            "delivery_rate": df["delivery_rate"].to_numpy(dtype="uint64"),
            "min_rtt": df["min_rtt"].to_numpy(dtype="uint32"),
            "app_limited": np.asarray(flags, dtype="uint8"),
        },
    )


def app_limited_left_out(df: pd.DataFrame) -> pd.DataFrame:
    """The samples with the app-limited ones made non-qualifying (bytes_acked 0): what the default
    scoring counts, in a form the pandas reference (tests/support/scoring_reference.py) scores."""
    flagged = df["app_limited"].to_numpy() != 0
    return df.assign(bytes_acked=np.where(flagged, 0, df["bytes_acked"].to_numpy()))
