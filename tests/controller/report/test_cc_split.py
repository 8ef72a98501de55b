"""The report's switched-versus-unswitched table (report_cc_split.sql) on ClickHouse 18.16 and chDB."""

from __future__ import annotations

import datetime as dt

import numpy as np

from controller.report import data as report_data
from controller.report.write import build_page
from controller.store import Store
from tests.support import report_synth as rs

EXTRA = 40  # lax, treated prefix 0, after T_SELECT: polls of flows that stayed on cubic (enforce bpf)


def insert_unswitched(store: Store) -> None:
    """Cubic polls of a treated prefix after its selection: small flows, and large ones before the switch."""
    times = [rs.T_SELECT + dt.timedelta(minutes=10, seconds=i) for i in range(EXTRA)]
    n = len(times)
    acked = [50_000 if i % 2 else 200_000 for i in range(n)]
    store.insert_columns(
        "tcpinfo",
        {
            "time": np.array([np.datetime64(t, "s") for t in times], dtype="datetime64[s]"),
            "time_ns": np.array([int(t.replace(tzinfo=dt.UTC).timestamp()) * 10**9 for t in times], dtype=np.uint64),
            "pop": ["lax"] * n,
            "host": ["lax-edge1"] * n,
            "prefix": [rs.prefix_of(0, 0)] * n,
            "family": np.full(n, 2, dtype=np.uint8),
            "cc": ["cubic"] * n,
            "cookie": np.arange(10**9, 10**9 + n, dtype=np.uint64),
            "bytes_acked": np.array(acked, dtype=np.uint64),
            "delivery_rate": np.full(n, 777_000, dtype=np.uint64),
            "min_rtt": np.full(n, 40_000, dtype=np.uint32),
            "busy_time": np.full(n, 100_000, dtype=np.uint64),
            "bytes_sent": np.array(acked, dtype=np.uint64),
            "bytes_retrans": np.zeros(n, dtype=np.uint64),
        },
    )


def samples(data: report_data.ReportData) -> dict[tuple[str, str, str], int]:
    return {(str(r["pop"]), str(r["cc"]), str(r["size_class"])): int(r["samples"]) for _, r in data.cc_split.iterrows()}


def test_cc_split_compares_switched_and_unswitched_flows_of_treated_prefixes(store: Store) -> None:
    rs.insert(store)
    before = samples(report_data.load(store))
    # treated prefixes after their selection only: bbr polls of both sizes for each POP
    assert {k for k in before if k[1] == "bbr"} == {(p, "bbr", size) for p in rs.POPS for size in ("above", "below")}
    insert_unswitched(store)
    data = report_data.load(store)
    after = samples(data)
    delta = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    assert delta == {("lax", "cubic", "above"): EXTRA // 2, ("lax", "cubic", "below"): EXTRA // 2}
    split = data.cc_split
    bbr_above = split[(split["pop"] == "lax") & (split["cc"] == "bbr") & (split["size_class"] == "above")]
    assert float(bbr_above["p50"].iloc[0]) > 2_000_000  # the treated slow prefixes step up to ~3 MB/s
    page, _ = build_page(data, "cc split")
    assert "Treated prefixes: delivery rate by congestion control" in page


def test_cc_split_is_empty_without_treated_prefixes(store: Store) -> None:
    assert report_data.load(store).cc_split.empty
