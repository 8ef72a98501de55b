"""`dyncc ingest` settings: the IngestSettings table (defaults < TOML file (--config) < flags).

dyncc_common.settings builds the flags, the `[ingest]` TOML loading and docs/settings.md
from the rows below.  Values are checked when the settings are built (ConfigError, one
line); `check_host()` looks at the machine (the --from-file files).  `kafka_config()`
builds the loader's KafkaConfig, whose defaults are this table's (defined here only).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from controller.store.settings import STORE_URL_HELP
from dyncc_common.errors import ConfigError
from dyncc_common.names import check_brokers, check_topic
from dyncc_common.settings import (
    BOOL,
    CONFIG_FILE,
    DURATION,
    INT,
    STR,
    VERBOSE,
    Settings,
    at_least,
    in_range,
    reuse,
    setting,
)

if TYPE_CHECKING:
    from controller.ingest.kafka import KafkaConfig

__all__ = ["IngestSettings"]


@dataclasses.dataclass(frozen=True)
class IngestSettings(Settings):
    """Load TcpInfoBatch messages from Kafka (or files) into ClickHouse / chDB."""

    COMPONENT: ClassVar[str] = "ingest"

    kafka: str | None = setting(
        None, STR, "Kafka bootstrap servers, host:port[,host:port]", metavar="BROKERS", validator=check_brokers
    )
    clickhouse: str = setting(None, STR, STORE_URL_HELP, metavar="URL", required=True)
    topic: str = setting("tcpinfo", STR, "Kafka topic")  # checked with --kafka only (__post_init__)
    group: str = setting("dyncc-ingest", STR, "Kafka consumer group")
    from_file: tuple[str, ...] = setting(
        (), STR, "replay a length-delimited batch file (collector --sink file) instead of Kafka; repeatable",
        repeatable=True, metavar="PATH",
    )  # fmt: skip
    drain: bool = setting(False, BOOL, "exit 0 once every assigned partition is caught up")
    max_rows: int = setting(300_000, INT, "flush after this many rows", validator=at_least(1))
    min_rows: int = setting(
        50_000, INT, "flush as soon as an insert thread is free and this many rows wait", validator=at_least(1)
    )
    max_bytes: int = setting(
        128 << 20, INT, "flush after this many message bytes", default_text="134217728 (128 MiB)",
        validator=at_least(1),
    )  # fmt: skip
    max_wait: float = setting("2s", DURATION, "flush buffered messages at least this often")
    inserters: int = setting(
        2, INT, "groups inserted at once, each on its own ClickHouse connection (offsets are still committed in order)",
        metavar="N", validator=at_least(1),
    )  # fmt: skip
    backoff_max: float = setting("30s", DURATION, "cap of the retry backoff while the store is down")
    connect_timeout: float = setting(
        "30s", DURATION,
        "at start, give up (exit 2) when no Kafka broker answers within this time (0 = wait forever); "
        "later broker outages are ridden out",
    )  # fmt: skip
    no_migrate: bool = setting(False, BOOL, "do not apply schema migrations at start")
    metrics_port: int = setting(9311, INT, "Prometheus metrics port (0 = off)", validator=in_range(0, 65535))
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)

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

    def kafka_config(self) -> KafkaConfig:
        """The Kafka loader's configuration (needs --kafka)."""
        from controller.ingest.kafka import KafkaConfig  # lazy: ingest.kafka imports this module (cycle)

        if not self.kafka:
            raise ConfigError("--kafka BROKERS is needed to read from Kafka")
        return KafkaConfig(
            brokers=self.kafka,
            topic=self.topic,
            group=self.group,
            max_rows=self.max_rows,
            min_rows=min(self.min_rows, self.max_rows),
            max_bytes=self.max_bytes,
            max_wait=self.max_wait,
            inserters=self.inserters,
            drain=self.drain,
            backoff_max=self.backoff_max,
            connect_timeout=self.connect_timeout,
        )
