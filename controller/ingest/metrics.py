"""Prometheus metrics of one ingest loader (its own CollectorRegistry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rows = Counter("dyncc_ingest_rows", "Rows inserted into tcpinfo", registry=r)
        self.batches = Counter("dyncc_ingest_batches", "Batches inserted (including empty ones)", registry=r)
        self.duplicates = Counter(
            "dyncc_ingest_duplicate_batches",
            "Batches skipped because the ledger already had them",
            registry=r,
        )
        self.dead_letters = Counter("dyncc_ingest_dead_letters", "Messages sent to ingest_dead_letter", registry=r)
        self.retries = Counter("dyncc_ingest_retries", "Flush attempts that failed and were retried", registry=r)
        self.gaps = Counter("dyncc_ingest_sequence_gaps", "Per-host sequence gaps detected", registry=r)
        self.missing = Counter(
            "dyncc_ingest_missing_batches", "Batches missing inside detected sequence gaps", registry=r
        )
        self.filled = Counter(
            "dyncc_ingest_filled_batches",
            "Batches that arrived late inside a detected sequence gap (no longer missing)",
            registry=r,
        )
        self.insert_seconds = Histogram(
            "dyncc_ingest_insert_seconds",
            "Time of one flush's inserts (ledger lookups and writes included)",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.lag = Gauge(
            "dyncc_ingest_consumer_lag",
            "Messages not yet committed: high watermark - committed offset (low watermark if none)",
            ["topic", "partition"],
            registry=r,
        )
        self.paused = Gauge("dyncc_ingest_paused", "1 while consumption is paused (store unavailable)", registry=r)
        self.kafka_errors = Counter(
            "dyncc_ingest_kafka_errors",
            "Kafka errors, by operation: client (broker connections, from librdkafka), consume, commit, "
            "committed (reading the group's offsets), watermarks, metadata",
            ["op"],
            registry=r,
        )
