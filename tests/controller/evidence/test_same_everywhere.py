"""One store, one window: the lab's summary, the report's headline and `dyncc control explain`
print the same effect figures, because all three call the one effect model
(controller/evidence).  ClickHouse 18.16 and chDB, on the report's synthetic trials."""

from __future__ import annotations

import datetime as dt
import html
import re

from controller.evidence.load import Evidence, SampleRule, stored_trials
from controller.evidence.settings import EvidenceSettings
from controller.evidence.summary import headline_lines
from controller.report import write_report
from controller.scoring.explain import trial_lines
from controller.scoring.settings import ScoringSettings
from controller.store import Store
from dyncc.lab.model import ControlOutcome
from dyncc.lab.outcomes import RoundView
from dyncc.lab.run import RunRecord, summarize_run
from tests.support import report_synth as rs


def _unix(t: dt.datetime) -> int:
    return int(t.replace(tzinfo=dt.UTC).timestamp())


def test_lab_summary_report_and_explain_print_the_same_figures(store: Store, tmp_path) -> None:
    synth = rs.insert_trials(store)
    # the report's headline
    write_report(store, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    head = re.search(r'<div class="headline" id="headline">(.*?)</div>', page, re.S)
    assert head
    report_lines = [html.unescape(p) for p in re.findall(r"<p>(.*?)</p>", head.group(1))]

    # the lab's summary of a run with the same rounds (its evidence lines)
    rounds = [RoundView(k + 1, _unix(t), ControlOutcome({}, {})) for k, t in enumerate(synth.rounds)]
    keys = [k for k in synth.kind]
    run = RunRecord(
        classes={p: "lossy" for _, p in keys},
        pops={p: pop for pop, p in keys},
        hosts={pop: [] for pop in rs.POPS},
        rounds=rounds,
        new_sockets=[{} for _ in rounds],
        bucket_s=rs.TRIAL_ROUND_S,
    )
    lab = summarize_run(run, "lab", store)
    assert lab.evidence and lab.evidence == report_lines

    # explain: each trial's figure is the effect model's for that trial
    cfg = ScoringSettings(bucket_seconds=rs.TRIAL_ROUND_S, lookback_seconds=8 * rs.TRIAL_ROUND_S, min_buckets=4)
    trials = stored_trials(store, synth.end)
    ev = Evidence.for_window(store, EvidenceSettings(), SampleRule.of(cfg), trials, _unix(synth.end))
    for t in trials[:4]:
        text = "\n".join(trial_lines(store, cfg, EvidenceSettings(), t.pop, t.prefix, synth.end.replace(tzinfo=dt.UTC)))
        assert f"p10 delivery rate {ev.effect(t).text()}" in text
        assert f"p10 goodput {ev.effect(t, 'goodput').text()}" in text
    assert headline_lines(ev)[1] == report_lines[1]  # in force: the same trials, the same pool
