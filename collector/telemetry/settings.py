"""`dyncc collect` settings: the CollectSettings table (defaults < TOML file (--config) < flags).

The TOML file holds the same keys as the long flags with '-' or '_'
(`interval = "10s"`, `sink = "kafka"`, `exclude = ["10.0.0.0/8"]`, ...), at the
top level or under a `[collect]` table (dyncc_common.settings builds the flags,
the file loading and docs/settings.md from the rows below).  Every value is
checked when the settings are built; a bad one raises ConfigError with a
one-line reason (the CLI exits 2).  `check_host()` looks at the machine (the
--out directory, the --netns namespaces).  This module stays numpy-free, as a
one-shot collector starts its dump before numpy loads, and imports nothing of
the poller: `collector.telemetry.poller.PollerConfig.from_settings` builds the
poller's configuration from these settings.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any, ClassVar

from collector.netlink.sockdiag import DEFAULT_STATES
from collector.netlink.sockdiag import parse_states as netlink_states
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import KafkaSecurity
from dyncc_common.names import TOPIC_NAME, check_brokers, check_pop
from dyncc_common.runtime import METRICS_ADDRESS
from dyncc_common.settings import (
    BOOL,
    CONFIG_FILE,
    DURATION,
    INT,
    SIZE,
    STR,
    TABLE,
    VERBOSE,
    Settings,
    in_range,
    part,
    reuse,
    setting,
)
from schemas.wire import (  # the contract's caps and limits (numpy-free): ingest refuses longer headers
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    HEADER_LIMITS,
    TELEMETRY_TOPIC,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "EXPORT_ADDRESSES",
    "HEADER_LIMITS",
    "SINKS",
    "CollectSettings",
    "parse_states",
]

SINKS = ("kafka", "file", "stdout")
#: --export-addresses: the remote address as dumped, or its client prefix (host bits zeroed)
EXPORT_ADDRESSES = ("full", "prefix")


def parse_states(items: Any) -> list[int]:
    """State names (repeatable, comma-separated) -> kernel state numbers; ConfigError if unknown."""
    try:
        return netlink_states(items)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _positive(value: float, what: str) -> float:
    if value <= 0:
        raise ConfigError(f"bad {what} {value:g}: must be positive")
    return value


def _tcp_state(value: str, what: str) -> str:
    parse_states([value])
    return value


def _cidr(value: str, what: str) -> str:
    """A peer range of --exclude: checked at parse time, before anything connects."""
    try:
        ipaddress.ip_network(str(value).strip(), strict=False)
    except ValueError as exc:
        raise ConfigError(f"bad CIDR {value!r}: {exc}") from None
    return value


def _optional_pop(value: str, what: str) -> str:
    return check_pop(value, what) if value else value


def _linger_ms(seconds: float) -> int:
    return int(seconds * 1000)


def _at_least_one(n: int) -> int:
    return max(n, 1)


@dataclasses.dataclass(frozen=True)
class CollectSettings(Settings):
    """Dump every TCP socket over netlink and export TcpInfoBatch batches (edge host)."""

    COMPONENT: ClassVar[str] = "collect"

    config: str | None = reuse(CONFIG_FILE)
    interval: float = setting("10s", DURATION, "time between polls", validator=_positive)
    jitter: float = setting(None, DURATION, "random +/- offset of each poll start", default_text="10% of the interval")
    timeout: float = setting("30s", DURATION, "abandon a poll after this long", validator=_positive)
    once: bool = setting(False, BOOL, "one poll, flush the sink, exit")
    sink: str = setting("kafka", STR, "kafka, file or stdout (JSON lines)", choices=SINKS)
    brokers: str = setting("127.0.0.1:9092", STR, "Kafka bootstrap servers")
    topic: str = setting(TELEMETRY_TOPIC, STR, "Kafka topic (what dyncc ingest reads)")
    queue_max_bytes: int = setting("64MiB", SIZE, "bound of the in-memory send queue")
    linger_ms: int = setting("50ms", DURATION, "Kafka linger", flag="--linger", convert=_linger_ms)
    flush_timeout: float = setting("30s", DURATION, "how long to wait for delivery at exit")
    out: str = setting("", STR, "file sink path (length-delimited TcpInfoBatch records)")
    rotate_bytes: int = setting("256MiB", SIZE, "rotate the file sink at this size", convert=_at_least_one)
    keep: int = setting(5, INT, "rotated files to keep", validator=in_range(0, 1000))
    netns: tuple[str, ...] = setting(
        (), STR, "dump this network namespace (repeatable)", repeatable=True, metavar="NAME"
    )
    all_netns: bool = setting(False, BOOL, "dump the own and every named namespace")
    state: tuple[str, ...] = setting(
        DEFAULT_STATES, STR, "TCP state to dump (repeatable, comma-separated)", repeatable=True, separator=",",
        metavar="STATE", validator=_tcp_state,
    )  # fmt: skip
    port: tuple[int, ...] = setting(
        (), INT, "only sockets with this local port (repeatable)", repeatable=True, separator=",", metavar="PORT",
        validator=in_range(1, 65535),
    )  # fmt: skip
    exclude: tuple[str, ...] = setting(
        (), STR, "skip sockets whose peer is in CIDR (repeatable)", repeatable=True, metavar="CIDR", validator=_cidr
    )
    default_excludes: bool = setting(
        True, BOOL, "skip loopback, link-local and unspecified peers", flag="", negate_flag="--no-default-excludes",
        negate_help="do not skip loopback, link-local and unspecified peers",
    )  # fmt: skip
    sample: int = setting(
        1, INT, "export 1 in N sockets, chosen stably by socket cookie", validator=in_range(1, 1 << 30)
    )
    min_bytes_acked: int = setting(0, SIZE, "skip sockets with fewer bytes acked")
    prefix_v4: int = setting(24, INT, "client prefix length for IPv4", validator=in_range(0, 32))
    prefix_v6: int = setting(56, INT, "client prefix length for IPv6", validator=in_range(0, 128))
    export_addresses: str = setting(
        "full", STR, "client (remote) address in exported rows: full, or prefix (host bits zeroed past "
        "--prefix-v4 / --prefix-v6: the client prefix, no client's own address leaves the host)",
        choices=EXPORT_ADDRESSES, metavar="full|prefix",
    )  # fmt: skip
    max_rows: int = setting(DEFAULT_MAX_ROWS, INT, "rows per batch", validator=in_range(1, 1_000_000))
    max_bytes: int = setting(DEFAULT_MAX_BYTES, SIZE, "bytes per batch", validator=in_range(4096, 64 << 20))
    host: str = setting("", STR, "host name in batch headers, at most 255 bytes", default_text="this host's name")
    pop: str = setting("", STR, "POP name in batch headers", validator=_optional_pop)
    metrics_port: int = setting(0, INT, "serve Prometheus metrics on this port (0 = off)", validator=in_range(0, 65535))
    metrics_address: str = reuse(METRICS_ADDRESS)
    verbose: bool = reuse(VERBOSE)
    kafka: Mapping[str, Any] = setting({}, TABLE, "extra librdkafka settings (TOML only)", flag="")
    kafka_security: KafkaSecurity = part(KafkaSecurity)

    def __post_init__(self) -> None:
        """Cross-field checks and the computed defaults (jitter, host); pure but for the host name."""
        if self.jitter is None:
            object.__setattr__(self, "jitter", self.interval * 0.1)
        if self.jitter >= self.interval:
            raise ConfigError(f"bad jitter {self.jitter:g}s: must be smaller than the interval")
        if self.sink == "file" and not self.out:
            raise ConfigError("--sink file needs --out PATH")
        if self.sink == "kafka":
            brokers = self.brokers.strip()
            if not brokers:
                raise ConfigError("--sink kafka needs --brokers host:port[,host:port]")
            check_brokers(brokers, "--brokers")
            object.__setattr__(self, "brokers", brokers)
            if not TOPIC_NAME.match(self.topic):
                raise ConfigError(f"bad topic {self.topic!r}: letters, digits, '.', '_', '-' only")
        if not self.state:
            raise ConfigError("no TCP state selected")
        if self.netns and self.all_netns:
            raise ConfigError("use either --netns or --all-netns, not both")
        if not self.host:
            import socket

            object.__setattr__(self, "host", socket.gethostname())
        for key, value in (("host", self.host), ("pop", self.pop), *(("netns", n) for n in self.netns)):
            size = len(value.encode("utf-8", "surrogateescape"))
            if size > HEADER_LIMITS[key]:
                raise ConfigError(
                    f"bad {key} {value[:32]!r}...: {size} bytes, over the {HEADER_LIMITS[key]}-byte limit "
                    "of batch headers (ingest would dead-letter every batch)"
                )

    def check_host(self) -> None:
        """The machine: --out's directory can be written, each --netns exists (ConfigError)."""
        import os

        if self.sink == "file":
            parent = os.path.dirname(os.path.abspath(self.out))
            while not os.path.exists(parent):  # the sink creates missing directories
                parent = os.path.dirname(parent)
            if os.path.isdir(self.out) or not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
                raise ConfigError(f"bad --out {self.out!r}: cannot create a file there")
        for name in self.netns:
            path = name if "/" in name else f"/var/run/netns/{name}"
            if not os.path.exists(path):
                raise ConfigError(f"network namespace {name!r} does not exist ({path})")

    def dump_plan_settings(self) -> dict[str, Any]:
        """What decides the kernel dump, for the prefetch (collector.telemetry.start)."""
        return {"state": list(self.state), "netns": list(self.netns), "all_netns": self.all_netns}
