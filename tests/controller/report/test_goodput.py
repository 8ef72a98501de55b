"""Goodput from http_requests and the effect queries, against numpy, on ClickHouse 18.16 and chDB."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from controller.report import data as report_data
from controller.report import effects, write_report
from controller.store import Store
from tests.support import report_synth as rs
from tests.support.svg import path_points

T = rs.T0
T_GROUP = T + dt.timedelta(minutes=10, seconds=30)  # the round that puts prefixes in their groups
TREATED = "2001:db8:101:300::/56"
HOLDOUT = "2001:db8:101:400::/56"
OTHER = "198.51.100.0/24"


def section_html(page: str, key: str) -> str:
    m = re.search(rf'<section id="{key}">(.*?)</section>', page, re.S)
    assert m, f"section {key} missing"
    return m.group(1)


def random_requests(rng: np.random.Generator) -> list[rs.HttpRequest]:
    """20 minutes of requests of three prefixes in two POPs, plus rows the goodput leaves out."""
    out = []
    for pop in ("lax", "ord"):
        for prefix in (TREATED, HOLDOUT, OTHER):
            for _ in range(300):
                end = T + dt.timedelta(milliseconds=int(rng.integers(0, 20 * 60_000)))
                size = int(rng.integers(1_048_577, 4_000_000))
                out.append(rs.HttpRequest(end, pop, prefix, 200, size, float(rng.uniform(0.01, 3.0))))
            out.append(rs.HttpRequest(T + dt.timedelta(minutes=3), pop, prefix, 200, 1_048_576, 0.1))  # 1 MiB
            out.append(rs.HttpRequest(T + dt.timedelta(minutes=3), pop, prefix, 206, 2_000_000, 0.1))
            out.append(rs.HttpRequest(T + dt.timedelta(minutes=3), pop, prefix, 200, 2_000_000, 0.0))
            out.append(rs.HttpRequest(T + dt.timedelta(minutes=25), pop, prefix, 200, 2_000_000, 0.1))  # after
            spanning = T_GROUP + dt.timedelta(seconds=1, milliseconds=500)  # started 3.5 s before T_GROUP
            out.append(rs.HttpRequest(spanning, pop, prefix, 200, 2_000_000, 5.0))
    return out


def qualifying(requests: list[rs.HttpRequest]) -> pd.DataFrame:
    df = pd.DataFrame([r.__dict__ for r in requests])
    df = df[(df["status"] == 200) & (df["bytes_sent"] > 1_048_576) & (df["request_time"] > 0)].copy()
    df = df[df["end"] < T + dt.timedelta(minutes=20)]
    df["goodput"] = df["bytes_sent"] / df["request_time"]
    end_s = (df["end"] - dt.datetime(1970, 1, 1)).dt.total_seconds()
    df["ts_s"] = end_s.astype("int64")
    df["end_s"] = df["ts_s"] + df["end"].dt.microsecond // 1000 / 1000.0
    df["start_s"] = df["end_s"] - df["request_time"]
    return df


def rows_by(df: pd.DataFrame, keys: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The rows of `df` by their key columns (pop text, ts as int)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in df.to_dict("records"):
        row = {str(k): (str(v) if k in ("pop", "grp", "prefix", "phase") else v) for k, v in record.items()}
        if "ts" in row:
            row["ts"] = int(row["ts"])
        out[tuple(row[k] for k in keys)] = row
    assert len(out) == len(df), "duplicate keys"
    return out


def window_load(store: Store, bucket: int, until_minutes: int = 20) -> report_data.ReportData:
    return report_data.load(store, since=T, until=T + dt.timedelta(minutes=until_minutes), bucket_seconds=bucket)


@pytest.mark.parametrize("bucket", [60, 300])
def test_goodput_p10_p50_per_pop_per_bucket_equal_numpy(store: Store, bucket: int):
    requests = random_requests(np.random.default_rng(4))
    rs.insert_http(store, requests)
    data = window_load(store, bucket)
    assert data.goodput_source == report_data.GOODPUT_HTTP and data.http_pops == ["lax", "ord"]
    ref = qualifying(requests)
    ref["ts"] = ref["ts_s"] // bucket * bucket
    got = rows_by(data.goodput, ["pop", "ts"])
    expected = ref.groupby(["pop", "ts"])["goodput"]
    assert len(got) == expected.ngroups == 2 * 20 * 60 // bucket
    for (pop, ts), values in expected:
        row = got[(pop, ts)]
        assert int(row["requests"]) == len(values)
        assert float(row["p10"]) == pytest.approx(np.quantile(values, 0.1), rel=1e-9)
        assert float(row["p50"]) == pytest.approx(np.quantile(values, 0.5), rel=1e-9)


def test_goodput_groups_and_effect_input_equal_numpy(store: Store):
    requests = random_requests(np.random.default_rng(8))
    rs.insert_http(store, requests)
    rs.insert_decisions(
        store,
        [
            rs.Decision(T_GROUP, pop, prefix, decision)
            for pop in ("lax", "ord")
            for prefix, decision in ((TREATED, "select"), (HOLDOUT, "holdout"), (OTHER, "skip"))
        ],
    )
    data = window_load(store, 300)
    ref = qualifying(requests)
    grp = ref["prefix"].map({TREATED: "treated", HOLDOUT: "holdout"})
    in_group = ref[grp.notna()].assign(grp=grp[grp.notna()])

    # the time series per group
    in_group["ts"] = in_group["ts_s"] // 300 * 300
    got = rows_by(data.goodput_groups, ["grp", "ts"])
    assert len(got) == 2 * 4
    for (g, ts), values in in_group.groupby(["grp", "ts"])["goodput"]:
        assert float(got[(g, ts)]["p10"]) == pytest.approx(np.quantile(values, 0.1), rel=1e-9)

    # the effect input: a request is before t0 if it ended before, after if it started at or after
    t0 = (T_GROUP - dt.datetime(1970, 1, 1)).total_seconds()
    phase = np.where(in_group["start_s"] >= t0, "after", np.where(in_group["end_s"] < t0, "before", ""))
    spanning = int((phase == "").sum())
    assert spanning >= 4  # requests spanning t0 count in neither phase
    in_group = in_group.assign(phase=phase)[phase != ""]
    stats = rows_by(data.effect_goodput, ["pop", "prefix", "phase"])
    assert len(stats) == 2 * 2 * 2
    for (pop, prefix, ph), values in in_group.groupby(["pop", "prefix", "phase"])["goodput"]:
        row = stats[(pop, prefix, ph)]
        assert int(row["samples"]) == len(values), (pop, prefix, ph)
        assert float(row["value"]) == pytest.approx(np.quantile(values, 0.1), rel=1e-9)

    # the DiD of those p10s is the hand formula on the numpy values
    p10 = in_group.groupby(["pop", "grp", "prefix", "phase"])["goodput"].quantile(0.1)
    logs = {
        g: [np.log(p10[(pop, g, prefix, "after")] / p10[(pop, g, prefix, "before")]) for pop in ("lax", "ord")]
        for g, prefix in (("treated", TREATED), ("holdout", HOLDOUT))
    }
    result = effects.did(data.effect_goodput.assign(pop=data.effect_goodput["pop"].astype(str)))
    assert result.estimate == pytest.approx(np.exp(np.mean(logs["treated"]) - np.mean(logs["holdout"])) - 1, rel=1e-9)


def test_goodput_falls_back_to_busy_time_and_says_so(store: Store, tmp_path):
    synth = rs.insert(store, http=False)
    out = tmp_path / "report.html"
    write_report(store, out)
    page = out.read_text()
    goodput = section_html(page, "goodput")
    assert "fallback: approximate, from busy_time" in goodput
    assert "Fallback: no access-log rows (http_requests) in the report window" in goodput
    for pop in rs.POPS:
        assert path_points(goodput, f"goodput-{pop}-p10") == synth.buckets
    assert "goodput-treated-p10" not in goodput
    did = section_html(page, "did")
    assert "p10 goodput: not computed: no access-log rows" in did and "<h3>p10 goodput</h3>" not in did
    assert "<h3>p10 delivery rate</h3>" in did

    # rows in the window, but none qualifies: no fallback, the section says why it is empty
    end = rs.T0 + dt.timedelta(hours=1)
    rs.insert_http(store, [rs.HttpRequest(end, "lax", rs.prefix_of(0, 0), 404, 900_000, 0.2)])
    write_report(store, out)
    goodput = section_html(out.read_text(), "goodput")
    assert 'data-nodata="goodput"' in goodput and "no response qualifies" in goodput
    assert "No access-log rows in the window for POP(s) ord" in goodput

    store.execute("DROP TABLE http_requests")
    write_report(store, out)
    assert "the store has no http_requests table" in section_html(out.read_text(), "goodput")


def test_delivery_effect_input_splits_at_each_prefix_t0(store: Store):
    """Per prefix and phase: qualifying polls counted from the synthetic shape; the rollup and raw
    300 s buckets agree; 60 s raw buckets split at the same (bucket-aligned) t0."""
    rs.insert(store)
    from controller.report.data import GROUPS, SOURCE_RAW, SOURCE_ROLLUP, compose

    params = {"pop": "", "start": rs.T0, "end": rs.T0 + dt.timedelta(hours=rs.HOURS), "bucket": 300}
    frames = {}
    for label, source, bucket in (("rollup", SOURCE_ROLLUP, 300), ("raw", SOURCE_RAW, 300), ("raw60", SOURCE_RAW, 60)):
        sql = compose("report_effect_delivery", source=source, groups=GROUPS)
        df = store.query_df(sql, {**params, "bucket": bucket})
        frames[label] = (
            df.assign(pop=df["pop"].astype(str)).sort_values(["pop", "prefix", "phase"]).reset_index(drop=True)
        )
    pd.testing.assert_frame_equal(frames["rollup"], frames["raw"], check_dtype=False)
    pd.testing.assert_frame_equal(
        frames["rollup"][["pop", "prefix", "phase", "samples"]],
        frames["raw60"][["pop", "prefix", "phase", "samples"]],
        check_dtype=False,
    )

    def polls(first: int, last: int) -> int:  # qualifying polls of minutes first..last-1
        return 2 * sum(1 for m in range(first, last) if m % rs.SMALL_EVERY != rs.SMALL_EVERY - 1)

    stats = rows_by(frames["rollup"], ["pop", "prefix", "phase"])
    t_select, cohort, end = 90, 135, rs.HOURS * 60
    expected = {
        ("lax", rs.prefix_of(0, 2), "before"): polls(0, t_select),  # holdout at T_SELECT
        ("lax", rs.prefix_of(0, 2), "after"): polls(t_select, end),
        ("lax", rs.prefix_of(0, rs.COHORT_PREFIX), "before"): polls(0, cohort),  # treated at COHORT
        ("lax", rs.prefix_of(0, rs.COHORT_PREFIX), "after"): polls(cohort, end),
    }
    for key, samples in expected.items():
        assert int(stats[key]["samples"]) == samples, key
    treated = rs.prefix_of(0, 0)
    assert 0.85e6 < stats[("lax", treated, "before")]["value"] < 1.15e6
    assert 2.5e6 < stats[("lax", treated, "after")]["value"] < 3.3e6
    assert {key[1] for key in stats} == {
        rs.prefix_of(p, i) for p, pop in enumerate(rs.POPS) for i in (0, 1, 2, rs.COHORT_PREFIX)
    } | {rs.prefix_of(0, rs.LATE_SELECT), rs.prefix_of(1, rs.REVERTED)}
