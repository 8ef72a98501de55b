"""The lab's summary judges the trials on the bucket length the report reads: what the run's
rounds recorded (round_settings), its own run.bucket_s only when they recorded none; and the
lab's controller records its round length.  ClickHouse 18.16 and chDB."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from controller.evidence.load import SampleRule
from controller.evidence.settings import EvidenceSettings
from controller.report import data as report_data
from controller.scoring.round_settings import write_round_settings
from controller.scoring.settings import ScoringSettings
from controller.store import Store
from dyncc.lab.control import LabControl
from dyncc.lab.model import ControlOutcome
from dyncc.lab.outcomes import RoundView
from dyncc.lab.run import RunRecord, evidence_bucket, summary_rule
from tests.support import scoring_synth as synth

T0 = dt.datetime(2024, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def run_record(rounds: list[dt.datetime], bucket_s: int) -> RunRecord:
    views = [RoundView(k + 1, int(t.timestamp()), ControlOutcome({}, {})) for k, t in enumerate(rounds)]
    return RunRecord({}, {}, {}, views, [{} for _ in rounds], bucket_s=bucket_s)


def test_the_summary_reads_the_recorded_bucket_as_the_report_does(store: Store) -> None:
    rounds = [T0 + dt.timedelta(seconds=20 * k) for k in range(6)]
    run = run_record(rounds, bucket_s=21)  # e.g. a live run whose rounds drifted
    assert evidence_bucket(store, run) == 21  # nothing recorded: the run's own
    cfg = ScoringSettings(bucket_seconds=20, lookback_seconds=160, min_buckets=4)
    for t in rounds:
        ns = int(t.timestamp()) * 1_000_000_000
        write_round_settings(store, ["lab-a"], f"r{t:%H%M%S}", ns, cfg, EvidenceSettings())
    assert evidence_bucket(store, run) == 20
    naive = [t.replace(tzinfo=None) for t in rounds]
    window = report_data.Window(naive[0], naive[-1] + dt.timedelta(seconds=1))
    assert report_data.round_bucket(store, "", window) == (20, report_data.RECORDED_BUCKET)


def test_the_summary_counts_the_samples_the_rounds_counted(store: Store) -> None:
    """The effect model's sample rule is the rounds' scoring (min bytes, app-limited), not a constant."""
    rounds = [T0 + dt.timedelta(seconds=20 * k) for k in range(3)]
    scoring = ScoringSettings(
        bucket_seconds=20, lookback_seconds=160, min_buckets=4, min_bytes=5000, include_app_limited=True
    )
    run = run_record(rounds, bucket_s=20)
    assert summary_rule(store, run) == SampleRule(20, ScoringSettings().min_bytes, False)  # no scoring: defaults
    run = RunRecord({}, {}, {}, run.rounds, run.new_sockets, bucket_s=20, scoring=scoring)
    assert summary_rule(store, run) == SampleRule(20, 5000, True)
    assert SampleRule.of(scoring, bucket_seconds=15) == SampleRule(15, 5000, True)


def test_the_lab_controller_records_its_round_length(store: Store, tmp_path: Path) -> None:
    """A replay-like LabControl (no agents, configs to a directory) on 20 s rounds."""
    start = int(T0.timestamp()) - 8 * 20
    patterns = {f"198.51.{i}.0/24": synth.NORMAL for i in range(8)} | {"203.0.113.0/24": synth.STEADY_BAD}
    synth.insert_samples(store, synth.samples_frame("lab-a", patterns, start, 8, bucket_seconds=20))
    scoring = ScoringSettings(bucket_seconds=20, lookback_seconds=160, min_buckets=4, min_samples=2)
    control = LabControl(store, scoring=scoring, workdir=tmp_path, hosts={"lab-a": ["edge-1"]}, staged=False)
    control.round(T0, 1)
    rows = store.query_rows("SELECT pop, bucket_seconds, lookback_seconds FROM round_settings")
    assert [(str(p), int(b), int(lb)) for p, b, lb in rows] == [("lab-a", 20, 160)]
    assert evidence_bucket(store, run_record([T0], bucket_s=20)) == 20
