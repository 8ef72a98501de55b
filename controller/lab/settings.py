"""Settings of `dyncc lab` (LabSettings) and `dyncc demo` (DemoSettings).

Each is a settings table (dyncc_common.settings): flags, TOML keys and docs come from the
rows; building one checks every value that needs no machine (ConfigError, one line).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from dyncc_common.errors import ConfigError
from dyncc_common.names import check_pop
from dyncc_common.settings import BOOL, CONFIG_FILE, DURATION, FLOAT, INT, PATH, STR, VERBOSE, Settings, reuse, setting

__all__ = ["DemoSettings", "LabSettings"]


def _not_negative(value: int, what: str) -> int:
    if value < 0:
        raise ConfigError(f"{what} must not be negative")
    return value


def _pop(value: str, what: str) -> str:
    return check_pop(value, what)


@dataclasses.dataclass(frozen=True)
class LabSettings(Settings):
    """A namespace lab with shaped clients running the whole dyncc loop (needs root)."""

    COMPONENT: ClassVar[str] = "lab"

    round_seconds: int = setting(20, INT, "wall seconds per round = per scoring bucket (a 5-minute round, accelerated)")
    rounds: int = setting(0, INT, "stop after N rounds", validator=_not_negative)
    duration: float | None = setting(
        None, DURATION, "stop after this long (e.g. 3m)", default_text="--rounds, else until Ctrl-C"
    )
    poll_interval: float = setting("500ms", DURATION, "collector poll interval")
    lookback_buckets: int = setting(12, INT, "scoring lookback in rounds")
    min_buckets: int = setting(4, INT, "counted rounds needed before a prefix is scored")
    slow: int = setting(2, INT, "client prefixes that are always shaped", validator=_not_negative)
    alternating: int = setting(2, INT, "client prefixes shaped every other round", validator=_not_negative)
    fine: int = setting(4, INT, "client prefixes never shaped", validator=_not_negative)
    rate: str = setting("4mbit", STR, "tbf rate of a shaped link")
    threshold_quantile: float | None = setting(
        None, FLOAT, "scoring threshold quantile", default_text="just above the share of shaped prefixes"
    )
    holdout: float = setting(0.0, FLOAT, "holdout fraction (0: every selected prefix is treated)")
    store: str = setting(
        "", STR, "clickhouse://user:pass@host:port/db or chdb:///dir", metavar="URL",
        default_text="chDB in --store-dir",
    )  # fmt: skip
    store_dir: Path | None = setting(None, PATH, "chDB directory", default_text="a new temp dir")
    kafka: str | None = setting(
        None, STR, "route telemetry and configs through this Kafka (collector sink -> ingest; publisher -> agent)",
        metavar="BROKERS",
    )  # fmt: skip
    record: Path | None = setting(
        None, PATH, "also record the telemetry (gzip, length-delimited TcpInfoBatch) for `dyncc demo` replays",
        metavar="PATH",
    )  # fmt: skip
    pop: str = setting("lab", STR, "POP name of the lab edge", validator=_pop)
    run_id: str = setting("", STR, "namespace suffix", default_text="random 4 hex digits")
    cleanup: bool = setting(False, BOOL, "remove leftover dlab-* namespaces and exit")
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)

    def __post_init__(self) -> None:
        if self.round_seconds < 2:
            raise ConfigError("--round-seconds must be at least 2")
        if self.slow + self.alternating + self.fine == 0:
            raise ConfigError("the lab needs at least one client prefix")
        if self.lookback_buckets < 2:
            raise ConfigError("--lookback-buckets must be at least 2")
        if not 1 <= self.min_buckets <= self.lookback_buckets:
            raise ConfigError("--min-buckets must be between 1 and --lookback-buckets")
        if self.threshold_quantile is not None and not 0 < self.threshold_quantile < 1:
            raise ConfigError("--threshold-quantile must be within (0, 1)")
        if not 0 <= self.holdout < 1:
            raise ConfigError("--holdout must be within [0, 1)")
        if not 0.1 <= self.poll_interval <= self.round_seconds / 2:
            raise ConfigError("--poll-interval must be between 100ms and half a round")
        if self.run_id and (not self.run_id.isalnum() or len(self.run_id) > 8):
            raise ConfigError("--run-id: 1-8 letters or digits")


@dataclasses.dataclass(frozen=True)
class DemoSettings(Settings):
    """The whole loop on the embedded store (chDB), no servers, a few minutes."""

    COMPONENT: ClassVar[str] = "demo"

    duration: float = setting("3m", DURATION, "live lab length")
    round_seconds: int = setting(20, INT, "one accelerated 5-minute round, in seconds")
    replay: bool = setting(False, BOOL, "replay the recorded telemetry even when root")
    recording: Path | None = setting(None, PATH, "telemetry to replay", default_text="demo/lab-telemetry.bin.gz")
    workdir: Path | None = setting(None, PATH, "where the store and report go", default_text="a new temp dir")
    output: Path | None = setting(None, PATH, "report path", short="-o", default_text="WORKDIR/dyncc-demo-report.html")
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)
