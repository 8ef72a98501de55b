"""The lab's telemetry path: collector poll in the edge namespace -> store.

Embedded (default): `Poller.poll()` batches go straight into `BatchWriter(store).write()`.
With Kafka: the collector's KafkaSink produces them to a topic and the ingest
KafkaLoader (in a thread of this process) loads them, exactly like `dyncc collect`
and `dyncc ingest` would.  `wait_loaded()` blocks until every batch polled so far
is in the store (the ingest ledger), so a scoring round never misses a bucket's tail.
Each poll also feeds the new-socket tracker and, when recording, the recorder.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.telemetry.filters import DEFAULT_EXCLUDES, FilterSpec, parse_networks
from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.poller import Poller, PollerConfig
from collector.telemetry.sinks import KafkaSink
from controller.ingest.kafka import KafkaConfig, KafkaLoader
from controller.ingest.writer import BatchWriter
from controller.lab.telemetry import NewSockets, Recorder
from controller.rollout.sinks import ensure_topic
from controller.store import Store, StoreError
from controller.store.sql import query
from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.lab")


@dataclass
class PipelineStats:
    polls: int = 0
    batches: int = 0
    rows: int = 0
    bytes: int = 0
    poll_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


class TelemetryPipeline:
    def __init__(
        self,
        store: Store,
        *,
        edge_ns: str,
        host: str,
        pop: str,
        kafka: str | None = None,
        topic: str = "",
        record: Path | None = None,
    ) -> None:
        self.store = store
        self.host = host
        self.poller = Poller(
            PollerConfig(
                host=host,
                pop=pop,
                netns=(edge_ns,),
                filters=FilterSpec(exclude=tuple(parse_networks(DEFAULT_EXCLUDES))),
            )
        )
        self.writer = BatchWriter(store, source="lab")
        self.new_sockets = NewSockets()
        self.recorder = Recorder(record) if record else None
        self.stats = PipelineStats()
        self.last_sequence = -1
        self.kafka = kafka
        self._sink: Any = None
        self._loader: Any = None
        self._loader_stop = StopFlag()
        self._loader_thread: threading.Thread | None = None
        if kafka:
            self._start_kafka(kafka, topic)

    def _start_kafka(self, brokers: str, topic: str) -> None:
        ensure_topic(brokers, topic, compact=False)
        self._sink = KafkaSink(brokers, topic, self.host, CollectMetrics(), linger_ms=5)
        cfg = KafkaConfig(brokers=brokers, topic=topic, group=f"{topic}-ingest", max_wait=0.3)
        self._loader = KafkaLoader(self.writer, cfg, self._loader_stop)
        self._loader_thread = threading.Thread(target=self._loader.run, name="lab-ingest", daemon=True)
        self._loader_thread.start()
        log.info("telemetry via Kafka %s topic %s (collector sink -> ingest loader)", brokers, topic)

    @property
    def run_id(self) -> int:
        return self.poller.run_id

    def poll(self) -> None:
        t0 = time.monotonic()
        result = self.poller.poll(deadline=t0 + 5.0)
        batches = result.batches
        self.stats.polls += 1
        self.stats.batches += len(batches)
        self.stats.rows += result.exported
        self.stats.bytes += result.bytes
        self.last_sequence = self.poller.sequence - 1
        self.new_sockets.observe(batches)
        if self.recorder is not None:
            self.recorder.write(batches)
        if self._sink is not None:
            self._sink.send_poll(batches)
            self._sink.service(0)
        else:
            self.writer.write(batches)
        self.stats.poll_seconds += time.monotonic() - t0

    def loaded_sequence(self) -> int:
        rows = self.store.query_rows(
            query("ingest_loaded_sequence"),
            {"host": self.host, "run": self.run_id},
        )
        if not rows or int(rows[0][1]) == 0:
            return -1
        return int(rows[0][0])

    def wait_loaded(self, timeout: float = 10.0) -> bool:
        """Wait until every batch polled so far is in the store; False on timeout."""
        if self._sink is None:
            return True  # written synchronously
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._sink.service(0.05)
            try:
                if self.loaded_sequence() >= self.last_sequence:
                    return True
            except StoreError as exc:
                log.warning("checking the ingest ledger: %s", exc)
            time.sleep(0.1)
        log.warning("ingest is behind: batch %d not loaded after %.0fs", self.last_sequence, timeout)
        return False

    def close(self, meta: dict[str, Any] | None = None) -> None:
        if self._sink is not None:
            left = self._sink.close(10.0)
            if left:
                log.warning("%d telemetry batches not delivered to Kafka", left)
            self.wait_loaded(5.0)
            self._loader_stop.set("lab stop")
            if self._loader_thread is not None:
                self._loader_thread.join(15.0)
            self._sink = None
        if self.recorder is not None:
            self.recorder.close(meta or {})
            log.info("recorded %d batches to %s", self.recorder.records, self.recorder.path)
            self.recorder = None
