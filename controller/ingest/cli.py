"""`dyncc ingest`: load TcpInfoBatch messages from Kafka (or files) into ClickHouse / chDB.

  dyncc ingest --kafka kafka1:9092 --clickhouse clickhouse://default:@ch1:9000/dyncc
  dyncc ingest --kafka kafka1:9092 --clickhouse URL --drain         # exit 0 once caught up
  dyncc ingest --from-file /var/lib/dyncc/batches.bin --clickhouse URL

Runs more loaders with the same --group to share a topic's partitions.
Exactly-once design, tables and metrics: docs/ingest.md.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from controller.ingest.settings import IngestSettings
from dyncc_common.errors import StoreError

if TYPE_CHECKING:
    from controller.ingest.metrics import IngestMetrics

log = logging.getLogger("dyncc.ingest")


SETTINGS = IngestSettings


@contextlib.contextmanager
def cache_keeper(settings: IngestSettings, metrics: IngestMetrics) -> Iterator[None]:
    """The scoring cache keeper (controller/statistics/keeper.py) on a thread and a store
    connection of its own while the loader runs (--cache-every 0: none)."""
    if not settings.cache_every:
        yield
        return
    from controller.statistics.keeper import CacheKeeper, Tick, keep
    from controller.store import open_store

    done = threading.Event()

    def on_tick(tick: Tick) -> None:
        metrics.cache_buckets.inc(tick.computed)
        metrics.cache_tick_seconds.set(tick.seconds)

    def work() -> None:
        try:
            store = open_store(settings.clickhouse)
        except StoreError as exc:  # the loader itself retries; the keeper tries again later
            log.warning("scoring cache keeper: cannot open the store, not keeping the cache: %s", exc)
            return
        try:
            keep(CacheKeeper(store), settings.cache_every, done.wait, on_tick, lambda _: metrics.cache_errors.inc())
        finally:
            store.close()

    thread = threading.Thread(target=work, name="cache-keeper", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=30)


def run(settings: IngestSettings) -> int:
    from controller.ingest.metrics import IngestMetrics
    from controller.ingest.writer import BatchWriter
    from controller.store import open_store
    from dyncc_common.runtime import StopFlag, setup_logging, start_metrics

    setup_logging(settings.verbose)
    settings.check_host()
    files = [Path(p) for p in settings.from_file]
    from dyncc_common.heap import keep_freed_memory

    # A flush cycles several times --max-bytes of buffers (messages, columns, the Native packet,
    # the next group): keep them resident and reuse them instead of page-faulting them anew.
    # Touching one group's worth up front is enough for the first flushes (docs/performance.md).
    keep_freed_memory(prefault=settings.max_bytes)
    # A flush allocates thousands of small objects; with the default thresholds the cyclic GC
    # walked the whole heap often (docs/performance.md).  The loader makes no
    # long-lived cycles, so collect much less often.  (gc.freeze() would help more, but chDB
    # crashed at interpreter exit with frozen objects.)
    gc.set_threshold(50_000, 20, 20)
    metrics = IngestMetrics()
    start_metrics(settings.metrics_port, metrics.registry, settings.metrics_address)
    kafka_cfg = None
    if settings.kafka:
        from controller.ingest.kafka import KafkaConfig, wait_for_brokers

        kafka_cfg = KafkaConfig.from_settings(settings)
        wait_for_brokers(kafka_cfg, metrics)  # before the store: an unreachable broker is one line, exit 2
    store = open_store(settings.clickhouse)
    try:
        if not settings.no_migrate:
            from controller.store.migrate import apply_migrations

            apply_migrations(store)
        writer = BatchWriter(
            store,
            metrics=metrics,
            source=settings.topic,
            slice_rows=settings.slice_rows,
            block_rows=settings.block_rows,
        )
        try:
            if files:
                from controller.ingest.files import replay_file

                for path in files:
                    t0 = time.monotonic()
                    total = replay_file(writer, path, max_bytes=settings.max_bytes)
                    took = time.monotonic() - t0
                    log.info(
                        "replayed %s: %s; %.2f s, %.0f rows/s",
                        path,
                        total.summary(),
                        took,
                        total.rows / max(took, 1e-9),
                    )
                return 0
            from controller.ingest.kafka import KafkaLoader

            assert kafka_cfg is not None
            cfg = kafka_cfg
            from dyncc_common.kafka_security import describe

            log.info(
                "ingest %s (%s) topic %s group %s -> %s",
                settings.kafka,
                describe(settings.kafka_security),
                settings.topic,
                settings.group,
                store.url.redacted(),
            )
            stop = StopFlag()
            with stop.installed(), cache_keeper(settings, metrics):
                return KafkaLoader(writer, cfg, stop).run()
        finally:
            writer.close()
    finally:
        store.close()
