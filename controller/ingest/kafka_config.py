"""The Kafka consumer's configuration and start of `dyncc ingest`: KafkaConfig, the librdkafka
settings, the start probe, and the text helpers of the loader's log lines.

* Start: wait_for_brokers() asks for the topic's metadata for up to
  --connect-timeout and fails with one line (exit 2) naming the brokers.  A --drain run
  (a script waiting for the answer) probes for at most DRAIN_PROBE_SECONDS (5 s) instead:
  a dead or mistyped broker is said in seconds, not after the daemon's 30 s.  A broker that
  refuses the client's password or certificate (or a TLS listener spoken to in plaintext) is
  said at once, also one line, exit 2 (dyncc_common.kafka_security); after a successful start
  such failures are counted (kafka_errors{op="client"}) and retried as for an outage.
* TLS / SASL: `security` holds the librdkafka options of the --kafka-ca ... settings.
* consumer_settings(): manual commits (enable.auto.commit off), a small prefetch queue (the loader
  holds its own backlog, docs/performance.md "Loader memory"), the TLS / SASL options last.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from controller.ingest.metrics import IngestMetrics
from controller.ingest.settings import IngestSettings
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_log import KafkaLog
from dyncc_common.kafka_security import KafkaSecurityError, librdkafka_options, security_message

kafka_logger = logging.getLogger("dyncc.ingest.kafka")

Key = tuple[str, int]  # (topic, partition)


_DEFAULTS = IngestSettings.defaults()  # the settings table holds the defaults: not repeated here


DRAIN_PROBE_SECONDS = 5.0  # a --drain run's start probe: a dead broker is said in seconds


@dataclass
class KafkaConfig:
    """The loader's configuration; from_settings() builds it from `dyncc ingest`'s settings."""

    brokers: str
    topic: str = _DEFAULTS["topic"]
    group: str = _DEFAULTS["group"]
    max_rows: int = _DEFAULTS["max_rows"]  # ClickHouse writes (and merges) fewer parts for larger inserts
    min_rows: int = _DEFAULTS["min_rows"]  # flush at once when the insert thread is idle and this many rows wait
    max_bytes: int = _DEFAULTS["max_bytes"]
    max_wait: float = _DEFAULTS["max_wait"]
    inserters: int = _DEFAULTS["inserters"]  # concurrent INSERTs: ClickHouse runs each on its own thread
    poll_messages: int = 32
    drain: bool = _DEFAULTS["drain"]
    backoff_initial: float = 0.5
    backoff_max: float = _DEFAULTS["backoff_max"]
    lag_interval: float = 5.0
    kafka_timeout: float = 2.0  # bound of one housekeeping request (committed offsets, watermarks)
    log_interval: float = 10.0  # repeated Kafka messages: one summary line per interval
    connect_timeout: float = _DEFAULTS["connect_timeout"]  # wait_for_brokers(); 0 = do not check
    commit_timeout: float = 10.0  # a commit not answered by then is left pending and retried
    #: subscribed with no partition this long while a broker answers: a new consumer subscribes
    rejoin_after: float = 60.0
    #: where the start probe's time comes from, for its error line
    connect_option: str = "--connect-timeout"
    #: librdkafka's TLS / SASL options (dyncc_common.kafka_security.librdkafka_options); holds the password
    security: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_settings(cls, settings: IngestSettings) -> KafkaConfig:
        """The Kafka loader's configuration (needs --kafka: ConfigError)."""
        if not settings.kafka:
            raise ConfigError("--kafka BROKERS is needed to read from Kafka")
        connect, option = start_probe(settings.connect_timeout, settings.drain)
        return cls(
            brokers=settings.kafka,
            topic=settings.topic,
            group=settings.group,
            max_rows=settings.max_rows,
            min_rows=min(settings.min_rows, settings.max_rows),
            max_bytes=settings.max_bytes,
            max_wait=settings.max_wait,
            inserters=settings.inserters,
            drain=settings.drain,
            backoff_max=settings.backoff_max,
            connect_timeout=connect,
            connect_option=option,
            security=librdkafka_options(settings.kafka_security),
        )


def start_probe(connect_timeout: float, drain: bool) -> tuple[float, str]:
    """(seconds, the option they come from) of the start probe (wait_for_brokers).  Pure.

    A long-running loader waits up to --connect-timeout (0: no probe, wait forever) for a broker at
    start and rides out later outages; a --drain run waits at most DRAIN_PROBE_SECONDS (unless
    --connect-timeout is shorter, or 0)."""
    if drain and connect_timeout > DRAIN_PROBE_SECONDS:
        return DRAIN_PROBE_SECONDS, f"--drain: at most {DRAIN_PROBE_SECONDS:g}s"
    return connect_timeout, "--connect-timeout"


def consumer_settings(cfg: KafkaConfig, kafka_log: KafkaLog | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "bootstrap.servers": cfg.brokers,
        "group.id": cfg.group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        # librdkafka's default 1000 ms backoff when its fetch queue is full stalls
        # the loader about a second at a time (docs/performance.md).
        "fetch.queue.backoff.ms": 10,
        # Fetch in chunks larger than the default 1 MB per partition (with it the loader waited
        # for the broker much of a run) and keep a small prefetch queue: it fills whenever the
        # loader is behind, and librdkafka's buffers for it (the queue, the fetch responses being
        # decompressed) are resident memory: larger sizes cost much of the loader's peak RSS
        # (docs/performance.md, "Loader memory").  The loader holds its own backlog (max_rows), so
        # a deep queue buys nothing.
        "max.partition.fetch.bytes": 2 << 20,
        "fetch.max.bytes": 4 << 20,
        "queued.max.messages.kbytes": 4 << 10,
        "max.poll.interval.ms": 300_000,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1_000,
        "client.id": f"dyncc-ingest-{os.getpid()}",
        "logger": kafka_log or kafka_logger,
        **cfg.security,
    }
    if kafka_log is not None:
        settings["error_cb"] = kafka_log.error
    return settings


def wait_for_brokers(cfg: KafkaConfig, metrics: IngestMetrics | None = None) -> None:
    """Return once a broker answers a metadata request; ConfigError after cfg.connect_timeout (0: no check)."""
    if cfg.connect_timeout <= 0:
        return
    from confluent_kafka import Consumer, KafkaException

    def counted(err: Any) -> None:
        if metrics is not None:
            metrics.kafka_errors.labels("client").inc()

    quiet = KafkaLog(kafka_logger, quiet=True, on_error=counted)
    settings = consumer_settings(cfg, quiet)
    settings["client.id"] = f"dyncc-ingest-{os.getpid()}-connect"
    consumer = Consumer(settings)
    deadline = time.monotonic() + cfg.connect_timeout
    reason = "no answer"
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                consumer.list_topics(cfg.topic, timeout=min(left, 1.0))
                return
            except KafkaException as exc:
                if metrics is not None:
                    metrics.kafka_errors.labels("metadata").inc()
                reason = error_text(exc)
            consumer.poll(0)  # serves the client's error callbacks: the reason of the failure
            kind, text = quiet.security_failure()
            if kind:  # the broker answered, and refused us: waiting longer changes nothing
                raise KafkaSecurityError(f"Kafka {cfg.brokers}: {security_message(kind, text)}")
    finally:
        consumer.close()
    detail = quiet.last_error or reason
    raise ConfigError(
        f"cannot reach Kafka broker {cfg.brokers} within {cfg.connect_timeout:g}s ({cfg.connect_option}): {detail}"
    )


def error_text(exc: Exception) -> str:
    """KafkaException -> "NAME: description" (confluent-kafka wraps a KafkaError in args[0])."""
    err = exc.args[0] if exc.args else exc
    if hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(err)


def offsets_text(ends: dict[Key, int]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(ends.items()))


def partitions_text(partitions: list[Any]) -> str:
    return ", ".join(f"{p.topic}[{p.partition}]" for p in partitions) or "nothing"
