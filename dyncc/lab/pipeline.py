"""The lab's telemetry path: one collector per edge host (its namespace) -> store.

Each edge host has its own `Poller` (the collector's, with the host's name and POP).
Embedded (default): the batches go into `BatchWriter(store).write()`, synchronously, or, after
`start_writer()`, from a queue in a writer thread, so a poll never waits for the store (a round's
queries hold an embedded store for seconds; the lab polls from its own thread meanwhile).
With Kafka: each host's KafkaSink produces them to one topic (keyed by host) and the
ingest KafkaLoader (in a thread of this process) loads them, exactly like `dyncc collect`
and `dyncc ingest` would.  `wait_loaded()` blocks until every batch polled so far
is in the store (the ingest ledger, or the writer's queue drained), so a scoring round never
misses a bucket's tail.  `poll`, `take_new_sockets` and `wait_loaded` may be called from
different threads (one lock).
Each poll also feeds the new-socket tracker and, when recording, the recorder.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.telemetry.filters import DEFAULT_EXCLUDES, FilterSpec, parse_networks
from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.poller import Poller, PollerConfig
from collector.telemetry.sinks import KafkaSink, KafkaStart
from controller.ingest.kafka import KafkaConfig, KafkaLoader
from controller.ingest.writer import BatchWriter
from controller.rollout.sinks import ensure_topic
from controller.store import Store, StoreError
from controller.store.sql import query
from dyncc.lab.telemetry import NewSockets, Recorder
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


@dataclass(frozen=True)
class EdgeSource:
    """One edge host the lab collects from."""

    host: str
    pop: str
    ns: str


class TelemetryPipeline:
    def __init__(
        self,
        store: Store,
        edges: list[EdgeSource],
        *,
        kafka: str | None = None,
        kafka_options: dict[str, Any] | None = None,
        topic: str = "",
        record: Path | None = None,
    ) -> None:
        self.store = store
        self.edges = edges
        self.pollers = [
            Poller(
                PollerConfig(
                    host=e.host,
                    pop=e.pop,
                    netns=(e.ns,),
                    filters=FilterSpec(exclude=tuple(parse_networks(DEFAULT_EXCLUDES))),
                )
            )
            for e in edges
        ]
        self.writer = BatchWriter(store, source="lab")
        self.new_sockets = NewSockets()
        self.recorder = Recorder(record) if record else None
        self.stats = PipelineStats()
        self.last_sequence = [-1] * len(edges)
        self.kafka = kafka
        self.kafka_options = dict(kafka_options or {})  # librdkafka's TLS / SASL options (holds the password)
        self._sinks: list[Any] = []
        self._loader: Any = None
        self._loader_stop = StopFlag()
        self._loader_thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._pending: queue.Queue[list[bytes] | None] = queue.Queue()
        self._writer_thread: threading.Thread | None = None
        if kafka:
            self._start_kafka(kafka, topic)

    def _start_kafka(self, brokers: str, topic: str) -> None:
        options = self.kafka_options
        ensure_topic(brokers, topic, compact=False, options=options)
        self._sinks = [
            KafkaSink(KafkaStart(brokers, e.host, linger_ms=5, extra=dict(options)), topic, CollectMetrics())
            for e in self.edges
        ]
        cfg = KafkaConfig(brokers=brokers, topic=topic, group=f"{topic}-ingest", max_wait=0.3, security=options)
        self._loader = KafkaLoader(self.writer, cfg, self._loader_stop)
        self._loader_thread = threading.Thread(target=self._loader.run, name="lab-ingest", daemon=True)
        self._loader_thread.start()
        log.info("telemetry via Kafka %s topic %s (collector sinks -> ingest loader)", brokers, topic)

    def start_writer(self) -> None:
        """Write the embedded path's polls from a thread of their own (no-op with Kafka)."""
        if self._sinks or self._writer_thread is not None:
            return
        self._writer_thread = threading.Thread(target=self._write_pending, name="lab-writer", daemon=True)
        self._writer_thread.start()

    def _write_pending(self) -> None:
        while True:
            batches = self._pending.get()
            try:
                if batches is None:
                    return
                self.writer.write(batches)
            except Exception as exc:  # counted; the lab goes on (the summary shows the rows)
                log.warning("lab telemetry write failed: %s", exc)
                self.stats.errors.append(str(exc)[:200])
            finally:
                self._pending.task_done()

    def take_new_sockets(self) -> dict[str, Counter[str]]:
        with self._lock:
            return self.new_sockets.take()

    def poll(self) -> None:
        """One poll of every edge host."""
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        t0 = time.monotonic()
        polled: list[bytes] = []
        for i, poller in enumerate(self.pollers):
            result = poller.poll(deadline=time.monotonic() + 5.0)
            batches = result.batches
            self.stats.batches += len(batches)
            self.stats.rows += result.exported
            self.stats.bytes += result.bytes
            self.last_sequence[i] = poller.sequence - 1
            self.new_sockets.observe(batches, first=self.stats.polls == 0)
            if self.recorder is not None:
                self.recorder.write(batches)
            if self._sinks:
                self._sinks[i].send_poll(batches)
                self._sinks[i].service(0)
            else:
                polled += batches
        if polled and self._writer_thread is not None:
            self._pending.put(polled)
        elif polled:
            self.writer.write(polled)  # one flush for every host's batches of this poll
        self.stats.polls += 1
        self.stats.poll_seconds += time.monotonic() - t0

    def loaded_sequence(self, i: int) -> int:
        rows = self.store.query_rows(
            query("ingest_loaded_sequence"),
            {"host": self.edges[i].host, "run": self.pollers[i].run_id},
        )
        if not rows or int(rows[0][1]) == 0:
            return -1
        return int(rows[0][0])

    def wait_loaded(self, timeout: float = 10.0) -> bool:
        """Wait until every batch polled so far is in the store; False on timeout."""
        deadline = time.monotonic() + timeout
        if not self._sinks:
            while self._pending.unfinished_tasks and time.monotonic() < deadline:
                time.sleep(0.02)
            if self._pending.unfinished_tasks:
                left = self._pending.unfinished_tasks
                log.warning("the lab's writer is behind: %d polls not written after %.0fs", left, timeout)
                return False
            return True
        pending = [i for i in range(len(self.edges)) if self.last_sequence[i] >= 0]
        while time.monotonic() < deadline:
            with self._lock:
                for sink in self._sinks:
                    sink.service(0.02)
            try:
                pending = [i for i in pending if self.loaded_sequence(i) < self.last_sequence[i]]
            except StoreError as exc:
                log.warning("checking the ingest ledger: %s", exc)
            if not pending:
                return True
            time.sleep(0.1)
        log.warning("ingest is behind: %s not loaded after %.0fs", self.edges[pending[0]].host, timeout)
        return False

    def close(self, meta: dict[str, Any] | None = None) -> None:
        if self._writer_thread is not None:
            self.wait_loaded(30.0)
            self._pending.put(None)
            self._writer_thread.join(30.0)
            self._writer_thread = None
        if self._sinks:
            for sink in self._sinks:
                left = sink.close(10.0)
                if left:
                    log.warning("%d telemetry batches not delivered to Kafka", left)
            self.wait_loaded(5.0)
            self._loader_stop.set("lab stop")
            if self._loader_thread is not None:
                self._loader_thread.join(15.0)
            self._sinks = []
        if self.recorder is not None:
            self.recorder.close(meta or {})
            log.info("recorded %d batches to %s", self.recorder.records, self.recorder.path)
            self.recorder = None
