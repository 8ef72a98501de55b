"""Replay a recorded lab (telemetry and access logs) as if it had just happened, on a 5-minute time base.

The lab runs an accelerated clock (one round = one scoring bucket of
`round_seconds`, standing in for 5 minutes).  A replay stretches time back out
by 300 / round_seconds, anchored so that every lab bucket lands exactly on a
5-minute bucket and the last one ends at the latest 5-minute boundary before
now.  The stretched batches go through the ingest writer (`BatchWriter`) into
the store, so the 5-minute rollup, the scoring rounds (standard 5-minute
buckets, the lab's lookback and minimum in buckets) and the report see data
shaped exactly like production.  The edge hosts' access logs recorded beside the telemetry
(`<recording>.access-<host>.log.gz`) are stretched the same way (the `$msec` field) and loaded
bucket by bucket with the access-log loader into http_requests.  Used by `dyncc demo` without
root, and by the root demo to build its report.

`dilation()`, `dilate()` and `dilate_log_lines()` are pure; `replay()` does the I/O.
"""

from __future__ import annotations

import datetime as dt
import gzip
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.ingest.access_loader import AccessLogLoader
from controller.ingest.writer import BatchWriter
from dyncc.lab.telemetry import NewSockets, batch_times, shift_batch

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


def dilate_log_lines(lines: Sequence[bytes], d: Dilation) -> list[list[bytes]]:
    """Access-log lines with `$msec` (the first field) moved onto the replay's time base, grouped
    by replayed bucket; a line whose first field is not a time stays as it is (in the last
    bucket), for the loader to dead-letter."""
    groups: list[list[bytes]] = [[] for _ in range(d.buckets)]
    for line in lines:
        head, sep, rest = line.partition(b" ")
        try:
            t_ns = round(float(head) * 1e9)
        except ValueError:
            groups[-1].append(line)
            continue
        mapped = d.map_ns(t_ns)
        k = min(max(int((mapped // 1_000_000_000 - d.anchor_s) // REAL_BUCKET), 0), d.buckets - 1)
        groups[k].append(b"%d.%03d" % divmod(mapped // 1_000_000, 1000) + sep + rest)
    return groups


def recorded_access_logs(recording: Path) -> dict[str, list[bytes]]:
    """host -> the lines of its access log recorded beside `recording` (none: {})."""
    out = {}
    prefix = f"{recording.name}.access-"
    for path in sorted(recording.parent.glob(f"{recording.name}.access-*.log.gz")):
        host = path.name[len(prefix) : -len(".log.gz")]
        with gzip.open(path, "rb") as fh:
            out[host] = fh.read().splitlines(keepends=True)
    return out


@dataclass
class ReplayResult:
    dilation: Dilation
    rows: int
    batches: int
    requests: int = 0  # access-log rows loaded
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
    store: Any,
    records: Sequence[bytes],
    meta: dict[str, Any],
    control: Any,
    now: dt.datetime | None = None,
    access_logs: dict[str, list[bytes]] | None = None,
    workdir: Path | None = None,
) -> ReplayResult:
    """Load the recording bucket by bucket (telemetry, then the access-log lines of the bucket),
    running a control round at each bucket's end."""
    now_s = int((now or dt.datetime.now(dt.UTC)).timestamp())
    dilated, d = dilate(records, int(meta["round_seconds"]), now_s)
    writer = BatchWriter(store, source="demo-replay")
    tracker = NewSockets()
    result = ReplayResult(d, 0, 0)
    logs = _LogReplay(store, meta, access_logs or {}, d, workdir)
    for k, (group, end_s) in enumerate(zip(split_by_bucket(dilated, d), d.boundaries(), strict=True)):
        res = writer.write(group)
        result.rows += res.rows
        result.batches += res.batches
        result.requests += logs.load_bucket(k)
        for r in group:
            tracker.observe([r])
        result.new_sockets[k] = tracker.take()
        result.rounds.append(control.round(dt.datetime.fromtimestamp(end_s, dt.UTC), k + 1))
    logs.close()
    log.info(
        "replayed %d batches (%d rows) and %d HTTP requests over %d five-minute buckets ending %s",
        result.batches,
        result.rows,
        result.requests,
        d.buckets,
        dt.datetime.fromtimestamp(d.boundaries()[-1], dt.UTC),
    )
    return result


class _LogReplay:
    """The recorded access logs, dilated, appended bucket by bucket to a file per host and loaded."""

    def __init__(
        self, store: Any, meta: dict[str, Any], logs: dict[str, list[bytes]], d: Dilation, workdir: Path | None
    ) -> None:
        self.groups = {host: dilate_log_lines(lines, d) for host, lines in logs.items()}
        pop_of = {h: pop for pop, hosts in dict(meta.get("pops", {})).items() for h in hosts}
        self.loaders: dict[str, AccessLogLoader] = {}
        self.files: dict[str, Path] = {}
        if not self.groups:
            return
        base = Path(workdir or tempfile.mkdtemp(prefix="dyncc-replay-")) / "access-logs"
        base.mkdir(parents=True, exist_ok=True)
        for host in self.groups:
            self.files[host] = base / f"{host}.log"
            self.files[host].write_bytes(b"")
            self.loaders[host] = AccessLogLoader(store, pop=str(pop_of.get(host, "lab")), host=host)

    def close(self) -> None:
        for loader in self.loaders.values():
            loader.close()

    def load_bucket(self, k: int) -> int:
        rows = 0
        for host, groups in self.groups.items():
            with open(self.files[host], "ab") as fh:
                fh.writelines(groups[k])
            rows += self.loaders[host].load(self.files[host]).rows
        return rows
