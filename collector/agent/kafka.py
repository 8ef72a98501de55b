"""Kafka transport of the edge agent: configs in, ApplyStatus out.

`ConfigConsumer` reads the compacted config topic from the beginning of every
partition without a consumer group commit and keeps only messages keyed by this
agent's POP: `<pop>` (POP-wide configs) and `<pop>/canary` (canary waves that
target some hosts, see docs/rollout.md; the keys are the contract's, schemas/wire.py).
It hands back the latest config of each key (later messages win; during the initial
catch-up only the latest per key), oldest version first, so the agent applies a POP-wide config and then
decides whether a newer canary wave targets it.  `StatusProducer` writes
ApplyStatus messages keyed by host.  Undecodable messages are counted and
skipped.  Both take `options`, librdkafka's TLS / SASL settings
(dyncc_common.kafka_security.librdkafka_options), and log librdkafka's lines
through a rate-limited KafkaLog; `ConfigConsumer.check(timeout)` is the start
probe (a refused password or certificate: KafkaSecurityError, exit 2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from google.protobuf.message import DecodeError

from dyncc_common.kafka_log import KafkaLog
from dyncc_common.kafka_security import probe
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig
from schemas.wire import config_key, config_keys

log = logging.getLogger("dyncc.agent.kafka")


class ConfigConsumer:
    def __init__(
        self,
        brokers: str,
        topic: str,
        pop: str,
        host: str,
        *,
        on_error: Callable[[str], None] | None = None,
        on_malformed: Callable[[], None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.brokers = brokers
        self.topic = topic
        self.keys = {key.encode() for key in config_keys(pop)}  # the contract's: <pop>, <pop>/canary
        self.key = config_key(pop, canary=False).encode()
        self._on_error = on_error or (lambda _msg: None)
        self._on_malformed = on_malformed or (lambda: None)
        self.kafka_log = KafkaLog(log)
        self._consumer = Consumer(
            {
                "bootstrap.servers": brokers,
                "group.id": f"dyncc-agent-{pop}-{host}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "fetch.queue.backoff.ms": 10,
                "fetch.wait.max.ms": 100,
                "logger": self.kafka_log,
                "error_cb": self.kafka_log.error,
                **(options or {}),
            }
        )
        self._partitions: set[int] = set()
        self._at_eof: set[int] = set()
        self.caught_up = False
        self._pending: dict[bytes, CongestionConfig] = {}
        self._next_assign = 0.0
        self._warned_missing = False

    def check(self, timeout: float) -> str | None:
        """The start probe: None once a broker answered, else the reason (an outage: the agent
        waits for the broker as before); KafkaSecurityError if it refused the credentials.
        librdkafka's own lines are not logged meanwhile: the error (one line, exit 2) or the
        caller's warning says what happened."""
        self.kafka_log.quiet = True
        try:
            return probe(self._consumer, self.kafka_log, self.brokers, timeout, self.topic)
        finally:
            self.kafka_log.quiet = False

    def _assign(self) -> bool:
        now = time.monotonic()
        if now < self._next_assign:
            return False
        self._next_assign = now + 5.0
        try:
            meta = self._consumer.list_topics(self.topic, timeout=5)
        except KafkaException as exc:
            self._on_error(f"metadata for {self.topic}: {exc}")
            return False
        topic = meta.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            if not self._warned_missing:
                log.warning("config topic %s not available yet; waiting", self.topic)
                self._warned_missing = True
            return False
        self._partitions = set(topic.partitions)
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(self._partitions)])
        log.info(
            "reading configs for key %s from %s (%d partitions)", self.key.decode(), self.topic, len(self._partitions)
        )
        return True

    def poll(self, timeout: float) -> list[CongestionConfig]:
        """The newest config of each of this POP's keys that arrived since the last call, by version."""
        if not self._partitions and not self._assign():
            time.sleep(min(timeout, 0.2))
            return []
        latest: dict[bytes, CongestionConfig] = {}
        for msg in self._consumer.consume(500, timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._at_eof.add(msg.partition() or 0)
                else:
                    self._on_error(str(err))
                    self.kafka_log.note(logging.WARNING, str(err.name()), f"config consumer: {err}")
                continue
            key = msg.key()
            if key not in self.keys:
                continue
            assert key is not None
            value = msg.value()
            if value is None:
                log.warning("tombstone for POP %s on %s ignored (use the kill switch)", self.key.decode(), self.topic)
                continue
            try:
                latest[key] = CongestionConfig.FromString(value)
            except DecodeError:
                self._on_malformed()
                log.warning("undecodable config at %s[%s]@%s skipped", self.topic, msg.partition(), msg.offset())
        if self.caught_up:
            return sorted(latest.values(), key=lambda c: c.version)
        self._pending.update(latest)
        if self._at_eof >= self._partitions:
            self.caught_up = True
            pending, self._pending = self._pending, {}
            return sorted(pending.values(), key=lambda c: c.version)
        return []

    def close(self) -> None:
        self._consumer.close()


class StatusProducer:
    def __init__(
        self,
        brokers: str,
        topic: str,
        *,
        on_error: Callable[[str], None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self._on_error = on_error or (lambda _msg: None)
        self.kafka_log = KafkaLog(log)
        self._producer = Producer(
            {
                "bootstrap.servers": brokers,
                "acks": "all",
                "linger.ms": 5,
                "logger": self.kafka_log,
                "error_cb": self.kafka_log.error,
                **(options or {}),
            }
        )

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self._on_error(str(err))
            self.kafka_log.note(logging.WARNING, "delivery", f"status not delivered: {err}")

    def send(self, status: ApplyStatus) -> None:
        try:
            self._producer.produce(
                self.topic, key=status.host.encode(), value=status.SerializeToString(), on_delivery=self._delivered
            )
        except (KafkaException, BufferError) as exc:
            self._on_error(str(exc))
            log.warning("status not queued: %s", exc)
        self._producer.poll(0)

    def flush(self, timeout: float = 10.0) -> int:
        return int(self._producer.flush(timeout))
