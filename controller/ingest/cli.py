"""`dyncc ingest`: load TcpInfoBatch messages from Kafka (or files) into ClickHouse / chDB.

  dyncc ingest --kafka kafka1:9092 --clickhouse clickhouse://default:@ch1:9000/dyncc
  dyncc ingest --kafka kafka1:9092 --clickhouse URL --drain         # exit 0 once caught up
  dyncc ingest --from-file /var/lib/dyncc/batches.bin --clickhouse URL

Runs more loaders with the same --group to share a topic's partitions.
Exactly-once design, tables and metrics: docs/ingest.md.
"""

from __future__ import annotations

import argparse
import gc
import logging
from pathlib import Path

from dyncc_common.errors import ConfigError
from dyncc_common.units import parse_duration

log = logging.getLogger("dyncc.ingest")


def configure(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--kafka", metavar="BROKERS", help="Kafka bootstrap servers, host:port[,host:port]")
    a(
        "--clickhouse",
        required=True,
        metavar="URL",
        help="store URL: clickhouse://user:pass@host:port/db or chdb:///path/dir",
    )
    a("--topic", default="tcpinfo", help="Kafka topic (default tcpinfo)")
    a("--group", default="dyncc-ingest", help="Kafka consumer group (default dyncc-ingest)")
    a(
        "--from-file",
        metavar="PATH",
        action="append",
        default=[],
        help="replay a length-delimited batch file (collector --sink file) instead of Kafka; repeatable",
    )
    a("--drain", action="store_true", help="exit 0 once every assigned partition is caught up")
    a("--max-rows", type=int, default=300_000, help="flush after this many rows (default 300000)")
    a(
        "--min-rows",
        type=int,
        default=50_000,
        help="flush as soon as an insert thread is free and this many rows wait (default 50000)",
    )
    a("--max-bytes", type=int, default=128 << 20, help="flush after this many message bytes (default 128 MiB)")
    a("--max-wait", default="2s", help="flush buffered messages at least this often (default 2s)")
    a(
        "--inserters",
        type=int,
        default=2,
        metavar="N",
        help="groups inserted at once, each on its own ClickHouse connection (default 2; offsets are still "
        "committed in order)",
    )
    a("--backoff-max", default="30s", help="cap of the retry backoff while the store is down (default 30s)")
    a(
        "--connect-timeout",
        default="30s",
        help="at start, give up (exit 2) when no Kafka broker answers within this time (default 30s; 0 = wait "
        "forever); later broker outages are ridden out",
    )
    a("--no-migrate", action="store_true", help="do not apply schema migrations at start")
    a("--metrics-port", type=int, default=9311, help="Prometheus metrics port (0 = off, default 9311)")
    a("-v", "--verbose", action="store_true", help="debug logging")


def run(args: argparse.Namespace) -> int:
    from controller.ingest.metrics import IngestMetrics
    from controller.ingest.writer import BatchWriter
    from controller.store import open_store
    from dyncc_common.runtime import StopFlag, setup_logging, start_metrics

    setup_logging(args.verbose)
    if bool(args.kafka) == bool(args.from_file):
        raise ConfigError("give either --kafka BROKERS or --from-file PATH")
    if args.kafka:
        from dyncc_common.names import check_brokers, check_topic

        check_brokers(args.kafka, "--kafka")
        check_topic(args.topic, "--topic")
        if not args.group.strip():
            raise ConfigError("--group must not be empty")
    for value, name in (
        (args.max_rows, "--max-rows"),
        (args.min_rows, "--min-rows"),
        (args.max_bytes, "--max-bytes"),
        (args.inserters, "--inserters"),
    ):
        if value < 1:
            raise ConfigError(f"{name} must be positive, got {value}")
    max_wait = parse_duration(args.max_wait, "--max-wait")
    backoff_max = parse_duration(args.backoff_max, "--backoff-max")
    connect_timeout = parse_duration(args.connect_timeout, "--connect-timeout")
    files = [Path(p) for p in args.from_file]
    for path in files:
        if not path.is_file():
            raise ConfigError(f"--from-file {path}: no such file")
    from dyncc_common.heap import keep_freed_memory

    # A flush cycles several times --max-bytes of buffers (messages, columns, the Native packet,
    # the next group): keep them resident and reuse them instead of page-faulting them anew.
    keep_freed_memory(prefault=4 * args.max_bytes)
    # A flush allocates thousands of small objects; with the default thresholds the cyclic GC
    # walked the whole heap often enough to take ~6% of the loader's CPU.  The loader makes no
    # long-lived cycles, so collect much less often.  (gc.freeze() would help more, but chDB
    # crashed at interpreter exit with frozen objects.)
    gc.set_threshold(50_000, 20, 20)
    metrics = IngestMetrics()
    start_metrics(args.metrics_port, metrics.registry)
    kafka_cfg = None
    if args.kafka:
        from controller.ingest.kafka import KafkaConfig, wait_for_brokers

        kafka_cfg = KafkaConfig(
            brokers=args.kafka,
            topic=args.topic,
            group=args.group,
            max_rows=args.max_rows,
            min_rows=min(args.min_rows, args.max_rows),
            max_bytes=args.max_bytes,
            max_wait=max_wait,
            inserters=args.inserters,
            drain=args.drain,
            backoff_max=backoff_max,
            connect_timeout=connect_timeout,
        )
        wait_for_brokers(kafka_cfg, metrics)  # before the store: an unreachable broker is one line, exit 2
    store = open_store(args.clickhouse)
    try:
        if not args.no_migrate:
            from controller.store.migrate import apply_migrations

            apply_migrations(store)
        writer = BatchWriter(store, metrics=metrics, source=args.topic)
        try:
            if files:
                from controller.ingest.files import replay_file

                for path in files:
                    total = replay_file(writer, path, max_bytes=args.max_bytes)
                    log.info("replayed %s: %s", path, total.summary())
                return 0
            from controller.ingest.kafka import KafkaLoader

            assert kafka_cfg is not None
            cfg = kafka_cfg
            log.info("ingest %s topic %s group %s -> %s", args.kafka, args.topic, args.group, store.url.redacted())
            stop = StopFlag()
            with stop.installed():
                return KafkaLoader(writer, cfg, stop).run()
        finally:
            writer.close()
    finally:
        store.close()
