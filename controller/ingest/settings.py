"""`dyncc ingest` and `dyncc access-log` settings: the IngestSettings and AccessLogSettings tables
(defaults < TOML file (--config) < flags).

dyncc_common.settings builds the flags, the `[ingest]` TOML loading and docs/settings.md
from the rows below.  Values are checked when the settings are built (ConfigError, one
line); `check_host()` looks at the machine (the --from-file files, the access logs).  The Kafka
loader's KafkaConfig (controller/ingest/kafka.py, `KafkaConfig.from_settings`) takes its defaults
from this table (defined here only); this module imports nothing of the loader.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import ClassVar

from controller.store.settings import STORE_URL_HELP, check_store_url
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import KafkaSecurity
from dyncc_common.names import check_brokers, check_pop, check_topic
from dyncc_common.runtime import METRICS_ADDRESS
from dyncc_common.settings import (
    BOOL,
    CONFIG_FILE,
    DURATION,
    INT,
    SIZE,
    STR,
    VERBOSE,
    Settings,
    at_least,
    in_range,
    part,
    reuse,
    setting,
)
from schemas.wire import HEADER_LIMITS, TELEMETRY_TOPIC

__all__ = ["AccessLogSettings", "IngestSettings"]


@dataclasses.dataclass(frozen=True)
class IngestSettings(Settings):
    """Load TcpInfoBatch messages from Kafka (or files) into ClickHouse / chDB."""

    COMPONENT: ClassVar[str] = "ingest"

    kafka: str | None = setting(
        None, STR, "Kafka bootstrap servers, host:port[,host:port]", metavar="BROKERS", validator=check_brokers
    )
    clickhouse: str = setting(None, STR, STORE_URL_HELP, metavar="URL", validator=check_store_url, required=True)
    topic: str = setting(TELEMETRY_TOPIC, STR, "Kafka topic")  # checked with --kafka only (__post_init__)
    group: str = setting("dyncc-ingest", STR, "Kafka consumer group")
    from_file: tuple[str, ...] = setting(
        (), STR, "replay a length-delimited batch file (collector --sink file) instead of Kafka; repeatable",
        repeatable=True, metavar="PATH",
    )  # fmt: skip
    drain: bool = setting(False, BOOL, "exit 0 once every assigned partition is caught up")
    max_rows: int = setting(
        300_000, INT,
        "flush after this many rows; the Kafka loader holds at most about this many (buffered and in flight)",
        validator=at_least(1),
    )  # fmt: skip
    min_rows: int = setting(
        50_000, INT, "flush as soon as an insert thread is free and this many rows wait", validator=at_least(1)
    )
    max_bytes: int = setting(
        128 << 20, INT,
        "flush after this many message bytes; the Kafka loader holds at most about this many",
        default_text="134217728 (128 MiB)", validator=at_least(1),
    )  # fmt: skip
    max_wait: float = setting("2s", DURATION, "flush buffered messages at least this often")
    slice_rows: int = setting(
        150_000, INT,
        "insert a flushed group in slices of at most this many rows (whole batches, one INSERT each)",
        validator=at_least(1),
    )  # fmt: skip
    block_rows: int = setting(
        20_000, INT,
        "on a ClickHouse server, send each slice's INSERT as Native blocks of at most this many rows "
        "(whole batches), each decoded as it is sent: the loader holds one block's columns per insert "
        "thread, not the slice's (chDB and clusters decode a slice whole)",
        validator=at_least(1),
    )  # fmt: skip
    inserters: int = setting(
        2, INT, "groups inserted at once, each on its own ClickHouse connection (offsets are still committed in order)",
        metavar="N", validator=at_least(1),
    )  # fmt: skip
    cache_every: float = setting(
        "1m", DURATION,
        "with --kafka, fill the scoring cache (the default scoring's per-bucket statistics) this often as "
        "data arrives, on a connection of its own, so a controller never merges a whole window (0 = off)",
        validator=at_least(0),
    )  # fmt: skip
    backoff_max: float = setting("30s", DURATION, "cap of the retry backoff while the store is down")
    connect_timeout: float = setting(
        "30s", DURATION,
        "at start, give up (exit 2) when no Kafka broker answers within this time (0 = wait forever; with "
        "--drain at most 5s); later broker outages are ridden out",
    )  # fmt: skip
    no_migrate: bool = setting(False, BOOL, "do not apply schema migrations at start")
    metrics_port: int = setting(9311, INT, "Prometheus metrics port (0 = off)", validator=in_range(0, 65535))
    metrics_address: str = reuse(METRICS_ADDRESS)
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)
    kafka_security: KafkaSecurity = part(KafkaSecurity)

    def __post_init__(self) -> None:
        """Cross-field checks: one source; the topic and group matter with --kafka only."""
        if bool(self.kafka) == bool(self.from_file):
            raise ConfigError("give either --kafka BROKERS or --from-file PATH")
        if self.kafka:
            check_topic(self.topic, "--topic")
            if not self.group.strip():
                raise ConfigError("--group must not be empty")

    def check_host(self) -> None:
        """The machine: every --from-file is a file (ConfigError)."""
        for path in self.from_file:
            if not Path(path).is_file():
                raise ConfigError(f"--from-file {path}: no such file")


#: the smallest --chunk-bytes: two of the longest lines access_log.py accepts (64 KiB each)
MIN_ACCESS_CHUNK_BYTES = 128 << 10
#: the longest --host, in UTF-8 bytes (a DNS name; the batch header's limit, schemas/wire.py)
MAX_HOST_BYTES = HEADER_LIMITS["host"]


def _host_name(value: str, what: str) -> str:
    if not value or len(value.encode()) > MAX_HOST_BYTES or any(c.isspace() or not c.isprintable() for c in value):
        raise ConfigError(f"bad {what} {value!r}: a host name is 1-{MAX_HOST_BYTES} bytes, no spaces")
    return value


def _positive(value: float, what: str) -> float:
    if value <= 0:
        raise ConfigError(f"bad {what} {value!r}: must be more than 0")
    return value


@dataclasses.dataclass(frozen=True)
class AccessLogSettings(Settings):
    """Load nginx access logs (dyncc log_format) into the http_requests table."""

    COMPONENT: ClassVar[str] = "access-log"

    clickhouse: str = setting(None, STR, STORE_URL_HELP, metavar="URL", validator=check_store_url, required=True)
    pop: str = setting(None, STR, "the POP of the web server", required=True, validator=check_pop)
    host: str = setting(
        None, STR, "the web server's host name, as the collector names it (tcpinfo host)",
        default_text="this host's name", validator=_host_name,
    )  # fmt: skip
    files: tuple[str, ...] = setting(
        (), STR, "the access logs (the FILE arguments; a TOML list)", flag="", repeatable=True, metavar="FILE"
    )
    follow: float | None = setting(
        None, DURATION, "keep following the files, loading what is new every INTERVAL (else load once and exit)",
        metavar="INTERVAL", validator=_positive,
    )  # fmt: skip
    prefix_v4: int = setting(24, INT, "client prefix length for IPv4 (as the collector's)", validator=in_range(0, 32))
    prefix_v6: int = setting(56, INT, "client prefix length for IPv6 (as the collector's)", validator=in_range(0, 128))
    chunk_lines: int = setting(50_000, INT, "lines per INSERT at most", validator=at_least(1))
    chunk_bytes: int = setting(
        "8MiB", SIZE, "bytes of log read per INSERT at most (at least 128KiB)",
        validator=at_least(MIN_ACCESS_CHUNK_BYTES),
    )  # fmt: skip
    backoff_max: float = setting("30s", DURATION, "cap of the retry backoff while the store is down (--follow)")
    no_migrate: bool = setting(False, BOOL, "do not apply schema migrations at start")
    metrics_port: int = setting(0, INT, "Prometheus metrics port (0 = off)", validator=in_range(0, 65535))
    metrics_address: str = reuse(METRICS_ADDRESS)
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)

    def __post_init__(self) -> None:
        """At least one FILE, each once; the host name default."""
        if not self.files:
            raise ConfigError("give at least one FILE: an nginx access log in the dyncc log_format")
        if len(set(self.files)) != len(self.files):
            raise ConfigError("a FILE is given twice")
        if self.host is None:
            object.__setattr__(self, "host", socket.gethostname())

    def check_host(self) -> None:
        """The machine: every FILE is a readable regular file (ConfigError)."""
        for path in self.files:
            if not Path(path).is_file():
                raise ConfigError(f"{path}: no such file")
            if not os.access(path, os.R_OK):
                raise ConfigError(f"{path}: not readable")
