"""Telemetry plumbing of the lab: new-socket tracking, recording and replay files.

- `NewSockets`: from each poll's batches, the congestion control of sockets seen
  for the first time (by socket cookie), counted per client prefix;
- `Recorder` / `read_recording`: a compact telemetry file, gzip of length-delimited
  TcpInfoBatch records (schemas/framing.py, as `collect --sink file`), plus
  a JSON sidecar describing the run (round length, scoring settings, prefixes);
- `shift_batch`: move a recorded batch's timestamps (and run id) by an offset, for
  replays that should look like they happened just now.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from controller.ingest.columns import format_prefix
from dyncc_common.errors import DynccError
from schemas import framing
from schemas.tcpinfo_decode import BatchDecodeError, decode_batch
from schemas.tcpinfo_pb2 import TcpInfoBatch


class NewSockets:
    """Congestion control of newly seen sockets, per prefix, since the last `take()`."""

    def __init__(self, max_tracked: int = 200_000) -> None:
        self.seen: dict[int, int] = {}  # cookie -> poll number when first seen
        self.polls = 0
        self.max_tracked = max_tracked
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.malformed = 0

    def observe(self, batches: Iterable[bytes], first: bool | None = None) -> None:
        """Count the new sockets of one poll's batches; `first`: sockets seen now are a baseline,
        not new (default: this is the tracker's first call)."""
        baseline = self.polls == 0 if first is None else first  # sockets open at the first poll are not new
        self.polls += 1
        for data in batches:
            try:
                batch = decode_batch(data)
            except BatchDecodeError:
                self.malformed += 1
                continue
            if not batch.row_count:
                continue
            cols = batch.columns
            cc = batch.cc()
            prefixes: dict[tuple[bytes, int], str] = {}
            for i in range(batch.row_count):
                cookie = int(cols["cookie"][i])
                if cookie in self.seen:
                    continue
                self.seen[cookie] = self.polls
                if baseline:
                    continue
                key = (cols["client_prefix"][i].tobytes(), int(cols["client_prefix_len"][i]))
                if key not in prefixes:
                    prefixes[key] = format_prefix(*key)
                self.counts[prefixes[key]][str(cc[i])] += 1
        if len(self.seen) > self.max_tracked:  # forget the oldest half
            cut = sorted(self.seen.values())[len(self.seen) // 2]
            self.seen = {k: v for k, v in self.seen.items() if v > cut}

    def take(self) -> dict[str, Counter[str]]:
        out, self.counts = dict(self.counts), defaultdict(Counter)
        return out


# ------------------------------------------------------------------ recording


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


class Recorder:
    """Appends every batch to a gzip file of length-delimited records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: gzip.GzipFile = gzip.open(path, "wb", compresslevel=9)  # noqa: SIM115 - open across polls
        self.records = 0

    def write(self, batches: Iterable[bytes]) -> None:
        for data in batches:
            self._fh.write(framing.header(len(data)))
            self._fh.write(data)
            self.records += 1

    def close(self, meta: dict[str, Any]) -> None:
        self._fh.close()
        meta = {**meta, "records": self.records}
        meta_path(self.path).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


class RecordingError(DynccError):
    """A recording cannot be read; str() is one line."""


def read_recording(path: Path) -> tuple[list[bytes], dict[str, Any]]:
    """The records of a recording and its sidecar metadata; a damaged tail is dropped."""
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise RecordingError(f"cannot read recording {path}: {exc}") from exc
    try:
        meta = json.loads(meta_path(path).read_text())
    except (OSError, ValueError) as exc:
        raise RecordingError(f"cannot read {meta_path(path)}: {exc}") from exc
    records = []
    for frame in framing.iter_frames(data):
        if frame.error:  # the tail of a recording cut short: dropped
            break
        records.append(frame.payload)
    return records, meta


def batch_times(data: bytes) -> tuple[int, int]:
    """(poll_start_ns, run_id) of a serialized batch (header only)."""
    msg = TcpInfoBatch()
    msg.ParseFromString(data)
    return int(msg.poll_start_ns), int(msg.run_id)


def shift_batch(data: bytes, offset_ns: int) -> bytes:
    """The batch with poll_start/end_ns and run_id moved by offset_ns (columns untouched)."""
    msg = TcpInfoBatch()
    msg.ParseFromString(data)
    msg.poll_start_ns = max(int(msg.poll_start_ns) + offset_ns, 0)
    msg.poll_end_ns = max(int(msg.poll_end_ns) + offset_ns, 0)
    msg.run_id = max(int(msg.run_id) + offset_ns, 0)
    return msg.SerializeToString()
