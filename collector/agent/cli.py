"""`dyncc agent`: apply signed per-prefix congestion configs as routes on an edge host.

    dyncc agent --kafka BROKERS --pop POP --public-key PEM [--netns NAME] ...
    dyncc agent --from-file CONFIG --once --pop POP --public-key PEM [--netns NAME]

The Kafka mode reconciles at start, applies each new config for its POP,
reconciles every --reconcile-every and whenever a covering route changes, and
reports an ApplyStatus each time.  --from-file --once is the break-glass path:
same checks, the status is printed as JSON on stdout; exit 0 when applied or
unchanged, 1 when refused or rolled back.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dyncc_common.errors import ConfigError
from dyncc_common.names import check_brokers, check_pop, check_topic
from dyncc_common.runtime import StopFlag, setup_logging, start_metrics
from dyncc_common.units import parse_duration

if TYPE_CHECKING:
    from collector.agent.core import Agent
    from schemas.congestion_pb2 import CongestionConfig

log = logging.getLogger("dyncc.agent")
RESERVED_PROTOS = {0: "unspec", 1: "redirect", 2: "kernel", 3: "boot", 4: "static"}


def configure(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("config source (one of)")
    src.add_argument("--kafka", metavar="BROKERS", help="Kafka bootstrap servers, e.g. kafka1:9092")
    src.add_argument(
        "--from-file",
        metavar="CONFIG",
        type=Path,
        help="apply one signed CongestionConfig file (binary or JSON) and exit (needs --once)",
    )
    parser.add_argument("--once", action="store_true", help="with --from-file: apply once and exit")
    parser.add_argument("--pop", required=True, help="the POP this host belongs to (config key)")
    parser.add_argument(
        "--public-key", required=True, type=Path, metavar="PEM", help="Ed25519 public key of the controller (PEM)"
    )
    parser.add_argument("--netns", default=None, help="network namespace to manage (default: this one)")
    parser.add_argument("--host", default=socket.gethostname(), help="host name in statuses (default: hostname)")
    parser.add_argument("--config-topic", default="dyncc-configs", help="compacted config topic (key = POP)")
    parser.add_argument("--status-topic", default="dyncc-apply-status", help="ApplyStatus topic (key = host)")
    parser.add_argument("--reconcile-every", default="60s", help="periodic reconcile interval (default 60s)")
    parser.add_argument(
        "--proto", type=int, default=250, help="routing protocol number tagging owned routes (default 250)"
    )
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="applied version and config (default /var/lib/dyncc/agent-POP)"
    )
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0 = off)")
    parser.add_argument("-v", "--verbose", action="store_true")


def _check_args(args: argparse.Namespace) -> float:
    if bool(args.kafka) == bool(args.from_file):
        raise ConfigError("give exactly one of --kafka BROKERS or --from-file CONFIG")
    if args.from_file and not args.once:
        raise ConfigError("--from-file applies one config: add --once")
    if args.once and not args.from_file:
        raise ConfigError("--once is only for --from-file")
    check_pop(args.pop)
    if not args.host or not args.host.strip():
        raise ConfigError("--host must not be empty")
    if args.kafka:
        check_brokers(args.kafka, "--kafka")
        check_topic(args.config_topic, "--config-topic")
        check_topic(args.status_topic, "--status-topic")
    if not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"bad --metrics-port {args.metrics_port}: 0 (off) or 1-65535")
    if args.state_dir is not None and args.state_dir.exists() and not args.state_dir.is_dir():
        raise ConfigError(f"bad --state-dir {args.state_dir}: not a directory")
    if not 1 <= args.proto <= 255 or args.proto in RESERVED_PROTOS:
        raise ConfigError(f"--proto {args.proto}: use a dedicated protocol number in 5..255 (default 250)")
    if args.netns and not os.path.exists(f"/run/netns/{args.netns}"):
        raise ConfigError(f"network namespace {args.netns!r} does not exist")
    every = parse_duration(args.reconcile_every, "--reconcile-every")
    if every <= 0:
        raise ConfigError("--reconcile-every must be positive")
    return every


def _read_config_file(path: Path) -> CongestionConfig:
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError

    from schemas.congestion_pb2 import CongestionConfig

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        if data.lstrip()[:1] == b"{":
            return json_format.Parse(data.decode(), CongestionConfig())
        return CongestionConfig.FromString(data)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not a CongestionConfig: {exc}") from exc


def _build_agent(args: argparse.Namespace) -> Agent:
    from collector.agent.core import Agent, AgentMetrics
    from collector.agent.routes import RouteTable
    from collector.agent.state import AgentState, StateError, default_state_dir
    from schemas.signing import load_public_key

    try:
        public_key = load_public_key(args.public_key)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load public key {args.public_key}: {exc}") from exc
    state_dir = args.state_dir or default_state_dir(args.pop)
    try:
        state = AgentState(state_dir, args.pop).load()
    except StateError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        table = RouteTable(args.netns, proto=args.proto)
    except OSError as exc:
        raise ConfigError(f"cannot open netlink in {args.netns or 'this namespace'}: {exc}") from exc
    return Agent(
        pop=args.pop,
        host=args.host,
        netns=args.netns,
        public_key=public_key,
        state=state,
        table=table,
        metrics=AgentMetrics(),
    )


def _run_once(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from schemas.congestion_pb2 import ApplyStatus

    config = _read_config_file(args.from_file)
    agent = _build_agent(args)
    try:
        status = agent.handle(config)
    finally:
        agent.table.close()
    print(json_format.MessageToJson(status, indent=None, preserving_proto_field_name=True))
    return 0 if status.result in (ApplyStatus.APPLIED, ApplyStatus.UNCHANGED) else 1


def _run_kafka(args: argparse.Namespace, every: float) -> int:
    from collector.agent.events import RouteEventWatcher
    from collector.agent.kafka import ConfigConsumer, StatusProducer

    agent = _build_agent(args)
    metrics = agent.metrics
    start_metrics(args.metrics_port, metrics.registry)
    stop = StopFlag()
    watcher = RouteEventWatcher(args.netns, args.proto)
    producer = StatusProducer(args.kafka, args.status_topic, on_error=lambda _e: metrics.kafka_errors.inc())
    consumer = ConfigConsumer(
        args.kafka,
        args.config_topic,
        args.pop,
        args.host,
        on_error=lambda _e: metrics.kafka_errors.inc(),
        on_malformed=metrics.malformed.inc,
    )
    log.info(
        "agent for POP %s on %s (netns %s, proto %d): config v%d in force, reconcile every %gs",
        args.pop,
        args.host,
        args.netns or "-",
        args.proto,
        agent.state.version,
        every,
    )
    try:
        with stop.installed():
            watcher.start()
            producer.send(agent.reconcile("start"))
            next_reconcile = time.monotonic() + every
            while not stop.is_set():
                configs = consumer.poll(0.25)
                for config in configs:
                    producer.send(agent.handle(config))
                if configs:
                    next_reconcile = time.monotonic() + every
                if watcher.changed.is_set():
                    stop.wait(0.2)  # let a burst of route changes settle
                    watcher.changed.clear()
                    metrics.route_events.inc()
                    producer.send(agent.reconcile("route-change"))
                if time.monotonic() >= next_reconcile:
                    producer.send(agent.reconcile("periodic"))
                    next_reconcile = time.monotonic() + every
        log.info("stopping (%s): owned routes stay in place", stop.signal_name or "stop")
    finally:
        watcher.stop()
        consumer.close()
        left = producer.flush(10)
        if left:
            log.warning("%d status messages not delivered at shutdown", left)
        agent.table.close()
    return 0


def run(args: argparse.Namespace) -> int:
    setup_logging(args.verbose)  # logs go to stderr; with --from-file stdout carries the JSON status
    every = _check_args(args)
    if args.from_file:
        return _run_once(args)
    return _run_kafka(args, every)
