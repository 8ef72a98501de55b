"""Reading a Kafka topic back in tests (the real broker)."""

from __future__ import annotations

import time
import uuid


def consume(brokers: str, topic: str, want: int, timeout: float = 30.0) -> list[bytes]:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": f"dcol-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append(msg.value() or b"")
        # anything beyond `want` (duplicates, strays) shows up too
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value() or b"")
    finally:
        c.close()
    return got


def committed_total(brokers: str, group: str, topic: str, partitions: int) -> int:
    """Sum of the group's committed offsets over the topic's partitions, read without joining the group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in got)
    finally:
        consumer.close()
