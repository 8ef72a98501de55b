"""A store whose client addresses are prefix-only (`dyncc collect --export-addresses prefix`: host
bits zeroed) scores and reports exactly like one with the full addresses: the same samples go to
two POPs, one with each form of dst_addr, and a round decides the same for both."""

from __future__ import annotations

import datetime as dt
import ipaddress

import numpy as np
import pandas as pd

from collector.telemetry.prefixes import client_prefixes
from controller.scoring.query import window_for
from controller.scoring.round import run_round
from controller.scoring.settings import ScoringSettings
from controller.store import Store
from controller.store.sql import query
from schemas.addresses import MAPPED_PREFIX, format_prefixes
from tests.support import scoring_synth as synth

NOW = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
CFG = ScoringSettings(holdout_fraction=0.0)
PATTERNS = {
    **{f"198.51.{i}.0/24": synth.NORMAL for i in range(16)},
    **{f"2001:db8:0:{i}00::/56": synth.NORMAL for i in range(1, 5)},
    "203.0.113.0/24": synth.STEADY_BAD,
    "2001:db8:0:a00::/56": synth.STEADY_BAD,
    "203.0.114.0/24": synth.FLAPPING,
    "203.0.115.0/24": synth.LOW_RTT,
    "203.0.116.0/24": synth.TOO_FEW,
}
COMPARED = ["prefix", "decision", "reason", "duty_cycle", "flap_ratio", "counted_buckets", "qualifying"]


def full_addresses(prefixes: list[str], rng: np.random.Generator) -> np.ndarray:
    """(n, 16) uint8: a random host address inside each row's prefix (16-byte, IPv4 mapped)."""
    base = {}
    for text in set(prefixes):
        net = ipaddress.ip_network(text)
        raw = MAPPED_PREFIX + net.network_address.packed if net.version == 4 else net.network_address.packed
        base[text] = np.frombuffer(raw, np.uint8)
    out = np.stack([base[p] for p in prefixes])
    v4 = np.array([":" not in p for p in prefixes])
    host = rng.integers(1, 255, (len(prefixes), 16), dtype=np.uint8)
    out[v4, 15] = host[v4, 15]  # /24: the last byte
    out[~v4, 7:] = host[~v4, 7:]  # /56: the last 9 bytes
    return out


def insert(store: Store, df: pd.DataFrame, pop: str, dst: np.ndarray, cookies: np.ndarray) -> None:
    n = len(df)
    store.insert_columns(
        "tcpinfo",
        {
            "time": df["time"].to_numpy(dtype="int64").astype("datetime64[s]"),
            "time_ns": df["time"].to_numpy(dtype="uint64") * np.uint64(1_000_000_000),
            "pop": [pop] * n,
            "host": ["edge-1"] * n,
            "prefix": df["prefix"].astype(str).tolist(),
            "family": df["family"].to_numpy(dtype="uint8"),
            "dst_addr": dst,
            "src_port": np.full(n, 443, dtype="uint16"),
            "dst_port": (40000 + np.arange(n) % 20000).astype("uint16"),
            "cookie": cookies,
            "bytes_acked": df["bytes_acked"].to_numpy(dtype="uint64"),
            "busy_time": np.full(n, 500_000, dtype="uint64"),
            "delivery_rate": df["delivery_rate"].to_numpy(dtype="uint64"),
            "min_rtt": df["min_rtt"].to_numpy(dtype="uint32"),
            "app_limited": df["app_limited"].to_numpy(dtype="uint8"),
        },
    )


def test_prefix_only_addresses_score_and_report_the_same(store: Store) -> None:
    window = window_for(NOW, CFG)
    start = int(window.start.timestamp())
    samples = synth.samples_frame("x", PATTERNS, start, 36)
    rng = np.random.default_rng(5)
    full = full_addresses(samples["prefix"].tolist(), rng)
    # what the collector exports: client_prefix from the full address, and with --export-addresses
    # prefix that same array as dst_addr (collector/telemetry/poller.py Encoder)
    prefix16, plen = client_prefixes(full)
    assert format_prefixes(prefix16, plen) == samples["prefix"].tolist()
    assert not np.array_equal(prefix16, full)
    again16, again_len = client_prefixes(prefix16)  # idempotent: the prefix of a prefix is itself
    assert np.array_equal(again16, prefix16) and np.array_equal(again_len, plen)
    cookies = np.arange(1, len(samples) + 1, dtype="uint64")
    insert(store, samples, "popfull", full, cookies)
    insert(store, samples, "popprefix", prefix16, cookies)

    results = {pop: run_round(store, CFG, NOW, pop=pop) for pop in ("popfull", "popprefix")}
    decided = {pop: r.decisions[COMPARED].sort_values("prefix").reset_index(drop=True) for pop, r in results.items()}
    pd.testing.assert_frame_equal(decided["popfull"], decided["popprefix"])
    chosen = set(decided["popprefix"].loc[decided["popprefix"]["decision"] == "select", "prefix"])
    assert chosen == {"203.0.113.0/24", "2001:db8:0:a00::/56"}
    entries = {pop: [(e.prefix, e.algorithm) for s in r.states for e in s.entries] for pop, r in results.items()}
    assert entries["popfull"] == entries["popprefix"] and len(entries["popfull"]) == 2

    # the goodput report groups flows by (cookie, addresses, ports): the same flows either way
    end = start + 36 * 300
    goodput = {
        pop: store.query_df(query("report_goodput"), {"pop": pop, "start": start, "end": end, "bucket": 300})
        for pop in ("popfull", "popprefix")
    }
    assert len(goodput["popfull"]) > 0
    same = ["ts", "flows", "p10", "p50"]
    pd.testing.assert_frame_equal(goodput["popfull"][same], goodput["popprefix"][same])
    assert int(goodput["popprefix"]["flows"].sum()) == int((samples["bytes_acked"] > 102_400).sum())
