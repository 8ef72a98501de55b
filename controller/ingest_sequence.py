"""Per-host sequence-gap detection for ingest (pure).

Collectors number their batches per host, +1 per batch, for the life of one
run (run_id).  A batch whose sequence jumps past last + 1 means the batches in
between never reached ingest: a Gap.  A new run_id starts a new numbering and
is not loss; batches at or below the last sequence seen (redeliveries,
duplicates) are not gaps.  The last sequence per (host, run_id) comes from
this process's history or, the first time a key is seen, from a baseline the
caller reads from the ledger, so gaps are found across loader restarts too.

plan() does not change the tracker; apply() commits its updates once the
flush that recorded the gaps has succeeded, so a retried flush finds them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


class SequenceTracker:
    def __init__(self) -> None:
        self.last: dict[Key, int] = {}
        self._run_of_host: dict[str, int] = {}

    def unknown(self, batches: Iterable[SeenBatch]) -> set[Key]:
        return {(b.host, b.run_id) for b in batches} - self.last.keys()

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
        baseline = baseline or {}
        state: dict[Key, int] = dict(override or {})
        gaps: list[Gap] = []
        for b in sorted(batches, key=lambda x: (x.host, x.run_id, x.sequence)):
            key = (b.host, b.run_id)
            last = state.get(key, self.last.get(key, baseline.get(key)))
            if last is not None and b.sequence > last + 1:
                gaps.append(Gap(b.host, b.run_id, b.pop, last + 1, b.sequence - 1, b.time))
            state[key] = b.sequence if last is None else max(last, b.sequence)
        return gaps, state

    def apply(self, updates: Mapping[Key, int]) -> None:
        for (host, run_id), seq in updates.items():
            previous_run = self._run_of_host.get(host)
            if previous_run is not None and previous_run != run_id and run_id > previous_run:
                self.last.pop((host, previous_run), None)  # keep one run per host in memory
            if previous_run is None or run_id >= previous_run:
                self._run_of_host[host] = run_id
            self.last[(host, run_id)] = max(seq, self.last.get((host, run_id), seq))
