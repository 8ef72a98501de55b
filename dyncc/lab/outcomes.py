"""What a lab run did, per path class: who was selected, held out and reverted (pure: the run's
rounds in, per-prefix phases and per-class counts out).  dyncc/lab/run.py adds each class's trial
outcomes and pooled effects from controller.evidence, the same figures as the report's.

Phases of a prefix, from the run's rounds (round r covers the bucket that ends at its time):
  treated (selected at some round): before = the buckets before its first selection; after =
    from the first round at whose end every edge host of its POP holds its bbr route (the
    POP-wide promotion of the staged rollout) until it is reverted (or the run ends);
  holdout (of the same POP and class): before = the buckets before it became a holdout;
    after = from the median promotion round of its POP's treated prefixes of its class.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.store.decisions import HOLDOUT, ON_BBR_INCLUDING_TRIALS, REVERT
from dyncc.lab.model import ControlOutcome

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class RoundView:
    """What outcomes.py needs of one lab round."""

    round_no: int
    end_s: int  # the round's bucket end (Unix seconds)
    outcome: ControlOutcome


@dataclass
class PrefixPhases:
    pop: str
    prefix: str
    klass: str
    group: str  # treated | holdout | none
    selected_round: int = 0
    holdout_round: int = 0
    promoted_round: int = 0
    reverted_round: int = 0
    reason: str = ""
    before: tuple[int, int] = (0, 0)  # [start_s, end_s) of bucket starts
    after: tuple[int, int] = (0, 0)


@dataclass
class ClassOutcome:
    klass: str
    prefixes: int = 0
    selected: int = 0
    holdout: int = 0
    reverted: int = 0
    first_selected_round: int = 0
    revert_rounds: list[int] = field(default_factory=list)
    kept: int = 0  # latest trial ended keep
    running: int = 0  # latest trial still running at the end
    trial_reverted: int = 0  # latest trial ended revert
    effects: dict[str, Any] = field(default_factory=dict)  # metric -> controller.evidence Effect (pooled)


def phases(
    rounds: Sequence[RoundView],
    classes: Mapping[str, str],
    pops: Mapping[str, str],
    hosts: Mapping[str, Sequence[str]],
    bucket_s: int,
) -> dict[str, PrefixPhases]:
    """Each prefix's group and phases (see the module docstring)."""
    out = {p: PrefixPhases(pops[p], p, classes[p], "none") for p in classes}
    if not rounds:
        return out
    first_start = rounds[0].end_s - bucket_s
    last_end = rounds[-1].end_s
    for r in rounds:
        for prefix, score in r.outcome.scores.items():
            ph = out.get(prefix)
            if ph is None:
                continue
            if score.decision in ON_BBR_INCLUDING_TRIALS and not ph.selected_round:  # a trial from its first round
                ph.selected_round, ph.group = r.round_no, "treated"
            elif score.decision == HOLDOUT and not ph.holdout_round and not ph.selected_round:
                ph.holdout_round, ph.group = r.round_no, "holdout"
            elif score.decision == REVERT and ph.selected_round and not ph.reverted_round:
                ph.reverted_round, ph.reason = r.round_no, score.reason
        for ph in out.values():
            if ph.group != "treated" or ph.promoted_round or ph.reverted_round:
                continue
            edge_hosts = hosts.get(ph.pop, ())
            if edge_hosts and all(r.outcome.routes.get(h, {}).get(ph.prefix) == "bbr" for h in edge_hosts):
                ph.promoted_round = r.round_no
    end_of = {r.round_no: r.end_s for r in rounds}
    promoted: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ph in out.values():
        if ph.group == "treated":
            ph.before = (first_start, end_of[ph.selected_round] - bucket_s)
            if ph.promoted_round:
                stop = end_of[ph.reverted_round] if ph.reverted_round else last_end
                ph.after = (end_of[ph.promoted_round], stop)
                promoted[(ph.pop, ph.klass)].append(ph.promoted_round)
    for ph in out.values():
        if ph.group == "holdout":
            ph.before = (first_start, end_of[ph.holdout_round] - bucket_s)
            rounds_on = sorted(promoted.get((ph.pop, ph.klass), []))
            if rounds_on:
                ph.after = (end_of[rounds_on[len(rounds_on) // 2]], last_end)
    return out


def class_outcomes(prefix_phases: Mapping[str, PrefixPhases]) -> dict[str, ClassOutcome]:
    out: dict[str, ClassOutcome] = {}
    for ph in prefix_phases.values():
        c = out.setdefault(ph.klass, ClassOutcome(ph.klass))
        c.prefixes += 1
        if ph.group == "treated":
            c.selected += 1
            if not c.first_selected_round or ph.selected_round < c.first_selected_round:
                c.first_selected_round = ph.selected_round
        elif ph.group == "holdout":
            c.holdout += 1
        if ph.reverted_round:
            c.reverted += 1
            c.revert_rounds.append(ph.reverted_round)
    return out


def pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 100:+.0f}%"
