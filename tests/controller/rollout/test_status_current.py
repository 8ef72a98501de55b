"""`rollout status --kafka` shows each host's last report, also one no round has stored yet.

Before, it showed what the last round had read from the status topic: a host that applied the
round's config showed the previous version until the next round (docs/rollout.md's key rotation
waits for "every host on that version").  The reports are read without committing: the round's
next ingest still reads them.
"""

from __future__ import annotations

import pytest

from controller.rollout.settings import RolloutSettings
from controller.rollout.statuses import StatusIngestor
from controller.store import Store
from dyncc.cli import main as dyncc_main
from tests.support.rollout_util import produce, status

pytestmark = pytest.mark.kafka

GROUP = RolloutSettings.status_group  # the rounds' group, as the command reads it


def _host_line(out: str, host: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith(host))


def test_status_shows_the_report_a_round_has_not_read_yet_and_leaves_it_for_the_round(
    store: Store, store_url: str, kafka_brokers: str, kafka_topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    produce(kafka_brokers, kafka_topic, [status("edge-1", 3, 3), status("edge-2", 3, 3)])
    round_reader = StatusIngestor(kafka_brokers, kafka_topic, GROUP)
    assert round_reader.ingest(store).inserted == 2  # the last round read v3 from both
    produce(kafka_brokers, kafka_topic, [status("edge-1", 4, 4)])  # then edge-1 applied v4

    command = ["control", "rollout", "status", "--clickhouse", store_url, "--pop", "lax"]
    assert dyncc_main([*command, "--kafka", kafka_brokers, "--status-topic", kafka_topic]) == 0
    out = capsys.readouterr().out
    edge1, edge2 = _host_line(out, "edge-1"), _host_line(out, "edge-2")
    assert edge1.split()[1] == "v4" and edge1.rstrip().endswith("*"), out
    assert edge2.split()[1] == "v3" and not edge2.rstrip().endswith("*"), out
    assert "1 on the status topic, not yet read by a round" in out

    assert dyncc_main(command) == 0  # without --kafka: what the rounds stored
    assert _host_line(capsys.readouterr().out, "edge-1").split()[1] == "v3"

    again = round_reader.ingest(store)  # nothing committed by the status command
    assert (again.read, again.inserted) == (1, 1)
    assert dyncc_main([*command, "--kafka", kafka_brokers, "--status-topic", kafka_topic]) == 0
    out = capsys.readouterr().out
    assert _host_line(out, "edge-1").split()[1] == "v4" and "*" not in _host_line(out, "edge-1"), out
    assert "not yet read by a round" not in out


def test_status_without_the_status_topic_says_so_in_one_line_and_shows_the_stored_reports(
    store: Store, store_url: str, kafka_brokers: str, kafka_topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    produce(kafka_brokers, kafka_topic, [status("edge-1", 3, 3)])
    StatusIngestor(kafka_brokers, kafka_topic, GROUP).ingest(store)
    command = ["control", "rollout", "status", "--clickhouse", store_url, "--pop", "lax", "--kafka", kafka_brokers]
    assert dyncc_main([*command, "--status-topic", f"{kafka_topic}-absent"]) == 0
    out = capsys.readouterr().out
    assert _host_line(out, "edge-1").split()[1] == "v3"
    (note,) = [line for line in out.splitlines() if line.startswith("note:")]
    assert "host reports newer than the last round not shown" in note and "unavailable" in note
