"""The report's effect figures come from the one effect model (controller/evidence): the headline
equals what `Evidence` and `controller.evidence.summary` give for the same store and window (the
lab's summary prints the same lines), the bucket length is the rounds', the per-prefix table is
bounded; ClickHouse 18.16 and chDB."""

from __future__ import annotations

import datetime as dt
import html
import math
import re

import numpy as np
import pytest

from controller.evidence import summary as evidence_summary
from controller.evidence.load import Evidence, SampleRule, Trial, stored_trials
from controller.evidence.model import summary_line
from controller.evidence.settings import EvidenceSettings
from controller.report import data as report_data
from controller.report import trials as report_trials
from controller.report import write_report
from controller.store import Store
from tests.support import report_synth as rs


def section_html(page: str, key: str) -> str:
    m = re.search(rf'<section id="{key}">(.*?)</section>', page, re.S)
    assert m, f"section {key} missing"
    return m.group(1)


def headline_html(page: str) -> str:
    m = re.search(r'<div class="headline" id="headline">(.*?)</div>', page, re.S)
    assert m, "headline missing"
    return m.group(1)


def cards(page: str) -> dict[str, str]:
    found = re.findall(r'<div class="card"><div class="v">([^<]*)</div><div class="k">([^<]*)</div></div>', page)
    return {html.unescape(k): html.unescape(v) for v, k in found}


def unix(t: dt.datetime) -> int:
    return int(t.replace(tzinfo=dt.UTC).timestamp())


def test_headline_equals_the_effect_model(store: Store, tmp_path):
    synth = rs.insert_trials(store)
    out = tmp_path / "trials.html"
    summary = write_report(store, out)
    page = out.read_text()
    assert summary.window is not None and summary.window.end == synth.end
    assert summary.sections["effect"] and summary.sections["trials"]

    # the effect model on its own, for the same store and window: every trial before the end
    # (all of them ran in this window), buckets of the rounds' spacing, the report's min bytes
    trials = stored_trials(store, synth.end)
    assert len(trials) == len(synth.kind) == 2 * 8
    ev = Evidence.for_window(
        store, EvidenceSettings(), SampleRule(rs.TRIAL_ROUND_S, report_data.MIN_BYTES), trials, unix(synth.end)
    )
    expected = evidence_summary.headline_lines(ev)
    head = headline_html(page)
    shown = [html.unescape(p) for p in re.findall(r"<p>(.*?)</p>", head)]
    assert shown == expected  # text equality of every formatted figure
    force = evidence_summary.in_force(trials)
    assert {t.key for t in force} == {k for k, v in synth.kind.items() if v == "kept"}  # not the expired
    pools = evidence_summary.pools(ev)
    assert summary_line("BBR effect on p10 delivery rate, prefixes in force", pools["delivery in force"]) in shown
    c = cards(page)
    level = "90% interval"
    assert c[f"BBR effect on p10 delivery rate, prefixes in force ({level})"] == pools["delivery in force"].text()
    assert c[f"BBR effect on p10 delivery rate, all trials (unbiased) ({level})"] == pools["delivery all trials"].text()
    assert c[f"BBR effect on p10 goodput, prefixes in force ({level})"] == pools["goodput in force"].text()
    assert c[f"BBR effect on p10 goodput, all trials (unbiased) ({level})"] == pools["goodput all trials"].text()
    assert c["prefixes in force / trials in the window"] == "4 / 16"
    assert "(DiD" not in "".join(c)  # the headline comes from the effect model only

    # the figures hold what the data hold: kept prefixes gained 40-50 %, the pool of all trials
    # (reverted ones lost 30 %) is lower; the mde and the counts are there
    d_force, d_all = pools["delivery in force"], pools["delivery all trials"]
    assert 0.3 < d_force.estimate < 0.6 and d_force.low > 0.2 and d_force.prefixes == 4
    assert d_all.estimate < d_force.estimate and d_all.n_b == 16 and d_all.prefixes == 16
    assert math.isfinite(d_force.mde) and 0 < d_force.mde < 0.2
    assert pools["goodput in force"].ok and pools["goodput in force"].low > 0
    share = ev.app_limited_share()
    assert share == pytest.approx(synth.app_limited / synth.qualifying, abs=0.01)
    assert f"{share:.0%} of qualifying samples" in head
    assert "4 of the prefixes in force by their trial were reverted later" in head

    # the effect section: the pooled table and the plot, in force and all trials, per POP too
    effect = section_html(page, "effect")
    for metric in ("delivery", "goodput"):
        for gid in ("inforce-all", "trials-all", "trials-lax", "inforce-ord"):
            assert f'id="effect-{metric}-{gid}"' in effect
    assert html.escape(d_force.text()) in effect

    # the table of trials: one row per trial, the model's effects, decision and stored reason
    table = section_html(page, "trials")
    rows = re.findall(r"<tr><td>(\w+)</td><td>([^<]+)</td>((?:<td[^>]*>[^<]*</td>)+)</tr>", table)
    assert len(rows) == 16
    by_key = {t.key: t for t in trials}
    for pop, prefix, rest in rows:
        t = by_key[(pop, html.unescape(prefix))]
        cells = [html.unescape(x) for x in re.findall(r"<td[^>]*>([^<]*)</td>", rest)]
        start, blocks, buckets, samples, delivery, goodput, decision, why = cells
        kind = synth.kind[t.key]
        assert start == f"{synth.since[t.key]:%Y-%m-%d %H:%M:%S}"
        assert blocks == ("6 / 6" if kind == "running" else "8 / 8")
        d = ev.effect(t, "delivery")
        assert delivery == d.text() and goodput == ev.effect(t, "goodput").text()
        assert buckets == f"{d.n_a} / {d.n_b}" and samples == f"{d.samples:,}"
        decisions = {"kept": "keep", "reverted": "revert", "running": "running", "expired": "keep, then skip"}
        assert decision == decisions[kind]
        assert why.startswith(t.reason)
    running = [r for r in rows if r[2].count(">running<")]
    assert rows[: len(running)] == running  # newest first

    # the reverted table: the trial reverts with the effect their round judged and the low rates
    reverted = section_html(page, "reverted")
    assert reverted.count("<td>-30% [-40%, -20%]</td>") == 4 and reverted.count("<td>no trial</td>") == 4
    assert reverted.count(" → ") >= 4


def test_bucket_is_the_rounds_spacing(store: Store):
    rs.insert_trials(store, prefixes_per_pop=4, http=False)
    data = report_data.load(store)
    assert data.bucket_seconds == 60  # the plots: auto for a 1 h window
    assert data.trials is not None and data.trials.bucket_seconds == rs.TRIAL_ROUND_S
    assert "spacing of the controller's rounds" in data.trials.bucket_from
    # no access logs: the goodput effects say why, the delivery rate effects do not mind
    t = data.trials.trials[0]
    assert data.trials.evidence.effect(t).ok
    assert not data.trials.evidence.effect(t, "goodput").ok
    # a window with one round per POP: the report's own resolution
    start = rs.TRIAL_FIRST_ROUND - dt.timedelta(seconds=10)
    short = report_data.load(store, since=start, until=start + dt.timedelta(seconds=40))
    assert short.trials is not None and short.trials.bucket_seconds == short.bucket_seconds
    assert "too few controller rounds" in short.trials.bucket_from and short.trials.trials == []


def test_trial_table_is_bounded_and_counts_the_rest(store: Store, tmp_path):
    synth = rs.insert_trials(store, prefixes_per_pop=105, http=False)
    out = tmp_path / "many.html"
    write_report(store, out, pop="")
    table = section_html(out.read_text(), "trials")
    assert len(synth.kind) == 210
    assert table.count("<tr><td>") == report_trials.TRIAL_ROWS
    assert "The newest 200 of 210 trials in the window; 10 older ones are not shown" in table


def trial(prefix: str, since: int, end: int, outcome: str, pop: str = "lax") -> Trial:
    return Trial(pop, prefix, since, end, outcome, "", 4)


def test_which_trials_ran_in_the_window():
    start, end, bucket = 1000, 2000, 30
    trials = [
        trial("a", 100, 900, "keep"),  # ended before the window
        trial("b", 100, 1030, "revert"),  # decided in it
        trial("c", 1500, 1800, "trial"),  # running in it
        trial("d", 500, 980, "trial"),  # its last round less than a bucket before the start
        trial("e", 500, 960, "trial"),  # a bucket before: not running in the window any more
        trial("f", 2000, 2100, "keep"),  # after it
    ]
    assert [t.prefix for t in report_trials.in_window(trials, start, end, bucket)] == ["b", "d", "c"]  # oldest first


def test_spacing_is_the_median_round_gap():
    assert report_trials.spacing({}) is None
    assert report_trials.spacing({"lax": [100]}) is None
    # a missed round and a re-run do not move the median; two POPs pool their gaps
    assert report_trials.spacing({"lax": [0, 30, 60, 120, 150, 150], "ord": [5, 35, 65]}) == 30
    assert report_trials.spacing({"lax": [0, 300, 600, 900]}) == 300


def test_default_window_takes_in_a_round_at_the_end_of_the_data(store: Store):
    """A lab's last round runs at the boundary its last bucket of data ends on: the default window
    ends after that round, so its decisions (a running trial's last block) are in the report, as
    they are in the lab's summary."""
    rs.insert_trials(store, prefixes_per_pop=2, http=False)
    span = report_data.data_span(store, "")
    assert span is not None
    boundary = span[1] + report_data.BUCKET  # the end of the last 5-minute bucket with data
    ns = int(boundary.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000_000
    store.insert_columns(
        "round_outcomes",
        {
            "round_id": ["r-last"],
            "round_time": np.array([np.datetime64(boundary, "s")]),
            "round_time_ns": np.array([ns], dtype="uint64"),
            "pop": ["lax"],
            "recorded_ns": np.array([ns], dtype="uint64"),
            "status": ["published"],
            "version": np.array([1], dtype="uint64"),
            "prefixes": np.array([0], dtype="uint32"),
            "reason": [""],
        },
    )
    after = report_data.data_span(store, "")
    assert after is not None and after[1] == boundary
    window = report_data.default_window(after, None, None)
    assert window is not None and window.end == boundary + report_data.BUCKET
    assert report_data.data_span(store, "nowhere") is None  # no telemetry for the POP: no window
