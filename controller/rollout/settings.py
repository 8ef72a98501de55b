"""Settings of the rollout component: publishing, validation and staged rollout (RolloutSettings),
and the `dyncc control` actions keygen, rollout status|advance and kill-switch.

Each class is a settings table (dyncc_common.settings): the flags, the TOML keys and the docs
come from its rows.  Building one checks every value that needs no I/O (ConfigError, one
line).  The runtime forms take their defaults from RolloutSettings and are built from one:
`ValidationPolicy.from_settings()` (controller/rollout/validate.py) and
`RolloutConfig.from_settings()` (controller/rollout/engine.py; `host_lists()` reads the
inventory file when given); this module imports neither.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import ClassVar

from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import KafkaSecurity
from dyncc_common.names import check_pop
from dyncc_common.settings import (
    BOOL,
    DURATION,
    FLOAT,
    INT,
    PATH,
    SIZE,
    STR,
    Settings,
    part,
    setting,
)
from schemas.wire import CONFIG_TOPIC, STATUS_TOPIC

__all__ = [
    "KeygenSettings",
    "KillSwitchSettings",
    "RolloutActionSettings",
    "RolloutSettings",
    "load_inventory",
    "parse_deny",
    "parse_host_lists",
]

PUBLISHING = "publishing"
VALIDATION = "validation (a rejected config is recorded and never published)"
STAGED = "staged rollout"


def _algorithms(value: str, what: str) -> str:
    if not [a for a in value.split(",") if a.strip()]:
        raise ConfigError(f"{what} is empty: name at least one, e.g. bbr,cubic")
    return value


def _pop(value: str, what: str) -> str:
    return check_pop(value, what)


def parse_host_lists(values: Sequence[str], what: str) -> dict[str, list[str]]:
    """['lax:h1,h2', 'lax:h3,fra:h9'] -> {'lax': ['h1','h2','h3'], 'fra': ['h9']} (POP carries over)."""
    out: dict[str, list[str]] = {}
    for value in values:
        pop = ""
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            if ":" in item:
                pop, item = item.split(":", 1)
            if not pop or not item:
                raise ConfigError(f"bad {what} entry {value!r}: use POP:HOST[,HOST...]")
            out.setdefault(pop, []).append(item)
    return out


def load_inventory(path: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(hosts per POP, canary hosts per POP) from a TOML inventory."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read inventory {path}: {exc}") from exc
    hosts: dict[str, list[str]] = {}
    canary: dict[str, list[str]] = {}
    pops = data.get("pops", {})
    if not isinstance(pops, dict):
        raise ConfigError(f"inventory {path}: [pops.<pop>] tables expected")
    for pop, table in pops.items():
        if not isinstance(table, dict):
            raise ConfigError(f"inventory {path}: pops.{pop} must be a table")
        for key, target in (("hosts", hosts), ("canary", canary)):
            names = table.get(key, [])
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"inventory {path}: pops.{pop}.{key} must be a list of host names")
            target[pop] = list(names)
    return hosts, canary


def _merge(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, list[str]]:
    out = {k: list(v) for k, v in a.items()}
    for pop, names in b.items():
        out.setdefault(pop, []).extend(n for n in names if n not in out[pop])
    return out


def parse_deny(cidrs: Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Parse --deny values (non-strict: 198.51.100.7/24 means its /24); ValueError names the bad one."""
    out = []
    for text in cidrs:
        try:
            out.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"bad deny range {text!r}: {exc}") from exc
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class RolloutSettings(Settings):
    """Publishing, validation and staged-rollout settings of `dyncc control`."""

    kafka: str | None = setting(
        None, STR, "publish configs to / read statuses from this Kafka", section=PUBLISHING, metavar="BROKERS"
    )
    publish_dir: Path | None = setting(
        None, PATH, "write signed configs as DIR/<pop>.cfg (and <pop>.canary.cfg) instead of Kafka",
        section=PUBLISHING, metavar="DIR",
    )  # fmt: skip
    private_key: Path | None = setting(
        None, PATH, "Ed25519 private key that signs configs ('dyncc control keygen')", section=PUBLISHING,
        flag="--key", dest="private_key", metavar="PRIVATE_PEM",
    )  # fmt: skip
    config_topic: str = setting(CONFIG_TOPIC, STR, "compacted config topic (key = POP)", section=PUBLISHING)
    status_topic: str = setting(STATUS_TOPIC, STR, "ApplyStatus topic (key = host)", section=PUBLISHING)
    status_group: str = setting("dyncc-controller", STR, "consumer group for statuses", section=PUBLISHING)
    kafka_security: KafkaSecurity = part(KafkaSecurity)  # TLS / SASL of --kafka

    deny: tuple[str, ...] = setting(
        (), STR, "never route inside/over this range (infrastructure, anycast, back office); repeatable",
        section=VALIDATION, repeatable=True, extend=True, metavar="CIDR",
    )  # fmt: skip
    v4_length: int = setting(24, INT, "IPv4 prefix length (1..31)", section=VALIDATION)
    v6_length: int = setting(56, INT, "IPv6 prefix length (1..127)", section=VALIDATION)
    max_per_pop: int = setting(
        5000, INT, "prefix cap per POP (at least 1: the kill switch empties a POP)", section=VALIDATION
    )
    max_change_fraction: float = setting(
        0.5, FLOAT, "max changes per round as a fraction of max(previous count, --change-floor)", section=VALIDATION
    )
    change_floor: int = setting(
        200, INT, "previous-count floor for the change limit (the default: 100 changes from empty)",
        section=VALIDATION,
    )  # fmt: skip
    allowed_algorithms: str = setting(
        "bbr,cubic", STR, "comma-separated congestion controls a config may name", section=VALIDATION,
        validator=_algorithms,
    )  # fmt: skip
    lock_cc: bool = setting(False, BOOL, "install RTAX_CC_ALGO locked", section=VALIDATION)

    staging: str = setting(
        "auto", STR, "canary first (auto: on with --kafka status reports, off with --publish-dir only)",
        section=STAGED, choices=("auto", "on", "off"),
    )  # fmt: skip
    canary_hosts: tuple[str, ...] = setting(
        (), STR, "preferred canary hosts, used when known (from reports or --hosts); else a stable hash-chosen "
        "--canary-fraction of the known hosts", section=STAGED, repeatable=True, metavar="POP:HOST,...",
    )  # fmt: skip
    canary_fraction: float = setting(
        0.1, FLOAT, "fraction of a POP's hosts in the canary wave (at least one host)", section=STAGED
    )
    hosts: tuple[str, ...] = setting(
        (), STR, "host inventory (hosts are also learnt from their status reports)", section=STAGED,
        repeatable=True, metavar="POP:HOST,...",
    )  # fmt: skip
    inventory: Path | None = setting(
        None, PATH, 'inventory file: [pops.<pop>] hosts = ["h1", ...], canary = ["h1"]', section=STAGED,
        metavar="TOML",
    )  # fmt: skip
    soak: float = setting("10m", DURATION, "canary soak time after the last apply", section=STAGED)
    wave_timeout: float = setting(
        "15m", DURATION, "time for a wave's hosts to report (canary: else rolled back)", section=STAGED
    )
    baseline: float = setting("15m", DURATION, "delivery-rate baseline window before the canary", section=STAGED)
    min_mem_available: int = setting("128M", SIZE, "health gate: available memory per host", section=STAGED)
    max_load: float = setting(64, FLOAT, "health gate: load1", section=STAGED)
    max_p10_regression: float = setting(
        0.15, FLOAT, "allowed fall of the canary's p10 delivery rate (0.15 = 15%)", section=STAGED
    )
    min_samples: int = setting(50, INT, "qualifying flow samples per window to judge the p10", section=STAGED)
    host_expiry: float = setting(
        "1h", DURATION, "a host that has not reported for this long is forgotten", section=STAGED
    )
    holddown: float = setting(
        "1h", DURATION, "do not retry a rolled-back desired state for this long unless it changes", section=STAGED
    )
    republish_after: float = setting(
        "1d", DURATION, "publish an unchanged stable config again, newly signed, once it is this old (below the "
        "agents' --max-config-age, which refuses older ones)", section=STAGED,
    )  # fmt: skip

    def __post_init__(self) -> None:
        """The checks that need no I/O (the inventory file is read by host_lists())."""
        try:
            parse_deny(self.deny)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if not (1 <= self.v4_length <= 31 and 1 <= self.v6_length <= 127):
            raise ConfigError("--v4-length must be 1..31 and --v6-length 1..127 (no default or host routes)")
        if self.max_per_pop < 1:
            raise ConfigError(f"--max-per-pop {self.max_per_pop} must be at least 1 (the kill switch empties a POP)")
        if self.change_floor < 0:
            raise ConfigError(f"--change-floor {self.change_floor} must not be negative")
        if not 0 < self.max_change_fraction <= 1:
            raise ConfigError(f"--max-change-fraction {self.max_change_fraction} must be in (0, 1]")
        if not 0 < self.canary_fraction <= 1:
            raise ConfigError(f"--canary-fraction {self.canary_fraction} must be in (0, 1]")
        if not self.max_load > 0:
            raise ConfigError(f"--max-load {self.max_load} must be above 0")
        if not 0 <= self.max_p10_regression <= 1:
            raise ConfigError(f"--max-p10-regression {self.max_p10_regression} must be in [0, 1]")
        if not self.republish_after > 0:
            raise ConfigError(f"--republish-after {self.republish_after:g}s must be above 0")
        if self.min_samples < 1:
            raise ConfigError(f"--min-samples {self.min_samples} must be at least 1")
        parse_host_lists(self.hosts, "--hosts")
        parse_host_lists(self.canary_hosts, "--canary-hosts")

    def host_lists(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """(hosts per POP, canary hosts per POP): --hosts and --canary-hosts, plus --inventory when
        given (read here: ConfigError)."""
        hosts = parse_host_lists(self.hosts, "--hosts")
        canary = parse_host_lists(self.canary_hosts, "--canary-hosts")
        if self.inventory:
            inv_hosts, inv_canary = load_inventory(Path(self.inventory))
            hosts, canary = _merge(hosts, inv_hosts), _merge(canary, inv_canary)
        return hosts, canary


@dataclasses.dataclass(frozen=True)
class KeygenSettings(Settings):
    """`dyncc control keygen`: write an Ed25519 key pair for signing configs."""

    COMPONENT: ClassVar[str] = "control keygen"

    out_dir: Path = setting(None, PATH, "directory for the key pair", required=True, cli_only=True, metavar="DIR")
    name: str = setting("dyncc-config", STR, "file names NAME.key / NAME.pub", cli_only=True)
    force: bool = setting(False, BOOL, "overwrite an existing key pair", cli_only=True)


@dataclasses.dataclass(frozen=True)
class RolloutActionSettings(Settings):
    """`dyncc control rollout status|advance` (plus the store and publishing flags of control)."""

    COMPONENT: ClassVar[str] = "control rollout"

    rollout_action: str = setting(
        None, STR, "status: where each POP and host stands; advance: ingest statuses and run the wave gates once "
        "(publish options as for a round)", flag="rollout_action", choices=("status", "advance"), required=True,
        cli_only=True,
    )  # fmt: skip
    status_pops: tuple[str, ...] = setting(
        (), STR, "only these POPs (repeatable)", flag="--pop", dest="status_pops", repeatable=True, metavar="POP",
        cli_only=True, validator=_pop,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class KillSwitchSettings(Settings):
    """`dyncc control kill-switch`: publish an empty signed config; agents drop every route."""

    COMPONENT: ClassVar[str] = "control kill-switch"

    kill_pops: tuple[str, ...] = setting(
        (), STR, "the POP (repeatable)", flag="--pop", dest="kill_pops", repeatable=True, metavar="POP",
        exclusive="target", cli_only=True, validator=_pop,
    )  # fmt: skip
    kill_all: bool = setting(
        False, BOOL, "every POP known to the store", flag="--all", dest="kill_all", exclusive="target", cli_only=True
    )
    release: bool = setting(
        False, BOOL, "release the kill switch: rounds publish again (staged, from empty)", cli_only=True
    )
    force: bool = setting(
        False, BOOL, "also for a POP the store does not know (no telemetry and no published config)", cli_only=True
    )

    def __post_init__(self) -> None:
        if not self.kill_pops and not self.kill_all:
            raise ConfigError("one of the arguments --pop --all is required")
