"""Kafka and store helpers of the ingest tests: create a topic, produce synthetic batches, count rows."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from controller.store import open_store
from schemas.tcpinfo_decode import decode_batch
from tests.support.ingest_synth import synth_messages


def create_topic(brokers: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": brokers})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result(timeout=30)


def produce(brokers: str, topic: str, messages: list[tuple[str, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "linger.ms": 5})
    for key, value in messages:
        producer.produce(topic, key=key.encode(), value=value)
        producer.poll(0)
    assert producer.flush(30) == 0


def make_msgs(rows: int, seed: int, hosts: int = 6, **kw: object) -> list[tuple[str, bytes]]:
    return list(synth_messages(rows, hosts=hosts, rows_per_poll=400, seed=seed, max_bytes=40_000, **kw))  # type: ignore[arg-type]


def total_rows(msgs: list[tuple[str, bytes]]) -> int:
    return sum(decode_batch(m).row_count for _, m in msgs)


def dup_count(store_url: str) -> int:
    s = open_store(store_url)
    try:
        return int(
            s.query_rows(
                "SELECT count() FROM (SELECT host, sequence, cookie FROM tcpinfo "
                "GROUP BY host, sequence, cookie HAVING count() > 1)"
            )[0][0]
        )
    finally:
        s.close()


def count_rows(store_url: str, sql: str = "SELECT count() FROM tcpinfo") -> int:
    s = open_store(store_url)
    try:
        return int(s.query_rows(sql)[0][0])
    finally:
        s.close()
