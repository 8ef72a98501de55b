"""Rounds record their settings (round_settings, sql/migrations/011) and `dyncc control explain`
uses them: the settings of the latest round that decided the prefix unless scoring options are
given, and it says which; an unknown prefix is one line, exit 2.  `--once` exits 1 when the
publisher could publish nothing, even with no POP to publish.  ClickHouse 18.16 and chDB."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from controller.evidence.settings import EvidenceSettings
from controller.rollout.publish import Publisher
from controller.rollout.sinks import PublishError
from controller.scoring.explain import COMMAND_LINE, ExplainWith, choose_settings
from controller.scoring.round_settings import (
    SettingsUnreadable,
    deciding_round,
    recorded_settings,
    settings_from_json,
    settings_json,
)
from controller.scoring.settings import ScoringSettings
from controller.store import Store
from dyncc.cli import main as dyncc_main
from dyncc_common.version import dyncc_version
from tests.support import scoring_synth as synth
from tests.support.rollout_util import make_keys

POP = "lax"
START = int(dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC).timestamp())  # 36 buckets: 09:00-12:00
AT = "2024-03-01T12:00:30Z"
LATER = "2024-03-01T12:01:00Z"
SPARSE = "203.0.113.0/24"  # 3 qualifying samples a bucket: the defaults (5) never count it
# what the rounds of this store ran with: a 2 h lookback, 2 samples count a bucket, 6 buckets score
RECORDED = ["--lookback", "2h", "--min-bucket-samples", "2", "--min-buckets", "6", "--holdout", "0"]
RECORDED += ["--trial-blocks", "0", "--expire", "2d"]


def insert(store: Store) -> None:
    patterns = {f"198.51.{i}.0/24": synth.NORMAL for i in range(20)} | {SPARSE: synth.TOO_FEW}
    synth.insert_samples(store, synth.samples_frame(POP, patterns, START, 36))


def explain(url: str, capsys: pytest.CaptureFixture[str], *options: str, at: str = LATER) -> tuple[int, str, str]:
    argv = ["control", "--clickhouse", url, *options, "explain", "--pop", POP, "--prefix", SPARSE, "--at", at]
    code = dyncc_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_explain_uses_the_settings_the_deciding_round_recorded(
    store: Store, store_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    insert(store)
    assert dyncc_main(["control", "--clickhouse", store_url, "--once", "--at", AT, *RECORDED]) == 0
    capsys.readouterr()

    # one row per POP of the round, with every setting it scored and decided with
    rows = store.query_rows(
        "SELECT round_id, pop, bucket_seconds, lookback_seconds, expire_seconds, scoring, evidence, dyncc_version "
        "FROM round_settings"
    )
    assert len(rows) == 1
    round_id, pop, bucket, lookback, expire, scoring, evidence, version = rows[0]
    assert (str(pop), int(bucket), int(lookback), int(expire)) == (POP, 300, 7200, 2 * 86400)
    values = json.loads(str(scoring))
    assert values["min_samples"] == 2 and values["min_buckets"] == 6 and values["holdout_fraction"] == 0.0
    assert values["expire_seconds"] == 2 * 86400  # a scoring setting, also in its own column
    assert "holdout_salt" not in values  # not a setting
    assert json.loads(str(evidence))["trial_blocks"] == 0 and str(version) == dyncc_version()
    assert deciding_round(store, POP, SPARSE, dt.datetime(2024, 3, 1, 12, 1, tzinfo=dt.UTC)) is not None
    recorded = recorded_settings(store, POP, str(round_id))
    assert recorded is not None and recorded.scoring.min_buckets == 6 and recorded.scoring.expire_seconds == 2 * 86400
    assert recorded.evidence == EvidenceSettings(trial_blocks=0)

    # no option given: the round's settings, and the output says so
    code, out, _ = explain(store_url, capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[1] == f"settings of round {round_id} at 2024-03-01 12:00:30 UTC"
    assert "24 buckets of 300 s" in lines[2]
    assert "a bucket counts with >= 2 qualifying samples" in out
    assert "scores: counted 24 of 24 buckets (needs 6)" in out

    # long after the round (a finished lab): the same settings, and the --at that explains the round
    code, out, _ = explain(store_url, capsys, at="2024-03-01T15:00:00Z")
    assert code == 0 and out.splitlines()[1] == (
        f"settings of round {round_id} at 2024-03-01 12:00:30 UTC (older than the window: "
        "--at 2024-03-01T12:00:30Z explains it in its own)"
    )

    # an option given: the command line's settings (the production defaults besides it)
    code, out, _ = explain(store_url, capsys, "--min-buckets", "10")
    assert code == 0
    assert out.splitlines()[1] == COMMAND_LINE
    assert "36 buckets of 300 s" in out and "scores: counted 0 of 36 buckets (needs 10)" in out

    # ... also after `explain`
    argv = ["control", "--clickhouse", store_url, "explain", "--pop", POP, "--prefix", SPARSE, "--at", LATER]
    assert dyncc_main([*argv, "--lookback", "1h", "--min-buckets", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == COMMAND_LINE and "scores: counted 0 of 12 buckets (needs 2)" in out

    # ... also from a --config file
    toml = tmp_path / "control.toml"
    toml.write_text("[control]\nmin_bucket_samples = 3\n")
    code, out, _ = explain(store_url, capsys, "--config", str(toml))
    assert code == 0 and out.splitlines()[1] == COMMAND_LINE
    assert "scores: counted 36 of 36 buckets (needs 12)" in out

    # before any round decided the prefix: the command line's, and why
    code, out, _ = explain(store_url, capsys, at="2024-03-01T11:00:00Z")
    assert code == 0
    assert out.splitlines()[1] == (
        f"{COMMAND_LINE} (no round decided {SPARSE} at POP {POP} by 2024-03-01 11:00:00 UTC)"
    )

    # a prefix the store knows nothing of: one line, exit 2, no timeline
    argv = ["control", "--clickhouse", store_url, "explain", "--pop", POP, "--prefix", "192.0.2.0/24", "--at", AT]
    assert dyncc_main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "dyncc control: unknown prefix 192.0.2.0/24 at POP lax: no decision recorded and no telemetry from "
        "2024-03-01 09:00 to 2024-03-01 12:00 UTC (check --prefix, --pop and --at)"
    ]


def test_rounds_without_recorded_settings_fall_back_to_the_command_line(store: Store) -> None:
    """A round recorded before round_settings existed (no row): the command line's, and why."""
    insert(store)
    store.execute(
        "INSERT INTO selections (round_id, round_time, round_time_ns, pop, prefix, decision) "
        "SELECT 'old-round', toDateTime('2024-03-01 11:00:00', 'UTC'), toUInt64(1709290800000000000), "
        "'lax', '203.0.113.0/24', 'skip'"
    )
    given = ExplainWith(ScoringSettings(), EvidenceSettings())
    used = choose_settings(store, POP, SPARSE, dt.datetime(2024, 3, 1, 12, 0, tzinfo=dt.UTC), given, explicit=False)
    assert used.scoring == ScoringSettings()
    assert used.source == f"{COMMAND_LINE} (round old-round at 2024-03-01 11:00:00 UTC recorded no settings)"
    assert choose_settings(store, POP, SPARSE, dt.datetime(2024, 3, 1, 12, tzinfo=dt.UTC), given, True) is given


def test_settings_json_round_trip_and_unreadable_values() -> None:
    cfg = ScoringSettings(bucket_seconds=20, lookback_seconds=160, min_buckets=5, min_rtt_ms=7.5)
    assert settings_from_json(ScoringSettings, settings_json(cfg)) == cfg
    ev = EvidenceSettings(trial_blocks=6, trial_min_blocks=4)
    assert settings_from_json(EvidenceSettings, settings_json(ev)) == ev
    # a newer dyncc's extra setting is left out; a missing one takes the default
    assert settings_from_json(ScoringSettings, '{"min_buckets": 3, "from_the_future": 1}') == ScoringSettings(
        min_buckets=3
    )
    for bad in ("not json", "[1, 2]", '{"min_buckets": 0}', '{"min_duty": "high"}'):
        with pytest.raises(SettingsUnreadable):
            settings_from_json(ScoringSettings, bad)


def test_once_exits_1_when_the_publisher_could_publish_nothing(
    store: Store, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No telemetry, so no POP to publish; the sink cannot be opened (what an unreachable Kafka
    does, without its timeouts): nothing could be published, exit 1 as --help says."""
    private = make_keys(tmp_path)[0]

    def no_sink(self: Publisher) -> None:
        raise PublishError("Kafka 127.0.0.1:1 unreachable")

    monkeypatch.setattr(Publisher, "engine", no_sink)
    argv = ["control", "--clickhouse", store_url, "--once", "--at", AT, "--publish-dir", str(tmp_path / "cfg")]
    assert dyncc_main([*argv, "--key", str(private)]) == 1
    assert "nothing could be published: Kafka 127.0.0.1:1 unreachable" in caplog.records[-1].getMessage()
    monkeypatch.undo()
    assert dyncc_main([*argv, "--key", str(private)]) == 0  # the same round with a sink: nothing to do
