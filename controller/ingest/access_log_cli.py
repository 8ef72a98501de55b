"""`dyncc access-log`: load nginx access logs (the dyncc log_format) into http_requests.

  dyncc access-log --clickhouse URL --pop fra1 /var/log/nginx/access.log       # load, exit 0
  dyncc access-log --clickhouse URL --pop fra1 --follow 10s --metrics-port 9312 \\
        /var/log/nginx/access.log                                             # beside nginx

Once, it loads what is new in every FILE and exits 0.  With --follow INTERVAL it keeps loading
what is new every INTERVAL until SIGTERM/SIGINT (it stops between chunks): one log line per
cycle, Prometheus metrics on --metrics-port, and a store that fails is retried with backoff
(capped at --backoff-max) while the files wait.  Bad options exit 2 with one line.  A re-run
loads only lines not yet loaded (controller/ingest/access_loader.py; docs/ingest.md,
"Access logs").

Fault injection for tests: DYNCC_ACCESS_LOG_CRASH_AFTER_INSERT=1 makes the loader SIGKILL
itself after a chunk's rows landed and before its progress record.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from controller.ingest.settings import AccessLogSettings

if TYPE_CHECKING:
    from controller.ingest.access_loader import AccessLogLoader, LoadResult
    from controller.ingest.metrics import AccessLogMetrics
    from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.access_log")

SETTINGS = AccessLogSettings
CRASH_ENV = "DYNCC_ACCESS_LOG_CRASH_AFTER_INSERT"


def configure(parser: argparse.ArgumentParser) -> None:
    """The FILE arguments (the table's `files` row, which has no flag)."""
    parser.add_argument(
        "files", nargs="*", metavar="FILE", default=argparse.SUPPRESS, help="nginx access logs (dyncc log_format)"
    )


def run(settings: AccessLogSettings) -> int:
    from controller.ingest.access_loader import AccessLogLoader
    from controller.ingest.metrics import AccessLogMetrics
    from controller.store import open_store
    from dyncc_common.runtime import StopFlag, setup_logging, start_metrics

    setup_logging(settings.verbose)
    settings.check_host()
    metrics = AccessLogMetrics()
    start_metrics(settings.metrics_port, metrics.registry, settings.metrics_address)
    store = open_store(settings.clickhouse)
    try:
        if not settings.no_migrate:
            from controller.store.migrate import apply_migrations

            apply_migrations(store)
        loader = AccessLogLoader(
            store,
            pop=settings.pop,
            host=settings.host,
            v4_len=settings.prefix_v4,
            v6_len=settings.prefix_v6,
            chunk_lines=settings.chunk_lines,
            chunk_bytes=settings.chunk_bytes,
            metrics=metrics,
            after_insert=_crash_hook(),
        )
        stop = StopFlag()
        try:
            with stop.installed():
                if settings.follow is None:
                    total = _cycle(loader, settings.files, stop)
                    log.info("loaded %s (pop %s, host %s): %s", ", ".join(settings.files), settings.pop,
                             settings.host, total.summary())  # fmt: skip
                    return 0
                log.info(
                    "following %s every %gs (pop %s, host %s) -> %s",
                    ", ".join(settings.files),
                    settings.follow,
                    settings.pop,
                    settings.host,
                    store.url.redacted(),
                )
                return _follow(loader, settings, stop, metrics)
        finally:
            loader.close()
    finally:
        store.close()


def _cycle(loader: AccessLogLoader, files: tuple[str, ...], stop: StopFlag) -> LoadResult:
    from controller.ingest.access_loader import LoadResult

    total = LoadResult()
    for path in files:
        if stop.is_set():
            break
        total.add(loader.load(path, stop=stop.is_set))
    return total


def _follow(loader: AccessLogLoader, settings: AccessLogSettings, stop: StopFlag, metrics: AccessLogMetrics) -> int:
    from dyncc_common.errors import StoreError

    assert settings.follow is not None
    backoff = 0.0
    while not stop.is_set():
        started = time.monotonic()
        try:
            total = _cycle(loader, settings.files, stop)
        except StoreError as exc:
            metrics.retries.inc()
            backoff = min(max(0.5, backoff * 2), settings.backoff_max)
            log.warning("cycle failed: %s; retrying in %gs", exc, backoff)
            stop.wait(backoff)
            continue
        except OSError as exc:  # a file that cannot be read now (permissions, I/O): try again next cycle
            log.warning("cycle failed: %s", exc)
            stop.wait(settings.follow)
            continue
        backoff = 0.0
        elapsed = time.monotonic() - started
        metrics.cycle_seconds.observe(elapsed)
        log.info("cycle: %s", total.summary())
        stop.wait(max(settings.follow - elapsed, 0.0))
    log.info("stopped (%s)", stop.signal_name or "stop")
    return 0


def _crash_hook() -> Callable[[], None] | None:
    if os.environ.get(CRASH_ENV, "") in ("", "0"):
        return None

    def crash() -> None:
        log.warning("%s set: SIGKILL after the rows' insert, before the progress record", CRASH_ENV)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)

    return crash
