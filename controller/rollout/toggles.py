"""Trial toggles: the switchback arm changes of prefixes that already passed a canary.

A toggle is a removal of a trial prefix (back to the default) or the addition of a trial prefix
that was on BBR in a POP-wide config (a full publish or a promotion) since its trial began
(`DesiredState.trial_prefixes`: prefix -> trial start ns).  Toggles need no canary wave of their
own, and they never wait for one: the engine (controller/rollout/engine.py) publishes them
POP-wide while another change's wave is in flight, and applies them to that wave's candidate
too, so the wave's hosts keep its change and get the arm.

`TrialToggles.find()` picks the toggles of a desired state against a base config (the config in
force on the POP's hosts), leaving out the prefixes a wave in flight is changing;
`Toggles.applied()` is the pure part: a base's entries with the toggles applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller.rollout import records as rs
from controller.rollout.generate import ConfigDiff, diff_entries, generate
from controller.scoring.desired import DesiredState
from controller.store import Store
from controller.store.outcomes import PUBLISHED
from schemas.congestion_pb2 import PrefixEntry

TOGGLE_HISTORY = 32  # config versions looked at for a trial prefix's earlier POP-wide publish
POP_WIDE_KINDS = ("full", "promote")


@dataclass(frozen=True)
class Toggles:
    """Trial prefixes to take out of a config, and entries to put in (replacing any)."""

    remove: frozenset[str] = frozenset()
    put: Mapping[str, PrefixEntry] = field(default_factory=dict)

    @property
    def prefixes(self) -> frozenset[str]:
        return self.remove | frozenset(self.put)

    def __bool__(self) -> bool:
        return bool(self.remove or self.put)

    def applied(self, base: Iterable[PrefixEntry]) -> list[PrefixEntry]:
        """`base`'s entries with the toggles applied, in `base`'s order, new ones after."""
        entries = {e.prefix: e for e in base if e.prefix not in self.remove}
        entries.update(self.put)
        return list(entries.values())


class TrialToggles:
    """Finds toggles with the store's config history (see the module docstring)."""

    def __init__(self, store: Store, *, lock: bool) -> None:
        self.store = store
        self.lock = lock

    def validated(self, pop: str, needed: set[str], trials: Mapping[str, int]) -> set[str]:
        """Those of `needed` that were on BBR in a POP-wide config since their trial began."""
        seen: set[str] = set()
        for version, status, kind, *_, created_ns in rs.config_history(self.store, pop, limit=TOGGLE_HISTORY):
            if needed <= seen:
                break
            if str(status) != PUBLISHED or str(kind) not in POP_WIDE_KINDS:
                continue
            config = rs.load_published_config(self.store, pop, int(version))
            for e in config.entries if config is not None else ():
                if e.prefix in needed and int(created_ns) >= trials[e.prefix]:
                    seen.add(e.prefix)
        return seen

    def toggled(self, pop: str, desired: DesiredState, diff: ConfigDiff) -> frozenset[str]:
        """The prefixes of `diff` that are toggles (validation exempts them from the change limit)."""
        trials = desired.trial_prefixes
        if not trials:
            return frozenset()
        removed = {p for p in diff.removed if p in trials}
        on = {p for p in (*diff.added, *diff.changed) if p in trials}
        return frozenset(removed | (self.validated(pop, on, trials) if on else set()))

    def only_toggles(self, pop: str, desired: DesiredState, diff: ConfigDiff) -> bool:
        """Whether every change of `diff` is a toggle: such a change needs no canary wave."""
        trials = desired.trial_prefixes
        if not diff.total or not set(diff.prefixes) <= set(trials):
            return False
        needed = set(diff.added) | set(diff.changed)
        return needed <= self.validated(pop, needed, trials) if needed else True

    def find(
        self,
        pop: str,
        desired: DesiredState,
        base: Iterable[PrefixEntry],
        *,
        now: int,
        exclude: frozenset[str] = frozenset(),
    ) -> Toggles:
        """The toggles that take `base` toward `desired`, none of `exclude` (a wave's change)."""
        trials = desired.trial_prefixes
        if not trials:
            return Toggles()
        wanted = {e.prefix: e for e in generate(desired, 0, created_at_ns=now, lock=self.lock).entries}
        diff = diff_entries(base, wanted.values())
        removed = frozenset(p for p in diff.removed if p in trials and p not in exclude)
        on = {p for p in (*diff.added, *diff.changed) if p in trials and p not in exclude}
        validated = self.validated(pop, on, trials) if on else set()
        return Toggles(remove=removed, put={p: wanted[p] for p in sorted(validated)})
