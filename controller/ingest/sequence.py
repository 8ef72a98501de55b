"""Per-host sequence-gap detection and gap closing for ingest (pure).

Collectors number their batches per host, +1 per batch, for the life of one
run (run_id).  A batch whose sequence jumps past last + 1 means the batches in
between have not reached ingest: a Gap.  A new run_id starts a new numbering and
is not loss; batches at or below the last sequence seen (redeliveries,
duplicates, late batches) are not gaps.  The last sequence per (host, run_id)
comes from this process's history or, the first time a key is seen, from a
baseline the caller reads from the ledger, so gaps are found across loader
restarts too.

A batch that arrives after a later one of its run (plan_behind()) may be a missing
batch arriving late: when it lies inside a recorded gap, find_fills() pairs it
with that gap (a Fill), and the gap's place is recorded as filled instead of
lost.  The gaps come from the store (so this works across loader restarts) and
from flushes still in flight.

plan() does not change the tracker; apply() commits its updates once the
flush that recorded the gaps has succeeded, so a retried flush finds them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

Key = tuple[str, int]


@dataclass(frozen=True)
class SeenBatch:
    host: str
    run_id: int
    sequence: int
    pop: str
    time: int  # poll start, unix seconds


@dataclass(frozen=True)
class Gap:
    host: str
    run_id: int
    pop: str
    from_sequence: int  # first missing
    to_sequence: int  # last missing
    time: int  # poll time of the batch after the gap

    @property
    def missing(self) -> int:
        return self.to_sequence - self.from_sequence + 1


@dataclass(frozen=True)
class Fill:
    """A batch that arrived late, inside a recorded gap: one place of the gap is filled."""

    gap: Gap
    sequence: int


class SequenceTracker:
    def __init__(self) -> None:
        self.last: dict[Key, int] = {}
        self._run_of_host: dict[str, int] = {}

    def unknown(self, batches: Iterable[SeenBatch]) -> set[Key]:
        return {(b.host, b.run_id) for b in batches} - self.last.keys()

    def _walk(
        self,
        batches: Iterable[SeenBatch],
        baseline: Mapping[Key, int] | None,
        state: dict[Key, int],
    ) -> Iterator[tuple[SeenBatch, int | None]]:
        """(batch, last sequence before it) in (host, run_id, sequence) order; updates `state`."""
        baseline = baseline or {}
        for b in sorted(batches, key=lambda x: (x.host, x.run_id, x.sequence)):
            key = (b.host, b.run_id)
            last = state.get(key, self.last.get(key, baseline.get(key)))
            yield b, last
            state[key] = b.sequence if last is None else max(last, b.sequence)

    def plan(
        self,
        batches: Iterable[SeenBatch],
        baseline: Mapping[Key, int] | None = None,
        override: Mapping[Key, int] | None = None,
    ) -> tuple[list[Gap], dict[Key, int]]:
        """Gaps in `batches` (sorted by sequence per key) and the tracker updates to apply.

        `baseline` is used for keys the tracker does not know; `override` (updates of
        flushes still in flight) wins over the tracker's own state.
        """
        gaps, updates, _ = self.plan_behind(batches, baseline, override)
        return gaps, updates

    def plan_behind(
        self,
        batches: Iterable[SeenBatch],
        baseline: Mapping[Key, int] | None = None,
        override: Mapping[Key, int] | None = None,
    ) -> tuple[list[Gap], dict[Key, int], list[SeenBatch]]:
        """plan(), and the batches at or below the last sequence seen before them (late, or seen before)."""
        gaps: list[Gap] = []
        behind: list[SeenBatch] = []
        state: dict[Key, int] = dict(override or {})
        for b, last in self._walk(batches, baseline, state):
            if last is None:
                continue
            if b.sequence > last + 1:
                gaps.append(Gap(b.host, b.run_id, b.pop, last + 1, b.sequence - 1, b.time))
            elif b.sequence <= last:
                behind.append(b)
        return gaps, state, behind

    def apply(self, updates: Mapping[Key, int]) -> None:
        for (host, run_id), seq in updates.items():
            previous_run = self._run_of_host.get(host)
            if previous_run is not None and previous_run != run_id and run_id > previous_run:
                self.last.pop((host, previous_run), None)  # keep one run per host in memory
            if previous_run is None or run_id >= previous_run:
                self._run_of_host[host] = run_id
            self.last[(host, run_id)] = max(seq, self.last.get((host, run_id), seq))


def find_fills(batches: Iterable[SeenBatch], gaps: Iterable[Gap]) -> list[Fill]:
    """Each batch that lies inside one of `gaps` of its (host, run_id), paired with that gap.

    Gaps of one key do not overlap (each starts past the last sequence seen);
    if recorded gaps ever do, the one starting last wins.
    """
    by_key: dict[Key, list[Gap]] = {}
    for g in gaps:
        by_key.setdefault((g.host, g.run_id), []).append(g)
    for found in by_key.values():
        found.sort(key=lambda g: g.from_sequence, reverse=True)
    fills: list[Fill] = []
    for b in batches:
        for g in by_key.get((b.host, b.run_id), ()):
            if g.from_sequence <= b.sequence <= g.to_sequence:
                fills.append(Fill(g, b.sequence))
                break
    return fills
