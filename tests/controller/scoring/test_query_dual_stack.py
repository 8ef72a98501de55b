"""Dual-stack clients: an IPv4 /24 seen on IPv4 and on IPv4-mapped IPv6 sockets is one prefix.

The collector gives an IPv4 client on an IPv6 socket (::ffff:a.b.c.d) its IPv4
prefix string; `family` in tcpinfo stays the socket family (2 or 10).  The
rollup read, the scoring (rollup and raw paths), selections and explain must
treat the halves as one client network, on ClickHouse 18.16 and chDB, and
migration 006 must repair a scoring cache and selections written before.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from collector.telemetry.prefixes import client_prefixes
from controller.ingest.columns import prefix_column
from controller.scoring.decide import decide
from controller.scoring.explain import explain
from controller.scoring.query import (
    base_params,
    prefix_timeline,
    refresh,
    score_prefixes,
    timeline_sql,
    window_for,
)
from controller.scoring.round import run_round
from controller.scoring.settings import ScoringSettings
from controller.statistics.source import Window
from controller.store import Store, open_store
from controller.store.migrate import apply_migrations
from controller.store.sql import migrations, query, render_markers, split_statements
from schemas.addresses import MAPPED_PREFIX, format_prefixes, mapped_to_ipv4, prefix_family
from tests.support import scoring_synth as synth
from tests.support.scoring_reference import reference_scores

NOW = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
CFG = ScoringSettings(holdout_fraction=0.0)  # min_samples 5 per bucket
RAW_CFG = replace(CFG, bucket_seconds=20, lookback_seconds=720)  # 36 buckets read from raw tcpinfo
AF_INET, AF_INET6 = 2, 10

DUAL_SPLIT = "203.0.113.0/24"  # 8 qualifying per bucket, 4 on each socket family: each half < 5
DUAL_BOTH = "192.0.2.0/24"  # 16 qualifying per bucket, 8 + 8: each half counted on its own
MAPPED_ONLY = "198.51.100.0/24"  # only ever seen on IPv6 sockets: still an IPv4 prefix
IPV6 = "2001:db8:0:100::/56"
SPLIT = {DUAL_SPLIT, DUAL_BOTH}
PATTERNS = {f"198.51.{i}.0/24": synth.NORMAL for i in range(20)} | {
    DUAL_SPLIT: synth.STEADY_BAD,
    DUAL_BOTH: replace(synth.STEADY_BAD, qualifying=16),
    MAPPED_ONLY: synth.NORMAL,
    IPV6: synth.NORMAL,
}


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def row_of(df: pd.DataFrame, prefix: str) -> dict[str, Any]:
    """The one row of `prefix` (there must be exactly one)."""
    rows = df[df["prefix"] == prefix]
    assert len(rows) == 1, rows
    return {str(k): v for k, v in rows.iloc[0].to_dict().items()}


def dual_stack_samples(start: int, buckets: int, bucket_seconds: int) -> pd.DataFrame:
    """The synthetic POP with the socket family set like a dual-stack edge would record it."""
    df = synth.samples_frame("pop1", PATTERNS, start, buckets, bucket_seconds=bucket_seconds)
    bucket = (df["time"].to_numpy(dtype="int64") - start) // bucket_seconds
    nth = df.assign(b=bucket).groupby(["prefix", "b"]).cumcount().to_numpy()  # row within its bucket
    split = df["prefix"].isin(SPLIT).to_numpy()
    family = np.where(nth % 2 == 0, AF_INET, AF_INET6)  # alternate: qualifying rows split evenly
    family = np.where(split, family, [AF_INET6 if p in (MAPPED_ONLY, IPV6) else AF_INET for p in df["prefix"]])
    return df.assign(family=family.astype("uint8"))


def load(store: Store, cfg: ScoringSettings, buckets: int = 36) -> tuple[Window, pd.DataFrame]:
    window = window_for(NOW, cfg)
    samples = dual_stack_samples(int(window.start.timestamp()), buckets, cfg.bucket_seconds)
    synth.insert_samples(store, samples)
    return window, samples


def assert_one_client_network(scores: pd.DataFrame, window: Window) -> None:
    assert list(scores["prefix"]) == sorted(PATTERNS)  # one row per prefix
    assert (scores["counted_buckets"] <= window.buckets).all()
    split = row_of(scores, DUAL_SPLIT)
    assert split["qualifying"] == 8 * window.buckets
    assert split["counted_buckets"] == window.buckets  # 4 + 4 >= 5 in every bucket
    assert split["duty_cycle"] == 1.0
    both = row_of(scores, DUAL_BOTH)
    assert both["counted_buckets"] == both["bad_buckets"] == window.buckets  # not twice the window
    assert both["samples"] == 16 * window.buckets
    assert dict(zip(scores["prefix"], scores["family"], strict=True)) == {p: prefix_family(p) for p in PATTERNS}


@pytest.mark.parametrize("cfg", [CFG, RAW_CFG], ids=["rollup", "raw"])
def test_dual_stack_prefix_is_scored_once(store: Store, cfg: ScoringSettings) -> None:
    window, samples = load(store, cfg)
    assert set(samples.loc[samples["prefix"] == DUAL_SPLIT, "family"]) == {AF_INET, AF_INET6}
    raw = store.query_rows("SELECT DISTINCT family FROM tcpinfo WHERE prefix = %(p)s", {"p": DUAL_SPLIT})
    assert {int(f) for (f,) in raw} == {AF_INET, AF_INET6}  # tcpinfo keeps the socket family
    keys = refresh(store, cfg, window, "pop1", 1)
    scores = score_prefixes(store, cfg, window, "pop1", keys)
    assert_one_client_network(scores, window)
    pd.testing.assert_frame_equal(scores, reference_scores(samples, cfg, window), check_exact=False, rtol=1e-9)
    # every (bucket, prefix) once in the timeline: the POP threshold sees each prefix once
    twice = store.query_df(
        f"SELECT prefix, bucket, count() AS n FROM ({timeline_sql(keys)}) GROUP BY prefix, bucket HAVING n > 1",
        base_params(cfg, window, "pop1"),
    )
    assert twice.empty, twice
    tl = prefix_timeline(store, cfg, window, "pop1", DUAL_SPLIT, keys)
    assert len(tl) == window.buckets and tl["counted"].astype(bool).all() and tl["bad"].astype(bool).all()
    assert (tl["qualifying"].astype(int) == 8).all()


def test_rollup_read_one_row_per_prefix(store: Store) -> None:
    window, _ = load(store, CFG, buckets=2)
    df = store.query_df(query("store_rollup_read"), {"pop": "pop1", "start": window.start, "end": window.end})
    assert len(df) == 2 * len(PATTERNS)
    assert not df.duplicated(["bucket", "prefix"]).any()
    prefixes = df["prefix"].map(text)
    assert (df.loc[prefixes == DUAL_SPLIT, "qualifying"].astype(int) == 8).all()
    assert (df.loc[prefixes == DUAL_BOTH, "samples"].astype(int) == 16).all()
    families = {(p, int(f)) for p, f in zip(prefixes, df["family"], strict=True)}
    assert families == {(p, prefix_family(p)) for p in PATTERNS}


def test_selections_family_stable_and_explain_one_history(store: Store) -> None:
    window, _ = load(store, CFG, buckets=37)  # data for two consecutive rounds
    for at in (NOW, NOW + dt.timedelta(seconds=300)):
        result = run_round(store, CFG, at, pop="pop1")
        d = result.decisions
        assert sorted(d["prefix"]) == sorted(PATTERNS)  # one row per prefix
        assert row_of(d, DUAL_SPLIT)["decision"] in ("select", "keep")
        assert row_of(d, DUAL_SPLIT)["counted_buckets"] == window.buckets
        assert row_of(d, DUAL_BOTH)["counted_buckets"] == window.buckets
    rows = store.query_rows("SELECT prefix, round_id, family FROM selections WHERE pop = 'pop1'")
    assert len(rows) == 2 * len(PATTERNS)  # one row per prefix and round
    families: dict[str, set[int]] = {}
    for prefix, _, family in rows:
        families.setdefault(text(prefix), set()).add(int(family))
    assert families == {p: {prefix_family(p)} for p in PATTERNS}
    at = NOW + dt.timedelta(seconds=300)
    told = explain(store, CFG, "pop1", DUAL_SPLIT, at)
    lines = told.splitlines()
    bucket_lines = [ln for ln in lines if ln.startswith("  2024-")]
    assert len(bucket_lines) == window.buckets
    assert all(ln.split()[2:4] == ["8", "8"] and ln.endswith("BAD") for ln in bucket_lines), bucket_lines
    assert f"scores: counted {window.buckets} of {window.buckets} buckets" in told
    assert "last recorded decision: keep" in told or "last recorded decision: select" in told
    # the v4-mapped spelling of the same network explains the same prefix
    assert explain(store, CFG, "pop1", "::ffff:203.0.113.0/120", at) == told


def test_state_rows_without_data_keep_their_prefix_family() -> None:
    previous = pd.DataFrame(
        [
            {
                "pop": "pop1",
                "prefix": p,
                "decision": "select",
                "selected_since": 1_709_290_000,
                "holdout_since": 0,
                "cooldown_until": 0,
                "last_seen": 1_709_290_000,
                "baseline_low_rate": 1e6,
            }
            for p in (DUAL_SPLIT, IPV6)
        ]
    )
    out = decide(pd.DataFrame(), previous, 1_709_294_430, CFG)  # no data this round: state rows only
    assert out.set_index("prefix")["family"].to_dict() == {DUAL_SPLIT: AF_INET, IPV6: AF_INET6}


def test_both_socket_families_give_one_prefix_string() -> None:
    """The collector's side: IPv4 sockets' addresses are stored mapped, so both kinds share the prefix."""
    v4_socket = MAPPED_PREFIX + bytes([203, 0, 113, 7])  # AF_INET dst, widened by the parser
    v6_socket = bytes.fromhex("00000000000000000000ffffcb007163")  # AF_INET6 dst ::ffff:203.0.113.99
    prefix16, plen = client_prefixes(np.frombuffer(v4_socket + v6_socket, dtype=np.uint8).reshape(2, 16))
    assert format_prefixes(prefix16, plen) == [DUAL_SPLIT, DUAL_SPLIT]
    assert prefix_column(prefix16, plen).values == [DUAL_SPLIT]  # the ingest's text: one value


def test_mapped_prefix_text() -> None:
    assert mapped_to_ipv4("::ffff:203.0.113.0/120") == DUAL_SPLIT
    assert mapped_to_ipv4("::ffff:cb00:7100/120") == DUAL_SPLIT
    assert mapped_to_ipv4(DUAL_SPLIT) == DUAL_SPLIT and mapped_to_ipv4(IPV6) == IPV6
    assert mapped_to_ipv4("not-a-prefix") == "not-a-prefix"
    assert mapped_to_ipv4("::ffff:203.0.113.7/120") == "::ffff:203.0.113.7/120"  # not canonical: left alone


# -- migration 006 on a store written by the code before it --------------------------------------

OLD_REFRESH_ROLLUP = """
INSERT INTO scoring_buckets (pop, source, bucket, version, prefix, family, samples, qualifying, stat, low, rtt)
SELECT pop, 'rollup', bucket, 1, prefix, family, samples, qualifying, rate_q[3], rate_q[2], floor(rtt_q)
FROM
(
    SELECT pop, bucket, prefix, family,
        toUInt64(countMerge(samples)) AS samples,
        toUInt64(countIfMerge(qualifying)) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS rate_q,
        arrayElement(quantilesIfMerge(0.1, 0.5)(min_rtt_qual_q), 2) AS rtt_q
    FROM tcpinfo_5m
    GROUP BY pop, bucket, prefix, family
)
"""  # the cache as the scoring before 006 computed it: one row per (prefix, socket family)

OLD_VERSIONS = """
INSERT INTO scoring_versions (pop, source, bucket, version, samples)
SELECT pop, 'rollup', bucket, 1, toUInt64(countMerge(samples)) FROM tcpinfo_5m GROUP BY pop, bucket
"""


def wait_mutations(store: Store, table: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    sql = "SELECT count() FROM system.mutations WHERE database = %(db)s AND table = %(t)s AND is_done = 0"
    while int(store.query_rows(sql, {"db": store.database, "t": table})[0][0]):
        assert time.monotonic() < deadline, f"mutation on {table} not done after {timeout} s"
        time.sleep(0.2)


def test_migration_006_repairs_stored_data(store_url: str) -> None:
    store = open_store(store_url)
    # the data predate 009 (no tcpinfo_5m_nal): scored as then, app-limited samples counted
    old = replace(CFG, include_app_limited=True)
    try:
        before = [m for m in migrations() if m.version < 6]
        assert apply_migrations(store, before).applied == [m.version for m in before]
        window, _ = load(store, old)
        store.execute(OLD_REFRESH_ROLLUP)
        store.execute(OLD_VERSIONS)
        old_round: dict[str, Any] = {  # a round recorded before: the IPv4 prefixes under the socket family that won
            "round_id": ["old", "old", "old"],
            "round_time": np.array([int(NOW.timestamp()) - 3600] * 3, dtype="int64").astype("datetime64[s]"),
            "round_time_ns": np.array([(int(NOW.timestamp()) - 3600) * 10**9] * 3, dtype="uint64"),
            "pop": ["pop1"] * 3,
            "prefix": [DUAL_SPLIT, MAPPED_ONLY, IPV6],
            "family": np.array([AF_INET6, AF_INET6, 0], dtype="uint8"),
            "decision": ["skip"] * 3,
        }
        store.insert_columns("selections", old_round)
        # the cache of that code (scoring_buckets, one row per socket family) goes with 013
        assert int(store.query_rows("SELECT count() FROM scoring_buckets")[0][0]) > 0
        assert 6 in apply_migrations(store).applied
        assert not store.table_exists("scoring_buckets")
        wait_mutations(store, "selections")
        keys = refresh(store, old, window, "pop1", 3)
        assert_one_client_network(score_prefixes(store, old, window, "pop1", keys), window)
        fixed = store.query_rows("SELECT prefix, family FROM selections WHERE round_id = 'old'")
        assert {text(p): int(f) for p, f in fixed} == {DUAL_SPLIT: AF_INET, MAPPED_ONLY: AF_INET, IPV6: AF_INET6}

        # re-runnable: 006's statements again (as after a run that failed half-way), then a round
        m006 = next(m for m in migrations() if m.version == 6)
        for statement in split_statements(render_markers(m006.text, store.version())):
            store.execute(statement)
        wait_mutations(store, "selections")
        result = run_round(store, old, NOW, pop="pop1")
        split = row_of(result.decisions, DUAL_SPLIT)
        assert split["counted_buckets"] == window.buckets and split["decision"] == "select"
        rows = store.query_rows("SELECT prefix, family FROM selections")
        assert {(text(p), int(f)) for p, f in rows} == {(p, prefix_family(p)) for p in PATTERNS}
    finally:
        store.close()
