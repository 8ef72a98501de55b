"""Read ApplyStatus reports from the status topic into the `apply_status` table.

`status_rows()` is the pure part: decode, sanity-check and flatten reports into
columns (undecodable or unattributable messages are counted and skipped,
strings from the wire are length-capped).  `StatusIngestor.ingest()` reads
every partition from the consumer group's committed offset up to the high
watermark seen at the start (manual assignment: no group rebalance delay),
inserts the rows, and only then commits the offsets: a crash in between
re-reads the reports (at least once), nothing is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from controller.rollout.sinks import PublishError, ensure_topic
from controller.store import Store
from dyncc_common.kafka_log import KafkaLog
from schemas.congestion_pb2 import ApplyStatus

log = logging.getLogger("dyncc.status")

MAX_NAME = 253
MAX_ERRORS = 20
MAX_ERROR_LEN = 500
MAX_CC = 32


@dataclass
class StatusBatch:
    rows: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0


def result_name(value: int) -> str:
    try:
        return ApplyStatus.Result.Name(value)
    except ValueError:
        return f"UNKNOWN_{value}"


def status_row(status: ApplyStatus, *, received_ns: int, message_ns: int = 0) -> dict[str, Any] | None:
    """One apply_status row, or None when the report cannot be attributed to a host and POP."""
    host, pop = status.host.strip(), status.pop.strip()
    if not host or not pop or len(host) > MAX_NAME or len(pop) > MAX_NAME:
        return None
    health = status.health
    return {
        "received_at": received_ns // 1_000_000_000,
        "received_ns": received_ns,
        "reported_ns": status.reported_at_ns or message_ns or received_ns,
        "host": host,
        "pop": pop,
        "version": status.version,
        "applied_version": status.applied_version,
        "result": result_name(status.result),
        "routes_added": status.routes_added,
        "routes_removed": status.routes_removed,
        "routes_kept": status.routes_kept,
        "errors": [e[:MAX_ERROR_LEN] for e in list(status.errors)[:MAX_ERRORS]],
        "mem_available_bytes": health.mem_available_bytes,
        "load1": health.load1 if np.isfinite(health.load1) else 0.0,
        "load5": health.load5 if np.isfinite(health.load5) else 0.0,
        "tcp_sockets": health.tcp_sockets,
        "available_cc": [c[:64] for c in list(health.available_congestion_controls)[:MAX_CC]],
        "owned_routes": health.owned_routes,
    }


def status_rows(messages: Iterable[tuple[bytes | None, int]], received_ns: int) -> StatusBatch:
    """Decode (value, message time ns) pairs; malformed ones are counted and skipped."""
    batch = StatusBatch()
    for value, message_ns in messages:
        if not value:
            batch.malformed += 1
            continue
        try:
            status = ApplyStatus.FromString(value)
        except DecodeError:
            batch.malformed += 1
            continue
        # +index: received_ns is unique per row and keeps Kafka order (argMax without ties).
        row = status_row(status, received_ns=received_ns + len(batch.rows), message_ns=message_ns)
        if row is None:
            batch.malformed += 1
            continue
        batch.rows.append(row)
    return batch


_UINT64 = ("received_ns", "reported_ns", "version", "applied_version", "mem_available_bytes", "tcp_sockets")
_UINT32 = ("received_at", "routes_added", "routes_removed", "routes_kept", "owned_routes")


def _object_column(values: list[Any]) -> np.ndarray:
    col = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        col[i] = v
    return col


def insert_status_rows(store: Store, rows: list[dict[str, Any]]) -> int:
    if not rows:
        return 0
    columns: dict[str, Any] = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        if name in _UINT64:
            columns[name] = np.array(values, dtype=np.uint64)
        elif name in _UINT32:
            columns[name] = np.array(values, dtype=np.uint32)
        elif name in ("load1", "load5"):
            columns[name] = np.array(values, dtype=np.float64)
        elif name in ("errors", "available_cc"):
            columns[name] = _object_column([list(v) for v in values])
        else:
            columns[name] = values
    return store.insert_columns("apply_status", columns)


@dataclass
class IngestResult:
    read: int = 0
    inserted: int = 0
    malformed: int = 0


class StatusIngestor:
    """Drains the status topic into the store once per call (see the module docstring)."""

    def __init__(
        self,
        brokers: str,
        topic: str,
        group_id: str,
        *,
        timeout: float = 15.0,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.brokers = brokers
        self.topic = topic
        self.group_id = group_id
        self.timeout = timeout
        self.options = dict(options or {})  # librdkafka's TLS / SASL settings (kafka_security)
        self._topic_checked = False

        self.kafka_log = KafkaLog(logging.getLogger("dyncc.publish.kafka"))  # rate-limited librdkafka log

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer

        kafka_log = self.kafka_log
        return Consumer(
            {
                "bootstrap.servers": self.brokers,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "socket.timeout.ms": int(self.timeout * 1000),
                "logger": kafka_log,
                "error_cb": kafka_log.error,
                **self.options,
            }
        )

    def _check_topic(self) -> None:
        if not self._topic_checked:
            ensure_topic(
                self.brokers,
                self.topic,
                compact=False,
                timeout=self.timeout,
                retention_ms=7 * 86400 * 1000,
                options=self.options,
            )
            self._topic_checked = True

    def _read(self, consumer: Any) -> tuple[list[tuple[bytes | None, int]], dict[int, int]]:
        """Every message from the group's committed offsets to the high watermarks seen now:
        (value, message time ns) pairs and each read partition's next offset."""
        from confluent_kafka import TopicPartition

        meta = consumer.list_topics(self.topic, timeout=self.timeout)
        topic_meta = meta.topics.get(self.topic)
        if topic_meta is None or topic_meta.error is not None:
            raise PublishError(f"status topic {self.topic} unavailable")
        partitions = [TopicPartition(self.topic, p) for p in sorted(topic_meta.partitions)]
        committed = consumer.committed(partitions, timeout=self.timeout)
        assign, high_marks = [], {}
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, tp.partition), timeout=self.timeout)
            start = tp.offset if tp.offset >= 0 else low
            start = max(start, low)
            if start < high:
                assign.append(TopicPartition(self.topic, tp.partition, start))
                high_marks[tp.partition] = high
        messages: list[tuple[bytes | None, int]] = []
        if not assign:
            return messages, {}
        consumer.assign(assign)
        next_offsets = {tp.partition: tp.offset for tp in assign}
        deadline = time.monotonic() + self.timeout
        while any(next_offsets[p] < high_marks[p] for p in high_marks) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is not None:
                    log.warning("status consumer: %s", msg.error())
                    continue
                _, ts_ms = msg.timestamp()
                messages.append((msg.value(), max(ts_ms, 0) * 1_000_000))
                next_offsets[msg.partition()] = msg.offset() + 1
        return messages, next_offsets

    def ingest(self, store: Store) -> IngestResult:
        from confluent_kafka import KafkaException, TopicPartition

        self._check_topic()
        consumer = self._consumer()
        result = IngestResult()
        try:
            messages, next_offsets = self._read(consumer)
            if not next_offsets:
                return result
            batch = status_rows(messages, time.time_ns())
            result.read, result.malformed = len(messages), batch.malformed
            result.inserted = insert_status_rows(store, batch.rows)
            consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in next_offsets.items()], asynchronous=False
            )
            if batch.malformed:
                log.warning("skipped %d malformed status reports on %s", batch.malformed, self.topic)
            return result
        except KafkaException as exc:
            reason = exc.args[0] if exc.args else exc
            raise PublishError(f"reading statuses from {self.topic}: {reason}") from exc
        finally:
            consumer.close()

    def pending(self) -> StatusBatch:
        """The reports on the topic that no round has stored yet, read without storing them or
        committing (the group's offsets stay where the last round left them): what
        `rollout status` shows on top of the stored ones.  PublishError when Kafka fails."""
        from confluent_kafka import KafkaException

        consumer = self._consumer()
        try:
            messages, _ = self._read(consumer)
            return status_rows(messages, time.time_ns())
        except KafkaException as exc:
            reason = exc.args[0] if exc.args else exc
            raise PublishError(f"reading statuses from {self.topic}: {reason}") from exc
        finally:
            consumer.close()
