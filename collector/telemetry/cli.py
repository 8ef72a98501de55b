"""`dyncc collect`: dump every TCP socket over netlink and export TcpInfoBatch batches.

Examples:
  dyncc collect --once --sink stdout | jq .          # look at this host's sockets
  dyncc collect --brokers kafka1:9092 --pop fra1 --port 443 --metrics-port 9310
  dyncc collect --config /etc/dyncc/collect.toml --all-netns
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import TYPE_CHECKING

from collector.telemetry import timeline
from collector.telemetry.prefetch import Prefetch
from collector.telemetry.settings import CollectSettings
from collector.telemetry.start import (
    check_kafka,
    discard_early_prefetch,
    exit_now,
    process_is_dyncc,
    start_kafka,
    start_prefetch,
)

if TYPE_CHECKING:
    from collector.telemetry.sinks import KafkaStart

SETTINGS = CollectSettings


def configure(parser: argparse.ArgumentParser) -> None:
    """The examples under --help (the flags come from SETTINGS)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 2)[2] if __doc__ else None


def run(settings: CollectSettings) -> int:
    settings.check_host()  # numpy-free: --once starts the kernel dump before the heavy imports
    once = settings.once
    gc_was_enabled = gc.isenabled()
    prefetch = None
    kafka = None
    if once:
        gc.disable()  # a one-shot run frees its memory by exiting
        prefetch = start_prefetch(settings.dump_plan_settings())
        if settings.sink == "kafka":  # connects in librdkafka's threads while numpy loads
            kafka = start_kafka(settings)
    else:
        discard_early_prefetch()  # "--once" was an option's value: no one-shot run after all
    try:
        code = _run(settings, prefetch, kafka)
    finally:
        if prefetch is not None:
            prefetch.close()
        if gc_was_enabled:
            gc.enable()
    if once and process_is_dyncc():
        exit_now(code)  # everything is flushed and acknowledged: skip the interpreter's teardown
    return code


def _run(cfg: CollectSettings, prefetch: Prefetch | None, kafka: KafkaStart | None) -> int:
    from collector.telemetry.metrics import CollectMetrics
    from collector.telemetry.runner import CollectLoop, make_sink
    from dyncc_common.runtime import StopFlag, setup_logging, start_metrics

    timeline.mark("imported")
    setup_logging(cfg.verbose)
    if not cfg.once and process_is_dyncc():
        from dyncc_common.heap import keep_freed_memory

        keep_freed_memory()  # each poll cycles ~50 MB of buffers per 100k sockets: reuse them
    metrics = CollectMetrics(prometheus=cfg.metrics_port != 0)
    start_metrics(cfg.metrics_port, metrics.registry, cfg.metrics_address)
    sink = make_sink(cfg, metrics, kafka)
    timeline.mark("sink")
    if cfg.sink == "kafka":
        check_kafka(cfg, sink)  # a wrong password or certificate: one line, exit 2
    stop = StopFlag()
    with stop.installed():
        try:
            return CollectLoop(cfg, sink, metrics, stop, prefetch).run()
        except BrokenPipeError:  # `--sink stdout | head`: the reader went away
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
