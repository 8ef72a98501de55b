"""ApplyStatus reports from the status topic land in apply_status (both back ends), once each."""

from __future__ import annotations

import pytest

from controller.rollout import records as rs
from controller.rollout.statuses import StatusIngestor, status_rows
from controller.store import Store
from schemas.congestion_pb2 import ApplyStatus
from tests.support.rollout_util import produce, status

pytestmark = pytest.mark.kafka


def test_status_rows_skip_malformed_and_unattributed() -> None:
    good = status("edge-1", 3, 3).SerializeToString()
    no_host = ApplyStatus(pop="lax", version=1).SerializeToString()
    batch = status_rows([(good, 5), (b"\xff\xff\xff", 0), (None, 0), (no_host, 0), (good, 0)], 1000)
    assert batch.malformed == 3
    assert [r["host"] for r in batch.rows] == ["edge-1", "edge-1"]
    assert batch.rows[0]["received_ns"] != batch.rows[1]["received_ns"]  # unique: argMax without ties
    assert batch.rows[0]["result"] == "APPLIED" and batch.rows[0]["available_cc"] == ["bbr", "cubic", "reno"]
    weird = ApplyStatus(host="h", pop="p", result=42).SerializeToString()  # type: ignore[arg-type]
    assert status_rows([(weird, 0)], 1).rows[0]["result"] == "UNKNOWN_42"


def test_statuses_consumed_into_apply_status(store: Store, kafka_brokers: str, kafka_topic: str) -> None:
    produce(
        kafka_brokers,
        kafka_topic,
        [
            status("edge-1", 3, 3, mem=3 * 2**30, load=1.25),
            status(
                "edge-2", 3, 2, ApplyStatus.FAILED_ROLLED_BACK, errors=("route add 192.0.2.0/24: EPERM",), cc=("cubic",)
            ),
            b"not a protobuf \xff\xff",
            status("edge-1", 4, 4, ApplyStatus.UNCHANGED),
        ],
    )
    ingestor = StatusIngestor(kafka_brokers, kafka_topic, f"g-{kafka_topic}")
    result = ingestor.ingest(store)
    assert (result.read, result.inserted, result.malformed) == (4, 3, 1)
    rows = store.query_rows(
        "SELECT host, version, applied_version, result, errors, mem_available_bytes, "
        "load1, available_cc FROM apply_status ORDER BY host, received_ns"
    )
    # order is kept per host (key = host -> one partition); hosts may interleave
    assert [(r[0], int(r[1]), int(r[2]), r[3]) for r in rows] == [
        ("edge-1", 3, 3, "APPLIED"),
        ("edge-1", 4, 4, "UNCHANGED"),
        ("edge-2", 3, 2, "FAILED_ROLLED_BACK"),
    ]
    assert list(rows[2][4]) == ["route add 192.0.2.0/24: EPERM"] and list(rows[2][7]) == ["cubic"]
    assert int(rows[0][5]) == 3 * 2**30 and float(rows[0][6]) == 1.25
    latest = rs.latest_reports(store, "lax", 0)
    assert latest["edge-1"].version == 4 and latest["edge-1"].result == "UNCHANGED"
    assert latest["edge-2"].errors == ("route add 192.0.2.0/24: EPERM",)

    # offsets are committed: a second pass reads only what is new
    assert ingestor.ingest(store).read == 0
    produce(kafka_brokers, kafka_topic, [status("edge-3", 4, 4)])
    again = StatusIngestor(kafka_brokers, kafka_topic, f"g-{kafka_topic}").ingest(store)
    assert (again.read, again.inserted) == (1, 1)
    assert store.query_rows("SELECT count() FROM apply_status")[0][0] == 4
