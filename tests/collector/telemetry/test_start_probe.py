"""The early metadata request of a one-shot Kafka run (KafkaStart.ask_metadata, start.check_kafka).

An answered early request makes the start probe return at once; an unanswered
one (nothing listens at the broker address) leaves the usual probe to run.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.sinks import KafkaSink, KafkaStart
from collector.telemetry.start import check_kafka
from dyncc_common import kafka_security


def probe_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(kafka_security, "probe", lambda *args, **kw: calls.append(args))
    return calls


def settings(brokers: str, topic: str) -> Any:
    return SimpleNamespace(once=True, flush_timeout=5.0, brokers=brokers, topic=topic)


def test_answered_early_request_is_the_probe(
    kafka_brokers: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = KafkaStart(kafka_brokers, "t-edge", quiet=True)
    start.ask_metadata(kafka_topic, timeout=10.0)
    assert start.answered(wait=15.0)
    calls = probe_calls(monkeypatch)
    sink = KafkaSink(start, kafka_topic, CollectMetrics(prometheus=False))
    check_kafka(settings(kafka_brokers, kafka_topic), sink)
    assert calls == []
    assert sink.close(5) == 0


def test_unanswered_early_request_leaves_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    start = KafkaStart("127.0.0.1:9", "t-edge", quiet=True)  # discard port: nothing listens
    start.ask_metadata("t", timeout=0.2)
    assert not start.answered(wait=5.0)
    calls = probe_calls(monkeypatch)
    sink = KafkaSink(start, "t", CollectMetrics(prometheus=False))
    check_kafka(settings("127.0.0.1:9", "t"), sink)
    assert len(calls) == 1
    sink.producer.purge()
    sink.producer.flush(0)


def test_no_producer_no_request() -> None:
    bad = KafkaStart("127.0.0.1:9", "t-edge", extra={"no.such.setting": "x"}, quiet=True)
    bad.ask_metadata("t")
    assert not bad.answered(wait=0.1)
