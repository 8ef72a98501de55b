"""`dyncc collect` settings: defaults < TOML file (--config) < command-line flags.

The TOML file holds the same keys as the long flags with '-' or '_'
(`interval = "10s"`, `sink = "kafka"`, `exclude = ["10.0.0.0/8"]`, ...), at the
top level or under a `[collect]` table.  Every value is validated here; a bad
one raises ConfigError with a one-line reason (the CLI exits 2).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collector.netlink.sockdiag import DEFAULT_STATES
from collector.netlink.sockdiag import parse_states as netlink_states
from dyncc_common.errors import ConfigError
from dyncc_common.names import check_brokers, check_pop
from dyncc_common.units import parse_duration, parse_size

if TYPE_CHECKING:
    from collector.telemetry.poller import PollerConfig

# numpy-free on import (a one-shot collector starts its dump before numpy loads):
# the filter, poller and codec modules are imported by build_config().
#: = schemas.tcpinfo_columns.DEFAULT_MAX_ROWS / DEFAULT_MAX_BYTES (a test keeps them equal)
DEFAULT_MAX_ROWS = 4096
DEFAULT_MAX_BYTES = 900_000
#: = schemas.tcpinfo_decode.HEADER_LIMITS (a test keeps them equal): ingest refuses longer header strings
HEADER_LIMITS = {"host": 255, "pop": 64, "netns": 255}

SINKS = ("kafka", "file", "stdout")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass
class CollectConfig:
    poller: PollerConfig
    interval: float = 10.0
    jitter: float = 1.0
    timeout: float = 30.0
    once: bool = False
    sink: str = "kafka"
    brokers: str = "127.0.0.1:9092"
    topic: str = "tcpinfo"
    queue_max_bytes: int = 64 << 20
    linger_ms: int = 50
    flush_timeout: float = 30.0
    out: str = ""
    rotate_bytes: int = 256 << 20
    keep: int = 5
    metrics_port: int = 0
    verbose: bool = False
    kafka_extra: dict[str, Any] = field(default_factory=dict)


# key -> (kind, default); kinds drive parsing of TOML and flag values alike
_KEYS: dict[str, tuple[str, Any]] = {
    "interval": ("duration", "10s"),
    "jitter": ("duration", None),  # default: 10% of the interval
    "timeout": ("duration", "30s"),
    "once": ("bool", False),
    "sink": ("str", "kafka"),
    "brokers": ("str", "127.0.0.1:9092"),
    "topic": ("str", "tcpinfo"),
    "queue_max_bytes": ("size", "64MiB"),
    "linger": ("duration", "50ms"),
    "flush_timeout": ("duration", "30s"),
    "out": ("str", ""),
    "rotate_bytes": ("size", "256MiB"),
    "keep": ("int", 5),
    "netns": ("list", []),
    "all_netns": ("bool", False),
    "state": ("list", list(DEFAULT_STATES)),
    "port": ("list", []),
    "exclude": ("list", []),
    "default_excludes": ("bool", True),
    "sample": ("int", 1),
    "min_bytes_acked": ("size", 0),
    "prefix_v4": ("int", 24),
    "prefix_v6": ("int", 56),
    "max_rows": ("int", DEFAULT_MAX_ROWS),
    "max_bytes": ("size", DEFAULT_MAX_BYTES),
    "host": ("str", ""),
    "pop": ("str", ""),
    "metrics_port": ("int", 0),
    "verbose": ("bool", False),
    "kafka": ("table", {}),  # extra librdkafka settings
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags; every default is None so a flag only overrides when given."""
    a = parser.add_argument
    a("--config", metavar="FILE", help="TOML file with the same keys as these flags")
    a("--interval", help="time between polls (default 10s)")
    a("--jitter", help="random +/- offset of each poll start (default 10%% of the interval)")
    a("--timeout", help="abandon a poll after this long (default 30s)")
    a("--once", action="store_const", const=True, help="one poll, flush the sink, exit")
    a("--sink", choices=SINKS, help="kafka (default), file or stdout (JSON lines)")
    a("--brokers", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    a("--topic", help="Kafka topic (default tcpinfo, what dyncc ingest reads)")
    a("--queue-max-bytes", help="bound of the in-memory send queue (default 64MiB)")
    a("--linger", help="Kafka linger (default 50ms)")
    a("--flush-timeout", help="how long to wait for delivery at exit (default 30s)")
    a("--out", help="file sink path (length-delimited TcpInfoBatch records)")
    a("--rotate-bytes", help="rotate the file sink at this size (default 256MiB)")
    a("--keep", help="rotated files to keep (default 5)")
    a("--netns", action="append", metavar="NAME", help="dump this network namespace (repeatable)")
    a("--all-netns", action="store_const", const=True, help="dump the own and every named namespace")
    a(
        "--state",
        action="append",
        metavar="STATE",
        help=f"TCP state to dump (repeatable; default {','.join(DEFAULT_STATES)})",
    )
    a("--port", action="append", metavar="PORT", help="only sockets with this local port (repeatable)")
    a("--exclude", action="append", metavar="CIDR", help="skip sockets whose peer is in CIDR (repeatable)")
    a(
        "--no-default-excludes",
        dest="default_excludes",
        action="store_const",
        const=False,
        help="do not skip loopback, link-local and unspecified peers",
    )
    a("--sample", help="export 1 in N sockets, chosen stably by socket cookie (default 1)")
    a("--min-bytes-acked", help="skip sockets with fewer bytes acked (default 0)")
    a("--prefix-v4", help="client prefix length for IPv4 (default 24)")
    a("--prefix-v6", help="client prefix length for IPv6 (default 56)")
    a("--max-rows", help=f"rows per batch (default {DEFAULT_MAX_ROWS})")
    a("--max-bytes", help=f"bytes per batch (default {DEFAULT_MAX_BYTES})")
    a("--host", help="host name in batch headers, at most 255 bytes (default: this host's name)")
    a("--pop", help="POP name in batch headers")
    a("--metrics-port", help="serve Prometheus metrics on this port (0 = off)")
    a("-v", "--verbose", action="store_const", const=True, help="debug logging")  # fmt: skip


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    try:
        if isinstance(value, bool | float):
            raise ValueError
        n = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"bad {what} {value!r}: not an integer") from None
    if not lo <= n <= hi:
        raise ConfigError(f"bad {what} {n}: must be between {lo} and {hi}")
    return n


def _read_toml(path: str) -> dict[str, Any]:
    import tomllib

    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"bad TOML in {path}: {exc}") from exc
    if isinstance(doc.get("collect"), dict):
        doc = doc["collect"]
    out: dict[str, Any] = {}
    for key, value in doc.items():
        norm = key.replace("-", "_")
        if norm == "no_default_excludes":
            norm, value = "default_excludes", not value
        if norm not in _KEYS:
            raise ConfigError(f"unknown setting {key!r} in {path}")
        kind = _KEYS[norm][0]
        if kind == "list" and not isinstance(value, list):
            value = [value]
        if kind == "bool" and not isinstance(value, bool):
            raise ConfigError(f"bad {key} {value!r} in {path}: must be true or false")
        if kind == "table" and not isinstance(value, dict):
            raise ConfigError(f"bad {key} in {path}: must be a table")
        out[norm] = value
    return out


def load_raw(args: argparse.Namespace) -> dict[str, Any]:
    """Defaults < the TOML file < the flags, not yet validated (ConfigError for a bad file)."""
    raw: dict[str, Any] = {k: v for k, (_, v) in _KEYS.items()}
    if getattr(args, "config", None):
        raw.update(_read_toml(args.config))
    for key in _KEYS:
        value = getattr(args, key, None)
        if value is not None:
            raw[key] = value
    return raw


def load_config(args: argparse.Namespace) -> CollectConfig:
    """Merge defaults, the TOML file and the flags; validate; ConfigError on any bad value."""
    return build_config(load_raw(args))


def parse_states(items: Any) -> list[int]:
    """State names (repeatable, comma-separated) -> kernel state numbers; ConfigError if unknown."""
    try:
        return netlink_states(items)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def build_config(raw: dict[str, Any]) -> CollectConfig:
    from collector.telemetry.filters import DEFAULT_EXCLUDES, FilterSpec, parse_networks
    from collector.telemetry.poller import PollerConfig

    interval = parse_duration(raw["interval"], "interval")
    if interval <= 0:
        raise ConfigError(f"bad interval {raw['interval']!r}: must be positive")
    jitter = interval * 0.1 if raw["jitter"] is None else parse_duration(raw["jitter"], "jitter")
    if jitter >= interval:
        raise ConfigError(f"bad jitter {raw['jitter']!r}: must be smaller than the interval")
    timeout = parse_duration(raw["timeout"], "timeout")
    if timeout <= 0:
        raise ConfigError(f"bad timeout {raw['timeout']!r}: must be positive")
    sink = str(raw["sink"])
    if sink not in SINKS:
        raise ConfigError(f"bad sink {sink!r}: use one of {', '.join(SINKS)}")
    out = str(raw["out"] or "")
    if sink == "file" and not out:
        raise ConfigError("--sink file needs --out PATH")
    brokers = str(raw["brokers"]).strip()
    topic = str(raw["topic"])
    if sink == "kafka":
        if not brokers:
            raise ConfigError("--sink kafka needs --brokers host:port[,host:port]")
        check_brokers(brokers, "--brokers")
        if not _TOPIC.match(topic):
            raise ConfigError(f"bad topic {topic!r}: letters, digits, '.', '_', '-' only")
    if sink == "file":
        parent = os.path.dirname(os.path.abspath(out))
        while not os.path.exists(parent):  # the sink creates missing directories
            parent = os.path.dirname(parent)
        if os.path.isdir(out) or not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(f"bad --out {out!r}: cannot create a file there")
    if raw["pop"]:
        check_pop(str(raw["pop"]))

    states = parse_states(raw["state"])
    if not states:
        raise ConfigError("no TCP state selected")
    ports: set[int] = set()
    for item in raw["port"]:
        for part in str(item).split(","):
            ports.add(_int(part, "port", 1, 65535))
    excludes = [str(x) for x in raw["exclude"]]
    if raw["default_excludes"]:
        excludes = list(DEFAULT_EXCLUDES) + excludes
    try:
        nets = parse_networks(excludes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    netns = [str(n) for n in raw["netns"]]
    for name in netns:
        path = name if "/" in name else f"/var/run/netns/{name}"
        if not os.path.exists(path):
            raise ConfigError(f"network namespace {name!r} does not exist ({path})")
    if netns and raw["all_netns"]:
        raise ConfigError("use either --netns or --all-netns, not both")
    try:
        spec = FilterSpec(
            states=frozenset(states),
            local_ports=frozenset(ports),
            exclude=tuple(nets),
            sample_n=_int(raw["sample"], "sample", 1, 1 << 30),
            min_bytes_acked=parse_size(raw["min_bytes_acked"], "min-bytes-acked"),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    max_bytes = parse_size(raw["max_bytes"], "max-bytes")
    if not 4096 <= max_bytes <= 64 << 20:
        raise ConfigError(f"bad max-bytes {max_bytes}: must be between 4096 and 64MiB")
    host = str(raw["host"] or socket.gethostname())
    pop = str(raw["pop"])
    for key, value in (("host", host), ("pop", pop), *(("netns", n) for n in netns)):
        size = len(value.encode("utf-8", "surrogateescape"))
        if size > HEADER_LIMITS[key]:
            raise ConfigError(
                f"bad {key} {value[:32]!r}...: {size} bytes, over the {HEADER_LIMITS[key]}-byte limit "
                "of batch headers (ingest would dead-letter every batch)"
            )
    poller = PollerConfig(
        host=host,
        pop=pop,
        netns=tuple(netns),
        all_netns=bool(raw["all_netns"]),
        states=tuple(sorted(set(states))),
        filters=spec,
        prefix_v4=_int(raw["prefix_v4"], "prefix-v4", 0, 32),
        prefix_v6=_int(raw["prefix_v6"], "prefix-v6", 0, 128),
        max_rows=_int(raw["max_rows"], "max-rows", 1, 1_000_000),
        max_bytes=max_bytes,
    )
    return CollectConfig(
        poller=poller,
        interval=interval,
        jitter=jitter,
        timeout=timeout,
        once=bool(raw["once"]),
        sink=sink,
        brokers=brokers,
        topic=topic,
        queue_max_bytes=parse_size(raw["queue_max_bytes"], "queue-max-bytes"),
        linger_ms=int(parse_duration(raw["linger"], "linger") * 1000),
        flush_timeout=parse_duration(raw["flush_timeout"], "flush-timeout"),
        out=out,
        rotate_bytes=max(parse_size(raw["rotate_bytes"], "rotate-bytes"), 1),
        keep=_int(raw["keep"], "keep", 0, 1000),
        metrics_port=_int(raw["metrics_port"], "metrics-port", 0, 65535),
        verbose=bool(raw["verbose"]),
        kafka_extra=dict(raw["kafka"]),
    )
