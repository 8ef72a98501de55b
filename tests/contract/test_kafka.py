"""A TcpInfoBatch survives a produce/consume round trip on the real Kafka broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.tcpinfo_pb2 import TcpInfoBatch

pytestmark = pytest.mark.kafka


def test_batch_round_trip_on_real_broker(kafka_brokers: str, kafka_topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_brokers})
    for future in admin.create_topics([NewTopic(kafka_topic, num_partitions=2, replication_factor=1)]).values():
        future.result(timeout=30)
    sent = []
    producer = Producer(
        {"bootstrap.servers": kafka_brokers, "enable.idempotence": True, "acks": "all", "compression.type": "zstd"}
    )
    for seq in range(5):
        batch = TcpInfoBatch(schema_version=1, host="edge-a", pop="lax", sequence=seq, row_count=3)
        batch.rtt.extend([1000 + seq, 2000, 3000])
        batch.src_addr = bytes(range(16)) * 3
        sent.append(batch)
        producer.produce(kafka_topic, key=b"edge-a", value=batch.SerializeToString())
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_brokers,
            "group.id": f"g-{kafka_topic}",
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.subscribe([kafka_topic])
    received: list[TcpInfoBatch] = []
    deadline = time.monotonic() + 30
    try:
        while len(received) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            assert msg.key() == b"edge-a"
            received.append(TcpInfoBatch.FromString(msg.value() or b""))
    finally:
        consumer.close()
    # One key -> one partition -> order kept.
    assert [b.sequence for b in received] == [0, 1, 2, 3, 4]
    assert received == sent
