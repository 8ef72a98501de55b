"""`dyncc report` on a fleet: two POPs of many prefixes in every figure, the prefix->ASN file the
lab writes, the DiD against the effect the data hold, and the reverted-prefix table (ClickHouse
18.16 and chDB)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re

import pytest

from controller.report import data as report_data
from controller.report import write as report_write
from controller.report import write_report
from controller.report.asn import load_asn_file
from controller.report.effects import ALL
from controller.store import Store
from dyncc.cli import main
from tests.support import report_synth as rs
from tests.support.svg import path_points

PREFIXES = 120


def section_html(page: str, key: str) -> str:
    m = re.search(rf'<section id="{key}">(.*?)</section>', page, re.S)
    assert m, f"section {key} missing"
    return m.group(1)


def test_fleet_report_every_figure_has_both_pops(store_url: str, store: Store, tmp_path):
    fleet = rs.insert_fleet(store, PREFIXES)
    asn_file = tmp_path / "asn.csv"
    asn_file.write_text(rs.fleet_asn_csv(PREFIXES))
    table = load_asn_file(asn_file)
    assert table.malformed == 0 and table.entries == 18
    assert rs.fleet_prefix(0, 3) == "2001:db8:0:300::/56" and table.lookup("2001:db8:0:300::/56") == "AS64496 Lab ISP 0"
    assert table.lookup(rs.fleet_prefix(0, 17)) == "AS64497 Lab ISP 1"
    assert table.lookup("203.0.113.0/24") == "AS64497 Lab ISP 1"
    out = tmp_path / "fleet.html"
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert main(["report", "--clickhouse", store_url, "-o", str(out), "--asn-file", str(asn_file)]) == 0
    assert "8/10 sections with data" in said.getvalue()  # the fleet predates trials: no effect-model figures
    page = out.read_text()
    assert re.findall(r'data-nodata="(\w+)"', page) == ["effect", "trials"]
    buckets = rs.HOURS * 12

    delivery = section_html(page, "delivery")
    for pop in rs.POPS:
        for pct in ("p5", "p10", "p50"):
            assert path_points(delivery, f"delivery-{pop}-{pct}") == buckets
    for version in ("v1", "v2", "v3"):  # marked in each POP's panel
        assert delivery.count(f">{version}<") == 2
    selections = section_html(page, "selections")
    for pop in rs.POPS:
        assert len(re.findall(rf'<g id="selections-{pop}-\d+">', selections)) == len(fleet.rounds)
        treated = sum(1 for t0 in fleet.treated[pop].values())
        assert re.search(rf"<td>{pop}</td><td>{len(fleet.rounds)}</td><td>{treated}</td>", selections)
    isp = section_html(page, "isp")
    for k in range(report_data.ISP_TOP):  # the 8 largest of the 16 documentation ASNs
        assert path_points(isp, f"isp-{k}-p10") == buckets
    assert "AS64496 Lab ISP 0" in isp and "16 prefix→ASN entries read" not in isp
    goodput = section_html(page, "goodput")
    for pop in rs.POPS:
        assert path_points(goodput, f"goodput-{pop}-p10") == buckets
        assert path_points(section_html(page, "bbrshare"), f"bbrshare-{pop}") == buckets
    for grp in ("treated", "holdout"):
        assert path_points(goodput, f"goodput-{grp}-p10") == buckets
        assert path_points(section_html(page, "treated"), f"treated-{grp}-p10") == buckets
    did = section_html(page, "did")
    for metric in ("delivery", "goodput"):
        for scope in (*rs.POPS, "all"):
            assert path_points(did, f"did-{metric}-{scope}") == 2
    reverted = section_html(page, "reverted")
    shown = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d \d\d:\d\d)</td><td>(\w+)</td><td>([^<]+)</td>", reverted)
    assert sorted((pop, prefix) for _, pop, prefix in shown) == sorted(
        (pop, prefix) for pop in rs.POPS for prefix in fleet.reverted[pop]
    )
    assert reverted.count("negative effect: low rate (x0.80, holdout x1.00)") == len(shown)


def test_fleet_did_finds_the_effect_the_data_hold(store: Store):
    """Per POP and over both: the estimate is near exp(mean ln m | treated - ...) - 1 and its
    interval holds it, though every rate drifted by 10 % meanwhile (which the holdout shows)."""
    fleet = rs.insert_fleet(store, PREFIXES)
    data = report_data.load(store)
    results = report_write.effects(data)
    assert set(results) == {"delivery", "goodput"}
    for metric, dids in results.items():
        assert [d.scope for d in dids] == [*rs.POPS, ALL]
        for d in dids:
            pops = rs.POPS if d.scope == ALL else (d.scope,)
            expected = fleet.expected_did(pops)
            assert d.ok and d.ci_low is not None and d.ci_high is not None and d.estimate is not None
            assert d.ci_low < expected < d.ci_high, (metric, d)
            assert abs(d.estimate - expected) < 0.05, (metric, d)
            assert d.ci_low > 0.1  # clearly positive
            assert d.holdout.change == pytest.approx(rs.FLEET_DRIFT - 1, abs=0.04), (metric, d)
            assert d.treated.prefixes == sum(len(fleet.treated[p]) for p in pops)
            assert d.holdout.prefixes == sum(len(fleet.holdout[p]) for p in pops)


def test_reverted_table_newest_first_bounded_and_counted(store: Store, tmp_path):
    """Only published rounds count, a re-run round at the same time once, the newest
    REVERTED_LIMIT rows are shown and the rest counted."""
    start = rs.T0
    decisions = []
    for k in range(60):
        t = start + dt.timedelta(minutes=5 * (k // 2))
        decisions.append(
            rs.Decision(
                t,
                rs.POPS[k % 2],
                f"2001:db8:{k:x}::/56",
                "revert",
                reason=f"negative effect #{k}",
                effect=0.7,
                holdout_effect=1.05,
                baseline_low_rate=2e6,
                low_delivery_rate=1.4e6,
            )
        )
    newest = decisions[-1]
    rerun = rs.Decision(newest.round_time, newest.pop, newest.prefix, "revert", round_id="rerun", reason="again")
    rejected = rs.Decision(start + dt.timedelta(hours=3), "lax", "198.51.100.0/24", "revert", round_id="bad")
    rs.insert_decisions(store, [*decisions, rerun, rejected], status={"bad": "rejected"})
    out = tmp_path / "reverted.html"
    summary = write_report(store, out, since=start, until=start + dt.timedelta(hours=4))
    assert summary.sections["reverted"]
    reverted = section_html(out.read_text(), "reverted")
    rows = re.findall(r"<tr><td>([^<]+)</td><td>(\w+)</td><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>", reverted)
    assert len(rows) == report_data.REVERTED_LIMIT
    assert [r[0] for r in rows] == sorted((r[0] for r in rows), reverse=True)  # newest first
    assert [r[2] for r in rows].count(newest.prefix) == 1  # the re-run round counts once
    assert "198.51.100.0/24" not in reverted  # the rejected round changed nothing
    assert rows[-1][2] == decisions[10].prefix or rows[-1][2] == decisions[11].prefix
    assert "The newest 50 of 60 reverts in the window; 10 older ones are not shown." in reverted
    assert rows[2][3] == "16 Mbit/s → 11.2 Mbit/s" and rows[2][4] == "no trial"
    assert "negative effect #58" in reverted
