"""The controller's decision for one POP: which prefixes get which algorithm, and its outcome.

Produced by scoring (controller/scoring*), consumed by config generation,
validation and publishing (controller/config*, controller/publisher), which
answers with a PublishOutcome per POP.  Plain data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DesiredEntry:
    prefix: str  # canonical CIDR: 198.51.100.0/24, 2001:db8:0:100::/56
    algorithm: str  # "bbr" (or another allowed algorithm)
    duty_cycle: float
    flap_ratio: float
    median_delivery_rate: float  # bytes/s
    median_min_rtt_ms: float
    reason: str  # "select" / "keep" ... and why, for people


@dataclass
class DesiredState:
    pop: str
    round_id: str
    round_time_ns: int
    entries: list[DesiredEntry] = field(default_factory=list)
    # prefixes in a running trial (not started this round) -> the trial's start (ns): a change of
    # only these, each already on BBR in a POP-wide config since its trial began, is a switchback
    # toggle of validated prefixes and skips the canary wave (controller/rollout/engine.py)
    trial_prefixes: dict[str, int] = field(default_factory=dict)


# What became of a round's desired state for one POP (table round_outcomes, one row per
# (round, POP) and step; the latest row of a round is its outcome):
RECORDED = "recorded"  # decided and written to selections; not (yet) handed to a publisher
PUBLISHED = "published"  # its config was published (canary wave or POP-wide)
UNCHANGED = "unchanged"  # equal to the config in force: nothing to publish
REJECTED = "rejected"  # validation refused its config: nothing published
PUBLISH_FAILED = "publish_failed"  # signing or sending failed: nothing published
HELD = "held"  # not published this round: a rollout in flight, or held down after a rollback
KILLED = "killed"  # the POP's kill switch is engaged: nothing on BBR
LEGACY = "legacy"  # recorded before outcomes existed (sql/migrations/007_round_outcomes.sql)

IN_FORCE = (PUBLISHED, UNCHANGED, LEGACY)  # the round's decisions are what the edges got
NOT_PUBLISHED = (REJECTED, PUBLISH_FAILED)  # a failed round (`control --once` exits 1)


@dataclass(frozen=True)
class PublishOutcome:
    pop: str
    status: str  # one of the constants above
    version: int = 0  # config version published / in force (0 = none)
    reason: str = ""  # one line: why it was not published
