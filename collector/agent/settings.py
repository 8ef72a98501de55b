"""`dyncc agent` settings: the AgentSettings table (defaults < TOML file (--config) < flags).

dyncc_common.settings builds the flags, the `[agent]` TOML loading and docs/settings.md
from the rows below.  Values are checked when the settings are built (ConfigError, one
line); `check_host()` looks at the machine (the state directory, the namespace).  Pure
but for the host name default; no heavy imports (the agent's modules import this).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import KafkaSecurity
from dyncc_common.names import check_brokers, check_pop, check_topic
from dyncc_common.runtime import METRICS_ADDRESS
from dyncc_common.settings import (
    BOOL,
    CONFIG_FILE,
    DURATION,
    INT,
    PATH,
    STR,
    VERBOSE,
    Settings,
    in_range,
    part,
    reuse,
    setting,
)
from schemas.prefix_rules import parse_ranges
from schemas.wire import CONFIG_TOPIC, STATUS_TOPIC

__all__ = ["ENFORCE_MODES", "RESERVED_PROTOS", "AgentSettings"]

RESERVED_PROTOS = {0: "unspec", 1: "redirect", 2: "kernel", 3: "boot", 4: "static"}
SOURCE = "config source (one of)"
BPF = "enforcement"
REFUSALS = 'what this edge refuses (docs/security.md, "What the edge refuses")'
ENFORCE_MODES = ("route", "bpf")


def _route_proto(value: int, what: str) -> int:
    if not 1 <= value <= 255 or value in RESERVED_PROTOS:
        raise ConfigError(f"{what} {value}: use a dedicated protocol number in 5..255 (default 250)")
    return value


def _positive(value: float, what: str) -> float:
    if value <= 0:
        raise ConfigError(f"{what} must be positive")
    return value


def _not_negative(value: float, what: str) -> float:
    if value < 0:
        raise ConfigError(f"{what} must not be negative")
    return value


def _not_blank(value: str, what: str) -> str:
    if not value.strip():
        raise ConfigError(f"{what} must not be empty")
    return value


@dataclasses.dataclass(frozen=True)
class AgentSettings(Settings):
    """Apply signed per-prefix congestion configs on an edge host (routes, or a sock_ops program)."""

    COMPONENT: ClassVar[str] = "agent"

    kafka: str | None = setting(
        None, STR, "Kafka bootstrap servers, e.g. kafka1:9092", section=SOURCE, metavar="BROKERS",
        validator=check_brokers,
    )  # fmt: skip
    from_file: Path | None = setting(
        None, PATH, "apply one signed CongestionConfig file (binary or JSON) and exit (needs --once)",
        section=SOURCE, metavar="CONFIG",
    )  # fmt: skip
    once: bool = setting(False, BOOL, "with --from-file: apply once and exit")
    pop: str = setting(None, STR, "the POP this host belongs to (config key)", required=True, validator=check_pop)
    public_key: tuple[Path, ...] = setting(
        (), PATH, "Ed25519 public key of the controller (PEM); repeatable: every key trusted during a key "
        "rotation (docs/rollout.md)", repeatable=True, toml_aliases=("public_keys",), metavar="PEM",
    )  # fmt: skip
    public_key_dir: Path | None = setting(
        None, PATH, "also trust every .pem and .pub public key file in this directory (read at start)", metavar="DIR"
    )
    netns: str | None = setting(None, STR, "network namespace to manage", default_text="this one")
    host: str = setting(None, STR, "host name in statuses", default_text="hostname", validator=_not_blank)
    config_topic: str = setting(CONFIG_TOPIC, STR, "compacted config topic (key = POP)")
    status_topic: str = setting(STATUS_TOPIC, STR, "ApplyStatus topic (key = host)")
    reconcile_every: float = setting("60s", DURATION, "periodic reconcile interval", validator=_positive)
    proto: int = setting(250, INT, "routing protocol number tagging owned routes", validator=_route_proto)
    state_dir: Path | None = setting(None, PATH, "applied version and config", default_text="/var/lib/dyncc/agent-POP")
    metrics_port: int = setting(0, INT, "Prometheus port (0 = off)", validator=in_range(0, 65535))
    metrics_address: str = reuse(METRICS_ADDRESS)
    enforce: str = setting(
        "route", STR, "route: per-prefix routes with congctl; bpf: a sock_ops program switches each connection "
        "to a selected prefix once it passes the config's threshold (docs/enforce.md)",
        choices=ENFORCE_MODES, section=BPF,
    )  # fmt: skip
    bpf_cgroup: Path | None = setting(
        None, PATH, "cgroup v2 directory the program is attached to (the web server's sockets)",
        default_text="the cgroup v2 root", section=BPF, metavar="DIR",
    )  # fmt: skip
    bpf_pin_dir: Path | None = setting(
        None, PATH, "bpffs directory of the pinned program and maps", default_text="/sys/fs/bpf/dyncc/POP",
        section=BPF, metavar="DIR",
    )  # fmt: skip
    bpf_object: Path | None = setting(
        None, PATH, "compiled program (make bpf)", default_text="built with clang into the state directory",
        section=BPF, metavar="FILE",
    )  # fmt: skip
    allow: tuple[str, ...] = setting(
        (), STR, "route only prefixes inside these ranges (the POP's client ranges); none given: any prefix "
        "outside the built-in and --deny refusals; repeatable", repeatable=True, extend=True, metavar="CIDR",
        section=REFUSALS,
    )  # fmt: skip
    deny: tuple[str, ...] = setting(
        (), STR, "never route a prefix sharing an address with this range (the edge's management and "
        "infrastructure ranges); repeatable", repeatable=True, extend=True, metavar="CIDR", section=REFUSALS,
    )  # fmt: skip
    max_config_age: float = setting(
        "7d", DURATION, "refuse a new config (not a kill switch) signed longer ago than this (its "
        "created_at_ns), also with a lost state directory; above the controller's --republish-after; 0 = no limit",
        section=REFUSALS, metavar="DURATION", validator=_not_negative,
    )  # fmt: skip
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)
    kafka_security: KafkaSecurity = part(KafkaSecurity)

    def __post_init__(self) -> None:
        """Cross-field checks (the topics matter with --kafka only) and the host name default."""
        if bool(self.kafka) == bool(self.from_file):
            raise ConfigError("give exactly one of --kafka BROKERS or --from-file CONFIG")
        if not self.public_key and self.public_key_dir is None:
            raise ConfigError("no public key to verify configs with: give --public-key PEM or --public-key-dir DIR")
        if self.from_file and not self.once:
            raise ConfigError("--from-file applies one config: add --once")
        if self.once and not self.from_file:
            raise ConfigError("--once is only for --from-file")
        if self.kafka:
            check_topic(self.config_topic, "--config-topic")
            check_topic(self.status_topic, "--status-topic")
        try:
            parse_ranges(self.allow, "--allow range")
            parse_ranges(self.deny, "--deny range")
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if self.enforce != "bpf" and (self.bpf_cgroup or self.bpf_pin_dir or self.bpf_object):
            raise ConfigError("--bpf-cgroup, --bpf-pin-dir and --bpf-object go with --enforce bpf")
        if self.host is None:
            import socket

            object.__setattr__(self, "host", socket.gethostname())

    def check_host(self) -> None:
        """The machine: --state-dir is a directory if it exists, --netns exists (ConfigError)."""
        import os

        if self.state_dir is not None and self.state_dir.exists() and not self.state_dir.is_dir():
            raise ConfigError(f"bad --state-dir {self.state_dir}: not a directory")
        if self.netns and not os.path.exists(f"/run/netns/{self.netns}"):
            raise ConfigError(f"network namespace {self.netns!r} does not exist")
        if self.bpf_cgroup is not None and not (self.bpf_cgroup / "cgroup.procs").exists():
            raise ConfigError(f"bad --bpf-cgroup {self.bpf_cgroup}: not a cgroup v2 directory")
        if self.bpf_object is not None and not self.bpf_object.is_file():
            raise ConfigError(f"bad --bpf-object {self.bpf_object}: no such file (make bpf builds it)")
