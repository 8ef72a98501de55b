"""What became of a round's desired state for one POP: the publish-outcome vocabulary and the
`round_outcomes` writer (sql/migrations/007_round_outcomes.sql).

One owner for the status words that scoring writes (`recorded`), rollout produces (its
PublishOutcome per POP, and the config_versions status it derives it from: published, rejected,
publish_failed) and control acts on (NOT_PUBLISHED fails `control --once`).  It sits in the store
layer so every one of them imports it without importing each other.

`round_outcomes` holds one row per (round, POP) and step; the latest row of a round (by
recorded_ns) is its outcome.  Scoring reads it back (controller/scoring/state.py): only rounds
whose decisions are in force become state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from controller.store.base import Store

__all__ = [
    "HELD",
    "IN_FORCE",
    "KILLED",
    "LEGACY",
    "NOT_PUBLISHED",
    "PUBLISHED",
    "PUBLISH_FAILED",
    "RECORDED",
    "REJECTED",
    "UNCHANGED",
    "PublishOutcome",
    "RoundOfPop",
    "write_outcomes",
]

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


class RoundOfPop(Protocol):
    """The round and POP an outcome belongs to (controller/scoring/desired.py DesiredState)."""

    @property
    def pop(self) -> str: ...
    @property
    def round_id(self) -> str: ...
    @property
    def round_time_ns(self) -> int: ...
    @property
    def entries(self) -> Sized: ...  # the round's prefixes for the POP (counted)


def write_outcomes(store: Store, outcomes: Iterable[tuple[RoundOfPop, PublishOutcome]]) -> int:
    """Append one round_outcomes row per (desired state of a round and POP, its outcome)."""
    rows = list(outcomes)
    n = len(rows)
    if n == 0:
        return 0
    ns = np.array([state.round_time_ns for state, _ in rows], dtype="uint64")
    return store.insert_columns(
        "round_outcomes",
        {
            "round_id": [state.round_id for state, _ in rows],
            "round_time": _datetimes(ns // 1_000_000_000),
            "round_time_ns": ns,
            "pop": [state.pop for state, _ in rows],
            "recorded_ns": np.full(n, time.time_ns(), dtype="uint64"),
            "status": [o.status for _, o in rows],
            "version": np.array([o.version for _, o in rows], dtype="uint64"),
            "prefixes": np.array([len(state.entries) for state, _ in rows], dtype="uint32"),
            "reason": [o.reason[:1000] for _, o in rows],
        },
    )


def _datetimes(seconds: Any) -> np.ndarray:
    return np.asarray(seconds, dtype="int64").astype("datetime64[s]")
