"""The `dyncc collect` loop: schedule polls, feed the sink, count, log, flush on stop.

Polls start every `interval` +/- `jitter`; each batch goes to the sink as soon
as the poller has it.  A poll that takes longer than the interval (dump +
encode + hand-off to the sink) is counted as an overrun and
the next poll starts at once; a poll that passes its timeout is abandoned and
counted.  On SIGTERM/SIGINT (StopFlag) the loop ends and the sink is flushed.
A one-shot run (--once) logs one line after the flush: the poll's summary, or
on failure one error line with the reason and that summary.
"""

from __future__ import annotations

import logging
import random
import time

from collector.netlink.sockdiag import DumpTimeout
from collector.telemetry import timeline
from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.poller import Poller, PollerConfig, PollResult
from collector.telemetry.prefetch import Prefetch
from collector.telemetry.settings import CollectSettings
from collector.telemetry.sinks import FileSink, KafkaSink, KafkaStart, Sink, StdoutSink
from collector.telemetry.start import start_kafka
from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.collect")


def make_sink(cfg: CollectSettings, metrics: CollectMetrics, kafka: KafkaStart | None = None) -> Sink:
    """The configured sink; for Kafka on `kafka`'s producer if given (start.start_kafka), else a new one."""
    if cfg.sink == "file":
        try:
            return FileSink(cfg.out, metrics, rotate_bytes=cfg.rotate_bytes, keep=cfg.keep)
        except OSError as exc:
            raise ConfigError(f"cannot open {cfg.out}: {exc.strerror or exc}") from exc
    if cfg.sink == "stdout":
        return StdoutSink(metrics)
    try:
        start = kafka if kafka is not None else start_kafka(cfg)
        return KafkaSink(start, cfg.topic, metrics, queue_max_bytes=cfg.queue_max_bytes)
    except Exception as exc:  # confluent_kafka.KafkaException on bad settings
        raise ConfigError(f"bad Kafka settings: {exc}") from exc


def record(metrics: CollectMetrics, result: PollResult, took: float) -> None:
    metrics.polls.inc()
    metrics.poll_duration.observe(took)
    metrics.sockets_seen.inc(result.seen)
    metrics.sockets_exported.inc(result.exported)
    for reason, n in result.filtered.items():
        metrics.sockets_filtered.labels(reason).inc(n)
    for kind, n in result.errors.items():
        metrics.parse_errors.labels(kind).inc(n)
    metrics.batches.inc(result.sent_batches)
    metrics.batch_bytes.inc(result.sent_bytes)
    metrics.netns_errors.inc(len(result.failed_netns))


class CollectLoop:
    def __init__(
        self,
        cfg: CollectSettings,
        sink: Sink,
        metrics: CollectMetrics,
        stop: StopFlag,
        prefetch: Prefetch | None = None,
    ) -> None:
        self.cfg = cfg
        self.sink = sink
        self.metrics = metrics
        self.stop = stop
        self.poller = Poller(PollerConfig.from_settings(cfg), prefetch=prefetch)
        self.polls = 0
        self.last_summary = ""

    def poll_once(self) -> float:
        """One poll handed to the sink; returns its duration in seconds."""
        t0 = time.monotonic()
        self.sink.begin_poll()
        try:
            result = self.poller.poll(deadline=t0 + self.cfg.timeout, emit=self.sink.send)
        except DumpTimeout:
            self.sink.end_poll()
            self.metrics.poll_timeouts.inc()
            took = time.monotonic() - t0
            log.warning("poll abandoned after %.3fs (timeout %.3fs)", took, self.cfg.timeout)
            return took
        self.sink.end_poll()
        if self.cfg.once:
            timeline.mark("polled")
        took = time.monotonic() - t0
        record(self.metrics, result, took)
        self.polls += 1
        filtered = sum(result.filtered.values())
        errors = sum(result.errors.values())
        self.last_summary = (
            f"poll {self.polls}: netns={len(result.namespaces)} seen={result.seen} exported={result.exported} "
            f"filtered={filtered} errors={errors} batches={result.sent_batches} bytes={result.sent_bytes} "
            f"took={took:.3f}s queue={int(self.metrics.value('dyncc_collect_queue_depth'))}"
        )
        if not self.cfg.once:  # a one-shot run logs it after the flush, with the outcome
            log.info("%s", self.last_summary)
        return took

    def run(self) -> int:
        """Poll until stopped (or once); flush; 0 if everything was delivered, else 1."""
        cfg = self.cfg
        while not self.stop.is_set():
            t0 = time.monotonic()
            took = self.poll_once()
            if cfg.once:
                break
            if took > cfg.interval:
                self.metrics.overruns.inc()
                log.warning("poll took %.3fs, longer than the %.3fs interval", took, cfg.interval)
                next_start = time.monotonic()
            else:
                next_start = t0 + cfg.interval + random.uniform(-cfg.jitter, cfg.jitter)
            while not self.stop.is_set():
                left = next_start - time.monotonic()
                if left <= 0:
                    break
                self.sink.service(0)
                self.stop.wait(min(left, 0.1))
        if self.stop.is_set():
            log.info("stopping (%s): flushing the sink", self.stop.signal_name or "stop")
        undelivered = self.sink.close(cfg.flush_timeout)
        timeline.mark("closed")
        if undelivered:
            reason = self.sink.last_error() if isinstance(self.sink, KafkaSink) else ""
            log.error(
                "%d batches were not delivered%s%s",
                undelivered,
                f" ({reason})" if reason else "",
                f"; {self.last_summary}" if cfg.once and self.last_summary else "",
            )
            if cfg.once:
                log.debug("timeline: %s", timeline.line())
            return 1
        if cfg.once and self.last_summary:
            log.info("%s", self.last_summary)
        if cfg.once:
            log.debug("timeline: %s", timeline.line())
        return 0
