"""The bucket length the report judges the trials on: the bucket_seconds the controller's rounds
in the window recorded (round_settings, sql/migrations/011) when they did, the median spacing of
the rounds when they did not (the lab's summary reads the same: tests/dyncc/lab/
test_summary_bucket.py); ClickHouse 18.16 and chDB."""

from __future__ import annotations

import datetime as dt

from controller.evidence.load import recorded_bucket
from controller.evidence.settings import EvidenceSettings
from controller.report import data as report_data
from controller.scoring.round_settings import write_round_settings
from controller.scoring.settings import ScoringSettings
from controller.store import Store
from tests.support import report_synth as rs


def record(store: Store, rounds: list[dt.datetime], bucket: int, pops: tuple[str, ...] = ("lax", "ord")) -> None:
    cfg = ScoringSettings(bucket_seconds=bucket, lookback_seconds=bucket * 8, min_buckets=4)
    for t in rounds:
        ns = int(t.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000_000
        write_round_settings(store, pops, f"r{t:%H%M%S}", ns, cfg, EvidenceSettings())


def test_the_report_takes_the_recorded_bucket(store: Store) -> None:
    synth = rs.insert_trials(store, prefixes_per_pop=4, http=False)
    before = report_data.load(store)
    assert before.trials is not None and before.trials.bucket_from == report_data.ROUND_SPACING
    assert before.trials.bucket_seconds == rs.TRIAL_ROUND_S

    # the rounds recorded 45 s buckets (not their spacing of 30 s): the recorded length wins,
    # the one most rounds used; two rounds recorded 90 s
    record(store, synth.rounds[2:], 45)
    record(store, synth.rounds[:2], 90)
    after = report_data.load(store)
    assert after.trials is not None and after.window is not None
    assert after.trials.bucket_seconds == 45 and after.trials.bucket_from == report_data.RECORDED_BUCKET
    assert report_data.round_bucket(store, "ord", after.window) == (45, report_data.RECORDED_BUCKET)
    start, end = synth.rounds[0], synth.rounds[1] + dt.timedelta(seconds=1)
    assert recorded_bucket(store, "", start, end) == 90  # only the two 90 s rounds in that window
    assert recorded_bucket(store, "nowhere", start, end) is None
