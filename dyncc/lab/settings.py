"""Settings of `dyncc lab` (LabSettings) and `dyncc demo` (DemoSettings).

Each is a settings table (dyncc_common.settings): flags, TOML keys and docs come from the
rows; building one checks every value that needs no machine (ConfigError, one line).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from collector.agent.settings import ENFORCE_MODES
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import KafkaSecurity
from dyncc_common.settings import (
    BOOL,
    CONFIG_FILE,
    DURATION,
    FLOAT,
    INT,
    PATH,
    STR,
    VERBOSE,
    Settings,
    part,
    reuse,
    setting,
)

__all__ = ["DemoSettings", "LabSettings"]


def _not_negative(value: int, what: str) -> int:
    if value < 0:
        raise ConfigError(f"{what} must not be negative")
    return value


@dataclasses.dataclass(frozen=True)
class LabSettings(Settings):
    """A fleet-like namespace lab (POPs, edge hosts, path classes) running the whole dyncc loop (needs root)."""

    COMPONENT: ClassVar[str] = "lab"

    round_seconds: int = setting(15, INT, "wall seconds per round = per scoring bucket (a 5-minute round, accelerated)")
    rounds: int = setting(0, INT, "stop after N rounds", validator=_not_negative)
    duration: float | None = setting(
        None, DURATION, "stop after this long (e.g. 4m)", default_text="--rounds, else until Ctrl-C"
    )
    poll_interval: float = setting("500ms", DURATION, "collector poll interval")
    pops: int = setting(2, INT, "POPs (1-2)")
    hosts_per_pop: int = setting(2, INT, "edge hosts per POP (the first is the canary)")
    prefixes_per_pop: int = setting(64, INT, "client prefixes per POP (the ones not in another class are fine)")
    lossy: int = setting(
        10, INT, "prefixes per POP on a long, rate-limited path with random loss", validator=_not_negative
    )
    deep: int = setting(
        6, INT, "prefixes per POP behind a bloated access link (deep FIFO, busy uplink)", validator=_not_negative
    )
    alternating: int = setting(6, INT, "prefixes per POP whose path is poor every other round", validator=_not_negative)
    lowrtt: int = setting(4, INT, "prefixes per POP on a rate-limited, low-RTT path", validator=_not_negative)
    lookback_buckets: int = setting(8, INT, "scoring lookback in rounds")
    min_buckets: int = setting(5, INT, "counted rounds needed before a prefix is scored")
    min_hold_buckets: int = setting(8, INT, "rounds on BBR before a prefix may be reverted")
    max_new: int = setting(40, INT, "most new selections per POP and round")
    trial_blocks: int = setting(8, INT, "switchback blocks of a prefix's trial at most")
    threshold_quantile: float | None = setting(
        None, FLOAT, "scoring threshold quantile", default_text="just above the share of poor paths in a round"
    )
    holdout: float = setting(0.25, FLOAT, "holdout fraction of the candidates (control group)")
    think_time: float = setting("3s", DURATION, "mean time between one client's HTTP requests")
    store: str = setting(
        "", STR, "clickhouse://user:pass@host:port/db or chdb:///dir", metavar="URL",
        default_text="chDB in --store-dir",
    )  # fmt: skip
    store_dir: Path | None = setting(None, PATH, "chDB directory", default_text="a new temp dir")
    kafka: str | None = setting(
        None, STR, "route telemetry and configs through this Kafka (collector sinks -> ingest; publisher -> agents)",
        metavar="BROKERS",
    )  # fmt: skip
    kafka_security: KafkaSecurity = part(KafkaSecurity)  # TLS / SASL of --kafka (docs/security.md)
    enforce: str = setting(
        "route", STR, "how the edge agents enforce configs: route or bpf (a sock_ops program switching flows "
        "above the config's threshold, docs/enforce.md)", choices=ENFORCE_MODES,
    )  # fmt: skip
    references: bool = setting(
        True, BOOL, "measure the run's ground truth: one prefix per (POP, class) pinned away from the controller "
        "and switched between bbr and cubic by the lab every 2 rounds (docs/lab.md)", flag="",
        negate_flag="--no-references", negate_help="no ground-truth references: the controller gets every prefix",
    )  # fmt: skip
    record: Path | None = setting(
        None, PATH, "also record the telemetry (gzip, length-delimited TcpInfoBatch) and the access logs for "
        "`dyncc demo` replays", metavar="PATH",
    )  # fmt: skip
    run_id: str = setting("", STR, "namespace suffix", default_text="random 4 hex digits")
    cleanup: bool = setting(False, BOOL, "remove leftover dlab-* namespaces and exit")
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)

    def __post_init__(self) -> None:
        if self.round_seconds < 5:
            raise ConfigError("--round-seconds must be at least 5")
        if self.lookback_buckets < 2:
            raise ConfigError("--lookback-buckets must be at least 2")
        if not 1 <= self.min_buckets <= self.lookback_buckets:
            raise ConfigError("--min-buckets must be between 1 and --lookback-buckets")
        if self.min_hold_buckets < 1:
            raise ConfigError("--min-hold-buckets must be at least 1")
        if self.max_new < 1:
            raise ConfigError("--max-new must be at least 1")
        if not 2 <= self.trial_blocks <= 64:
            raise ConfigError("--trial-blocks must be between 2 and 64")
        if self.threshold_quantile is not None and not 0 < self.threshold_quantile < 1:
            raise ConfigError("--threshold-quantile must be within (0, 1)")
        if not 0 <= self.holdout < 1:
            raise ConfigError("--holdout must be within [0, 1)")
        if not 0.2 <= self.poll_interval <= self.round_seconds / 2:
            raise ConfigError("--poll-interval must be between 200ms and half a round")
        if not 0.5 <= self.think_time <= 60:
            raise ConfigError("--think-time must be between 500ms and 60s")
        if self.run_id and (not self.run_id.isalnum() or len(self.run_id) > 8):
            raise ConfigError("--run-id: 1-8 letters or digits")


@dataclasses.dataclass(frozen=True)
class DemoSettings(Settings):
    """The whole loop on the embedded store (chDB), no servers, a few minutes."""

    COMPONENT: ClassVar[str] = "demo"

    duration: float = setting("360s", DURATION, "live lab length")
    round_seconds: int = setting(15, INT, "one accelerated 5-minute round, in seconds")
    replay: bool = setting(False, BOOL, "replay the recorded telemetry even when root")
    recording: Path | None = setting(None, PATH, "telemetry to replay", default_text="demo/lab-telemetry.bin.gz")
    workdir: Path | None = setting(None, PATH, "where the store and report go", default_text="a new temp dir")
    output: Path | None = setting(None, PATH, "report path", short="-o", default_text="WORKDIR/dyncc-demo-report.html")
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)
