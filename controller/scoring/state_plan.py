"""Plan one update of the incremental scoring state (pure; controller/scoring/incremental.py runs it).

The state of a POP is the sum of the contributions of the (bucket, version)s of its window
(sql/migrations/013_scoring_state.sql).  A round knows the POP's current keys (the cache's
newest version of each bucket of the window, controller/scoring/query.py `refresh`) and the
newest committed generation of the state with the keys it holds.  Per POP:

  * no committed generation (first round, other settings, a lost partition): build from
    nothing, every current key added;
  * the same keys: nothing to do, the committed generation serves the round;
  * otherwise build on the committed generation: add the keys that entered (a new bucket, a
    new version of a bucket after late data), subtract the keys that left (a bucket that slid
    out of the window, the version a new one replaced); when that is more keys than building
    from nothing, build from nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Committed", "PopPlan", "StatePlan", "plan_update"]

#: (bucket start in epoch seconds, version)
BucketVersion = tuple[int, int]


@dataclass(frozen=True)
class Committed:
    """A POP's newest committed generation and the threshold of each (bucket, version) it holds."""

    generation: int
    thresholds: Mapping[BucketVersion, float]


@dataclass(frozen=True)
class PopPlan:
    """What one POP's state needs this round."""

    pop: str
    base: int  # the generation built on (0: built from nothing)
    added: tuple[BucketVersion, ...] = ()
    removed: tuple[tuple[int, int, float], ...] = ()  # (bucket, version, threshold as recorded)
    reuse: bool = False  # nothing changed: the base generation serves the round as it is

    @property
    def changes(self) -> int:
        return len(self.added) + len(self.removed)


@dataclass(frozen=True)
class StatePlan:
    pops: tuple[PopPlan, ...] = field(default_factory=tuple)

    @property
    def building(self) -> tuple[PopPlan, ...]:
        """The POPs that get a new generation."""
        return tuple(p for p in self.pops if not p.reuse)

    @property
    def rebuilt(self) -> tuple[str, ...]:
        return tuple(p.pop for p in self.pops if not p.reuse and p.base == 0)


def plan_update(current: Iterable[tuple[str, int, int]], committed: Mapping[str, Committed]) -> StatePlan:
    """The plan for the current (pop, bucket, version) keys given each POP's committed state.

    POPs without current keys have no data in the window: nothing to score, nothing planned.
    """
    by_pop: dict[str, set[BucketVersion]] = {}
    for pop, bucket, version in current:
        by_pop.setdefault(pop, set()).add((int(bucket), int(version)))
    plans = []
    for pop in sorted(by_pop):
        keys = by_pop[pop]
        base = committed.get(pop)
        if base is None:
            plans.append(PopPlan(pop, 0, added=tuple(sorted(keys))))
            continue
        held = set(base.thresholds)
        added = tuple(sorted(keys - held))
        removed = tuple((b, v, float(base.thresholds[(b, v)])) for b, v in sorted(held - keys))
        if not added and not removed:
            plans.append(PopPlan(pop, base.generation, reuse=True))
        elif len(added) + len(removed) > len(keys):
            plans.append(PopPlan(pop, 0, added=tuple(sorted(keys))))
        else:
            plans.append(PopPlan(pop, base.generation, added=added, removed=removed))
    return StatePlan(tuple(plans))
