"""Prometheus metrics of one ingest loader and of one access-log loader (each its own CollectorRegistry)."""

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
        self.assigned = Gauge(
            "dyncc_ingest_assigned_partitions", "Partitions of the topic the group assigned to this loader", registry=r
        )
        self.unassigned_seconds = Gauge(
            "dyncc_ingest_unassigned_seconds",
            "Seconds this loader has been subscribed without holding any partition (0 while it holds one)",
            registry=r,
        )
        self.rejoins = Counter(
            "dyncc_ingest_consumer_rejoins",
            "Times the loader closed its Kafka consumer and subscribed anew after holding no partition too long",
            registry=r,
        )
        self.kafka_errors = Counter(
            "dyncc_ingest_kafka_errors",
            "Kafka errors, by operation: client (broker connections, from librdkafka), consume, commit, "
            "committed (reading the group's offsets), watermarks, metadata",
            ["op"],
            registry=r,
        )
        self.cache_buckets = Counter(
            "dyncc_ingest_cache_buckets",
            "(POP, bucket)s whose per-prefix statistics the cache keeper computed into scoring_cache",
            registry=r,
        )
        self.cache_errors = Counter(
            "dyncc_ingest_cache_errors", "Cache keeper ticks that failed (the store away; retried)", registry=r
        )
        self.cache_tick_seconds = Gauge(
            "dyncc_ingest_cache_tick_seconds", "Time of the cache keeper's last tick", registry=r
        )


class AccessLogMetrics:
    """Prometheus metrics of one `dyncc access-log` process (its own CollectorRegistry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.lines = Counter("dyncc_access_log_lines", "Complete access-log lines read", registry=r)
        self.rows = Counter("dyncc_access_log_rows", "Rows inserted into http_requests", registry=r)
        self.duplicates = Counter(
            "dyncc_access_log_duplicate_lines",
            "Lines skipped because the store already had them (after a crash or a repeated delivery)",
            registry=r,
        )
        self.dead_letters = Counter("dyncc_access_log_dead_letters", "Bad lines sent to ingest_dead_letter", registry=r)
        self.bytes = Counter("dyncc_access_log_bytes", "Bytes of complete lines read", registry=r)
        self.logs = Counter(
            "dyncc_access_log_new_logs", "Logs started at a path (the first one, rotations, truncations)", registry=r
        )
        self.retries = Counter(
            "dyncc_access_log_retries", "Cycles that failed on the store and were retried", registry=r
        )
        self.behind = Gauge(
            "dyncc_access_log_behind_bytes",
            "Bytes of the file at this path not loaded yet (a partial last line included)",
            ["file"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "dyncc_access_log_cycle_seconds",
            "Time of one cycle over every file",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
