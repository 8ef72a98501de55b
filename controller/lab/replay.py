"""Replay recorded lab telemetry as if it had just happened, on a 5-minute time base.

The lab runs an accelerated clock (one round = one scoring bucket of
`round_seconds`, standing in for 5 minutes).  A replay stretches time back out
by 300 / round_seconds, anchored so that every lab bucket lands exactly on a
5-minute bucket and the last one ends at the latest 5-minute boundary before
now.  The stretched batches go through the ingest writer (`BatchWriter`) into
the store, so the 5-minute rollup, the scoring rounds (standard 5-minute
buckets, the lab's lookback and minimum in buckets) and the report see data
shaped exactly like production.  Used by `dyncc demo` without root, and by the
root demo to build its report.

`dilation()` / `dilate()` are pure; `replay()` does the I/O.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.ingest.writer import BatchWriter
from controller.lab.telemetry import NewSockets, batch_times, shift_batch

log = logging.getLogger("dyncc.demo")

REAL_BUCKET = 300
DEFAULT_RECORDING = Path(__file__).resolve().parents[2] / "demo" / "lab-telemetry.bin.gz"


@dataclass(frozen=True)
class Dilation:
    """t' = anchor_s + (t - origin_s) * factor, for times in seconds."""

    origin_s: int  # first lab bucket boundary (lab clock)
    anchor_s: int  # where it lands (a 5-minute boundary)
    round_seconds: int
    buckets: int  # lab buckets covered

    @property
    def factor(self) -> float:
        return REAL_BUCKET / self.round_seconds

    def map_ns(self, t_ns: int) -> int:
        """Exact integer mapping (a float would round bucket ends into the next bucket)."""
        lab_ns = t_ns - self.origin_s * 1_000_000_000
        return self.anchor_s * 1_000_000_000 + lab_ns * REAL_BUCKET // self.round_seconds

    def boundaries(self) -> list[int]:
        """Replayed bucket ends (Unix s), one per lab bucket, in order: the scoring round times."""
        return [self.anchor_s + (k + 1) * REAL_BUCKET for k in range(self.buckets)]


def dilation(first_ns: int, last_ns: int, round_seconds: int, now_s: int) -> Dilation:
    if round_seconds <= 0 or last_ns < first_ns:
        raise ValueError("bad recording span")
    origin = (first_ns // 1_000_000_000) // round_seconds * round_seconds
    buckets = (last_ns // 1_000_000_000 - origin) // round_seconds + 1
    end = now_s // REAL_BUCKET * REAL_BUCKET
    return Dilation(origin, end - buckets * REAL_BUCKET, round_seconds, int(buckets))


def dilate(records: Sequence[bytes], round_seconds: int, now_s: int) -> tuple[list[bytes], Dilation]:
    """Every record with its poll times moved onto the replay's time base (run ids shifted alike)."""
    times = [batch_times(r)[0] for r in records]
    d = dilation(min(times), max(times), round_seconds, now_s)
    out = [shift_batch(r, d.map_ns(t) - t) for r, t in zip(records, times, strict=True)]
    return out, d


@dataclass
class ReplayResult:
    dilation: Dilation
    rows: int
    batches: int
    rounds: list[Any] = field(default_factory=list)  # per round: ControlOutcome
    new_sockets: dict[int, dict[str, Any]] = field(default_factory=dict)  # bucket index -> prefix -> cc


def split_by_bucket(records: Sequence[bytes], d: Dilation) -> list[list[bytes]]:
    """Dilated records grouped by replayed 5-minute bucket (index 0 = the first)."""
    groups: list[list[bytes]] = [[] for _ in range(d.buckets)]
    for r in records:
        t = batch_times(r)[0] // 1_000_000_000
        k = min(max(int((t - d.anchor_s) // REAL_BUCKET), 0), d.buckets - 1)
        groups[k].append(r)
    return groups


def replay(
    store: Any, records: Sequence[bytes], meta: dict[str, Any], control: Any, now: dt.datetime | None = None
) -> ReplayResult:
    """Load the recording bucket by bucket, running a control round at each bucket's end."""
    now_s = int((now or dt.datetime.now(dt.UTC)).timestamp())
    dilated, d = dilate(records, int(meta["round_seconds"]), now_s)
    writer = BatchWriter(store, source="demo-replay")
    tracker = NewSockets()
    result = ReplayResult(d, 0, 0)
    for k, (group, end_s) in enumerate(zip(split_by_bucket(dilated, d), d.boundaries(), strict=True)):
        res = writer.write(group)
        result.rows += res.rows
        result.batches += res.batches
        for r in group:
            tracker.observe([r])
        result.new_sockets[k] = tracker.take()
        result.rounds.append(control.round(dt.datetime.fromtimestamp(end_s, dt.UTC), k + 1))
    log.info(
        "replayed %d batches (%d rows) over %d five-minute buckets ending %s",
        result.batches,
        result.rows,
        d.buckets,
        dt.datetime.fromtimestamp(d.boundaries()[-1], dt.UTC),
    )
    return result
