"""Settings of `dyncc control`: ControlSettings (a round: the store, the schedule, the scoring
definitions and decisions, publishing, validation and staged rollout), ExplainSettings and the
pin actions' PinSettings, UnpinSettings and PinsSettings.

ControlSettings nests ScoringSettings (controller/scoring/settings.py) and RolloutSettings
(controller/rollout/settings.py) as parts: their rows are flags and TOML keys of
`dyncc control`.  Building one checks everything that needs no I/O, including the scoring
caps that validation would refuse every round (`cap_conflicts`): ConfigError, one line.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import ClassVar

from controller.evidence.settings import EvidenceSettings
from controller.rollout.settings import RolloutSettings
from controller.rollout.validate import ValidationPolicy
from controller.scoring.settings import ScoringSettings
from controller.store.settings import STORE_URL_HELP, check_store_url
from dyncc_common.errors import ConfigError
from dyncc_common.names import check_pop
from dyncc_common.runtime import METRICS_ADDRESS
from dyncc_common.settings import (
    BOOL,
    CONFIG_FILE,
    DURATION,
    INT,
    STR,
    VERBOSE,
    Settings,
    in_range,
    part,
    reuse,
    setting,
)

__all__ = [
    "ControlSettings",
    "ExplainSettings",
    "PinSettings",
    "PinsSettings",
    "UnpinSettings",
    "cap_conflicts",
    "parse_at",
]


def parse_at(text: str, what: str = "--at") -> dt.datetime:
    """An ISO 8601 time, UTC unless it has an offset (ConfigError naming `what`)."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"bad {what} {text!r}: use ISO 8601, e.g. 2024-03-01T12:00:30Z") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _iso_time(value: str, what: str) -> str:
    parse_at(value, what)
    return value


def _pop(value: str, what: str) -> str:
    return check_pop(value, what)


def _optional_pop(value: str, what: str) -> str:
    return _pop(value, what) if value else value


def _seconds(value: float) -> int:
    return int(value)


def cap_conflicts(policy: ValidationPolicy, scoring: ScoringSettings) -> list[str]:
    """Scoring settings that validation would refuse every time (empty = consistent).  Pure.

    From an empty POP a round may change at most policy.change_limit(0) prefixes, so more
    new selections per round than that would get the POP's first config rejected forever.
    """
    problems = []
    limit = policy.change_limit(0)
    if scoring.max_new_per_round > limit:
        problems.append(
            f"--max-new {scoring.max_new_per_round} is above the change limit {limit} "
            f"(--max-change-fraction {policy.max_change_fraction:g} x --change-floor {policy.change_floor})"
        )
    if scoring.max_per_pop > policy.max_per_pop:
        problems.append(
            f"--max-bbr-per-pop {scoring.max_per_pop} is above the validation cap --max-per-pop {policy.max_per_pop}"
        )
    if scoring.algorithm not in policy.allowed_algorithms:
        allowed = ",".join(sorted(policy.allowed_algorithms))
        problems.append(f"--algorithm {scoring.algorithm!r} is not in --allowed-algorithms {allowed}")
    return problems


@dataclasses.dataclass(frozen=True)
class ControlSettings(Settings):
    """Score prefixes every round, decide which move to BBR, publish the configs."""

    COMPONENT: ClassVar[str] = "control"

    clickhouse: str | None = setting(
        None, STR, STORE_URL_HELP, metavar="URL", validator=check_store_url
    )  # needed by a round, not keygen
    at: str | None = setting(
        None, STR, "score as of this UTC time (ISO 8601) instead of now (--once / explain)", metavar="TIME",
        validator=_iso_time,
    )  # fmt: skip
    every: float | None = setting(None, DURATION, "round interval", default_text="the bucket, 5m")
    delay: float | None = setting(
        None, DURATION, "start rounds this long after a boundary", default_text="30s, at most a tenth of the bucket"
    )
    once: bool = setting(
        False, BOOL, "run one round now and exit: 1 when the round failed or something could not be published (a "
        "POP's config rejected or not sent, or the publisher unable to run), else 0 (also when held, or recorded "
        "only: --dry-run, or no --kafka / --publish-dir)",
    )  # fmt: skip
    pop: str = setting("", STR, "only this POP", default_text="every POP", validator=_optional_pop)
    dry_run: bool = setting(False, BOOL, "decide and print; write and publish nothing")
    metrics_port: int = setting(0, INT, "Prometheus port (0 = off)", validator=in_range(0, 65535))
    metrics_address: str = reuse(METRICS_ADDRESS)
    verbose: bool = reuse(VERBOSE)
    scoring: ScoringSettings = part(ScoringSettings)
    evidence: EvidenceSettings = part(EvidenceSettings)
    rollout: RolloutSettings = part(RolloutSettings)
    config: str | None = reuse(CONFIG_FILE)

    def __post_init__(self) -> None:
        bucket = float(self.scoring.bucket_seconds)
        every = bucket if self.every is None else self.every
        delay = min(30.0, bucket / 10) if self.delay is None else self.delay
        if every <= 0 or delay >= every:
            raise ConfigError("--every must be positive and longer than --delay")
        object.__setattr__(self, "every", every)
        object.__setattr__(self, "delay", delay)
        conflicts = cap_conflicts(ValidationPolicy.from_settings(self.rollout), self.scoring)
        if conflicts:
            raise ConfigError("; ".join(conflicts))

    def round_time(self) -> dt.datetime:
        """--at, else now (UTC)."""
        return parse_at(self.at) if self.at else dt.datetime.now(dt.UTC)


@dataclasses.dataclass(frozen=True)
class ExplainSettings(Settings):
    """`dyncc control explain`: why a prefix got its decision, with the settings the latest round
    that decided it recorded, or the command line's when scoring options are given (plus
    --clickhouse and --at of control)."""

    COMPONENT: ClassVar[str] = "control explain"

    pop: str = setting(None, STR, "the POP", required=True, cli_only=True, validator=_pop)
    prefix: str = setting(None, STR, "the client prefix", required=True, cli_only=True)


def _who(value: str, what: str) -> str:
    if not value.strip():
        raise ConfigError(f"{what} is empty: say who pins (a name or a ticket's owner)")
    return value.strip()


def _why(value: str, what: str) -> str:
    if not value.strip():
        raise ConfigError(f"{what} is empty: say why (it is recorded and shown by explain and the report)")
    return value.strip()


@dataclasses.dataclass(frozen=True)
class PinSettings(Settings):
    """`dyncc control pin PREFIX --pop POP --algorithm bbr|cubic --by WHO --why TEXT`: every round
    keeps the prefix on the pinned algorithm (plus --clickhouse and the validation options of
    control, which a BBR pin must pass)."""

    COMPONENT: ClassVar[str] = "control pin"

    prefix: str = setting(None, STR, "the client prefix (canonical, e.g. 203.0.113.0/24)", flag="prefix",
                          required=True, cli_only=True)  # fmt: skip
    pin_pop: str = setting(
        None, STR, "the POP", flag="--pop", dest="pin_pop", required=True, cli_only=True, validator=_pop, metavar="POP"
    )
    pin_algorithm: str = setting(
        None, STR, "bbr: in the POP's signed config every round; cubic: never in it", flag="--algorithm",
        dest="pin_algorithm", choices=("bbr", "cubic"), required=True, cli_only=True,
    )  # fmt: skip
    who: str = setting(None, STR, "who pins (recorded)", flag="--by", dest="who", required=True, cli_only=True,
                       validator=_who)  # fmt: skip
    why: str = setting(None, STR, "why (recorded, shown by explain and the report)", required=True, cli_only=True,
                       validator=_why, metavar="TEXT")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class UnpinSettings(Settings):
    """`dyncc control unpin PREFIX --pop POP --by WHO [--why TEXT]`: hand the prefix back to the
    rounds (they decide it from scratch)."""

    COMPONENT: ClassVar[str] = "control unpin"

    prefix: str = setting(None, STR, "the pinned client prefix", flag="prefix", required=True, cli_only=True)
    pin_pop: str = setting(
        None, STR, "the POP", flag="--pop", dest="pin_pop", required=True, cli_only=True, validator=_pop, metavar="POP"
    )
    who: str = setting(None, STR, "who unpins (recorded)", flag="--by", dest="who", required=True, cli_only=True,
                       validator=_who)  # fmt: skip
    why: str = setting("", STR, "why (recorded)", cli_only=True, metavar="TEXT")


@dataclasses.dataclass(frozen=True)
class PinsSettings(Settings):
    """`dyncc control pins [--pop POP]`: the pins in force, who pinned them, when and why."""

    COMPONENT: ClassVar[str] = "control pins"

    pins_pops: tuple[str, ...] = setting(
        (), STR, "only these POPs (repeatable)", flag="--pop", dest="pins_pops", repeatable=True, metavar="POP",
        cli_only=True, validator=_pop,
    )  # fmt: skip
