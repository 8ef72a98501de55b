"""`dyncc collect`: dump every TCP socket over netlink and export TcpInfoBatch batches.

Examples:
  dyncc collect --once --sink stdout | jq .          # look at this host's sockets
  dyncc collect --brokers kafka1:9092 --pop fra1 --port 443 --metrics-port 9310
  dyncc collect --config /etc/dyncc/collect.toml --all-netns
"""

from __future__ import annotations

import argparse
import os
import sys

from collector.collect_config import add_arguments, load_config


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 2)[2] if __doc__ else None
    add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from collector.collect_metrics import CollectMetrics
    from collector.collect_runner import CollectLoop, make_sink
    from collector.daemon import StopFlag, setup_logging, start_metrics

    cfg = load_config(args)
    setup_logging(cfg.verbose)
    metrics = CollectMetrics(prometheus=cfg.metrics_port != 0)
    start_metrics(cfg.metrics_port, metrics.registry)
    sink = make_sink(cfg, metrics)
    stop = StopFlag()
    with stop.installed():
        try:
            return CollectLoop(cfg, sink, metrics, stop).run()
        except BrokenPipeError:  # `--sink stdout | head`: the reader went away
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
