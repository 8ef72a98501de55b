"""`dyncc report` and sql/views on real ClickHouse 18.16 and chDB with a synthetic dataset."""

from __future__ import annotations

import datetime as dt
import re

import pandas as pd
import pytest

from controller.report import write_report
from controller.report.asn import parse_asn_rows
from controller.store import Store
from dyncc.cli import main
from tests.support import report_synth as rs
from tests.support.svg import path_points
from tests.support.view_data import view_query

SECTIONS = ("delivery", "selections", "effect", "trials", "reverted", "treated", "did", "isp", "goodput", "bbrshare")
TRIAL_SECTIONS = ("effect", "trials")  # the effect model's: no data without trials
VIEWS = (
    "delivery_rate_percentiles_by_pop",
    "new_selections_per_round",
    "bbr_share_of_sockets",
    "treated_vs_holdout",
    "goodput_p10_by_pop",
    "config_versions_annotations",
)


def assert_self_contained(page: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "<script" not in page.lower() and "<link" not in page.lower() and "@import" not in page


def section_html(page: str, key: str) -> str:
    m = re.search(rf'<section id="{key}">(.*?)</section>', page, re.S)
    assert m, f"section {key} missing"
    return m.group(1)


def test_report_on_synthetic_data(store: Store, tmp_path):
    synth = rs.insert(store)
    asn = parse_asn_rows([["198.51.0.0/16", "64500", "Example Cable"], ["198.52.0.0/16", "64501", "Other"]])
    out = tmp_path / "report.html"
    summary = write_report(store, out, asn_table=asn, title="Lab <report>")
    page = out.read_text()
    # this dataset predates trials: the effect model's sections say there is none
    assert summary.sections == {key: key not in TRIAL_SECTIONS for key in SECTIONS}
    assert summary.pops == list(rs.POPS)
    assert summary.window is not None and summary.window.start == rs.T0
    assert_self_contained(page)
    assert "Lab &lt;report&gt;" in page
    assert re.findall(r'data-nodata="(\w+)"', page) == list(TRIAL_SECTIONS)
    assert "No trial ran in the report window" in section_html(page, "effect")
    assert "n/a (no prefix to pool; 0 trials, 0 samples)" in page  # the headline says so too
    assert "(DiD" not in page.split('<section id="delivery">')[0]  # the headline is the model's only
    assert out.stat().st_mode & 0o777 == 0o644

    delivery = section_html(page, "delivery")
    for pop in rs.POPS:
        for pct in ("p5", "p10", "p50"):
            assert path_points(delivery, f"delivery-{pop}-{pct}") == synth.buckets
    # config versions: published ones marked, the rejected one (ord v2) not
    assert delivery.count(">v1<") == 2 and delivery.count(">v2<") == 1

    selections = section_html(page, "selections")
    for pop in rs.POPS:
        bars = re.findall(rf'<g id="selections-{pop}-\d+">', selections)
        assert len(bars) == len(synth.rounds)
    new_total = {pop: sum(n for (p, _), n in synth.new_per_round.items() if p == pop) for pop in rs.POPS}
    assert new_total == {"lax": 4, "ord": 3}
    for pop in rs.POPS:
        assert re.search(rf"<td>{pop}</td><td>{len(synth.rounds)}</td><td>{new_total[pop]}</td>", selections)

    treated = section_html(page, "treated")
    assert path_points(treated, "treated-treated-p10") == synth.buckets
    assert path_points(treated, "treated-holdout-p10") == synth.buckets
    # treated p10 roughly tripled (1 -> 3 MB/s), holdout flat: signs in the table
    change = dict(re.findall(r"<td>(treated|holdout)</td>.*?<td[^>]*>([+-][\d.]+)%</td>", treated))
    assert float(change["treated"]) > 100 and abs(float(change["holdout"])) < 15

    isp = section_html(page, "isp")
    assert path_points(isp, "isp-0-p10") == synth.buckets and path_points(isp, "isp-1-p10") == synth.buckets
    assert "AS64500 Example Cable" in isp
    goodput = section_html(page, "goodput")
    assert "Goodput (HTTP requests)" in goodput and "Fallback" not in goodput
    for pop in rs.POPS:
        for pct in ("p10", "p50"):
            assert path_points(goodput, f"goodput-{pop}-{pct}") == synth.buckets
        assert path_points(section_html(page, "bbrshare"), f"bbrshare-{pop}") == synth.buckets
    for grp in ("treated", "holdout"):
        assert path_points(goodput, f"goodput-{grp}-p10") == synth.buckets

    # the population check (DiD): per POP and over all POPs, for both metrics; a real effect on both
    did = section_html(page, "did")
    for metric in ("delivery", "goodput"):
        assert path_points(did, f"did-{metric}-lax") == 1  # one holdout prefix: no interval
        for scope in ("ord", "all"):
            assert path_points(did, f"did-{metric}-{scope}") == 2
    assert did.count("no interval: the holdout group has one prefix") == 2
    rows = re.findall(r"<tr><td>all POPs</td><td[^>]*>([+-][\d.]+)%</td><td[^>]*>([+-][\d.]+)% … ([+-][\d.]+)%", did)
    assert len(rows) == 2
    for est, lo, hi in rows:
        assert 0 < float(lo) < float(est) < float(hi) and 50 < float(est) < 150

    reverted = section_html(page, "reverted")
    row = r"<td>ord</td><td>198\.52\.5\.0/24</td><td>84 Mbit/s → 67.2 Mbit/s</td><td>no trial</td>"
    assert re.search(row, reverted)
    assert "negative effect: low rate 84.00 Mbit/s -&gt; 67.20 Mbit/s" in reverted

    # --pop filter: only that POP's lines
    one = write_report(store, tmp_path / "lax.html", pop="lax")
    lax_page = (tmp_path / "lax.html").read_text()
    assert one.pops == ["lax"] and "delivery-ord-p10" not in lax_page and "delivery-lax-p10" in lax_page
    # without an ASN file the ISP section explains how to enable it
    assert "--asn-file" in section_html(lax_page, "isp") and not one.sections["isp"]


def test_report_on_empty_store(store: Store, tmp_path):
    out = tmp_path / "empty.html"
    summary = write_report(store, out, asn_file=None)
    page = out.read_text()
    assert summary.window is None and not any(summary.sections.values())
    assert_self_contained(page)
    for key in SECTIONS:
        assert f'data-nodata="{key}"' in section_html(page, key)
    assert "<svg" not in page
    # an explicit window on an empty store also renders
    since = dt.datetime(2024, 1, 1)
    summary = write_report(store, out, since=since, until=since + dt.timedelta(hours=1))
    assert summary.window is not None and not any(summary.sections.values())


def test_report_cli(store_url: str, store: Store, tmp_path, capsys):
    rs.insert(store)
    out = tmp_path / "cli.html"
    argv = ["report", "--clickhouse", store_url, "-o", str(out), "--since", "1h", "--pop", "ord", "--bucket", "5m"]
    assert main(argv) == 0
    line = capsys.readouterr().out
    assert "10/10" not in line and str(out) in line  # no ASN file: the ISP section is not drawn
    page = out.read_text()
    assert path_points(section_html(page, "delivery"), "delivery-ord-p10") == 12  # the last hour


def test_report_cli_errors(tmp_path, capsys):
    out = tmp_path / "x.html"
    assert main(["report", "--clickhouse", "clickhouse://default:@127.0.0.1:1/db", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dyncc report:") and "\n" not in err and not out.exists()
    assert main(["report", "--clickhouse", "nosuch://x", "-o", str(out)]) == 2
    assert main(["report", "--clickhouse", "clickhouse://h/db", "--since", "soon", "-o", str(out)]) == 2
    assert (
        main(["report", "--clickhouse", "clickhouse://h/db", "--asn-file", str(tmp_path / "none.csv"), "-o", str(out)])
        == 2
    )
    assert "none.csv" in capsys.readouterr().err


def test_short_window_uses_raw_buckets(store: Store, tmp_path):
    """Windows under 2 h (an accelerated lab) are drawn from raw tcpinfo in finer buckets."""
    synth = rs.insert(store)
    start = rs.T0 + dt.timedelta(hours=2)
    out = tmp_path / "short.html"
    summary = write_report(store, out, since=start, until=start + dt.timedelta(minutes=30))
    assert summary.sections["delivery"] and summary.sections["bbrshare"]
    page = out.read_text()
    # 30 s buckets; polls at :10 (half the bytes) and :30 of every minute; small-flow minutes
    # have no qualifying sample, so their two buckets are missing
    minutes = range(120, 150)
    expected = 2 * sum(1 for m in minutes if m % rs.SMALL_EVERY != rs.SMALL_EVERY - 1)
    assert path_points(section_html(page, "delivery"), "delivery-lax-p10") == expected
    assert path_points(section_html(page, "bbrshare"), "bbrshare-ord") == 60
    assert "per 30\u00a0s" in page and synth.buckets == 36
    # the DiD: only the cohort entering its groups at rs.COHORT has data before and after in this
    # window, one treated prefix in lax and one holdout in ord: an estimate over both POPs, no interval
    did = section_html(page, "did")
    assert summary.sections["did"] and path_points(did, "did-delivery-all") == 1
    assert did.count("no interval: the treated and holdout groups have one prefix") == 2
    assert "no before data: every holdout prefix entered its group before the window" in did
    assert summary.sections["reverted"] and rs.prefix_of(1, rs.REVERTED) in section_html(page, "reverted")


@pytest.fixture
def synth_store(store: Store) -> tuple[Store, rs.Synth]:
    return store, rs.insert(store)


def run_view(store: Store, name: str):
    end = rs.T0 + dt.timedelta(hours=rs.HOURS)
    return store.query_df(view_query(name, rs.T0, end))


def test_views_run_and_return_expected_rows(synth_store):
    store, synth = synth_store
    results = {name: run_view(store, name) for name in VIEWS}
    for name, df in results.items():
        assert "time" in df.columns, name

    delivery = results["delivery_rate_percentiles_by_pop"]
    assert len(delivery) == synth.buckets * len(rs.POPS)
    assert (delivery["p5"] <= delivery["p10"]).all() and (delivery["p10"] <= delivery["p50"]).all()

    sel = results["new_selections_per_round"]
    got = {(str(r.pop), r.time.to_pydatetime()): int(r.new_selected) for r in sel.itertuples()}
    assert got == synth.new_per_round

    share = results["bbr_share_of_sockets"]
    assert len(share) == synth.buckets * len(rs.POPS)
    before = share[share["time"] < rs.T_SELECT]["bbr_share"]
    after = share[share["time"] >= rs.T_SELECT]["bbr_share"]
    assert (before == 0).all() and len(after) > 0
    assert after.round(6).eq(len(rs.TREATED) / rs.PREFIXES_PER_POP).all()

    tvh = results["treated_vs_holdout"]
    assert len(tvh) == synth.buckets * 2
    holdout = tvh[tvh["grp"] == "holdout"]["p10"]
    treated_after = tvh[(tvh["grp"] == "treated") & (tvh["time"] >= rs.T_SELECT)]["p10"]
    treated_before = tvh[(tvh["grp"] == "treated") & (tvh["time"] < rs.T_SELECT)]["p10"]
    assert holdout.between(0.85e6, 1.15e6).all()
    assert treated_before.between(0.85e6, 1.15e6).all() and (treated_after > 2.5e6).all()

    goodput = results["goodput_p10_by_pop"]
    assert len(goodput) == synth.buckets * len(rs.POPS) and (goodput["p10_goodput"] > 0.8e6).all()

    notes = results["config_versions_annotations"]
    assert sorted(notes["text"]) == ["lax v1: 2 prefixes", "lax v2: 3 prefixes", "ord v1: 2 prefixes"]


def test_raw_and_rollup_sources_agree_on_five_minute_buckets(synth_store):
    """report_source_raw.sql in 300 s buckets gives what report_source_rollup.sql reads."""
    from controller.report.data import GROUPS, SOURCE_RAW, SOURCE_ROLLUP, compose

    store, synth = synth_store
    end = rs.T0 + dt.timedelta(hours=rs.HOURS)
    params = {"pop": "", "start": rs.T0, "end": end, "bucket": 300, "split": 1}
    for name, slots in (("report_delivery_by_pop", {}), ("report_treated_vs_holdout", {"groups": GROUPS})):
        rollup = store.query_df(compose(name, source=SOURCE_ROLLUP, **slots), params)
        raw = store.query_df(compose(name, source=SOURCE_RAW, **slots), params)
        assert len(rollup) >= synth.buckets * 2, name
        key = [c for c in ("pop", "grp", "ts", "phase") if c in rollup.columns]
        rollup, raw = (df.sort_values(key).reset_index(drop=True) for df in (rollup, raw))
        pd.testing.assert_frame_equal(rollup, raw, check_dtype=False, obj=name)
    split = store.query_df(compose("report_treated_vs_holdout", source=SOURCE_RAW, groups=GROUPS), params)
    t_select = int(rs.T_SELECT.replace(tzinfo=dt.UTC).timestamp())
    treated = split[split["grp"] == "treated"]
    assert set(treated["phase"]) == {"before", "after"}
    assert (treated[treated["phase"] == "after"]["ts"].astype("int64") >= t_select).all()
    series = store.query_df(
        compose("report_treated_vs_holdout", source=SOURCE_RAW, groups=GROUPS), {**params, "split": 0}
    )
    assert set(series["phase"]) == {""} and len(series) == synth.buckets * 2
