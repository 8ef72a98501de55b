"""Replay length-delimited TcpInfoBatch files (collector --sink file) into a BatchWriter.

Each record is a 4-byte big-endian length and that many bytes (schemas/framing.py).  A
length above 64 MiB or past the end of the file is damage: everything before it is
loaded, the rest of the file is dead-lettered as one record (offset = byte
position), and the replay goes on with the next file.  Dead letters name the
file as topic, partition -1 and the record's byte offset.  Records the
writer refuses (undecodable, headers over their limits, data the store
refuses) are dead-lettered the same way and every other record still lands;
only a store that is unavailable stops a replay (StoreError).

The file is read as it is loaded (at most about two groups of records in
memory, whatever its size), and the next group is prepared while the previous
one is decoded and inserted, slice by slice, on a worker thread
(BatchWriter.prepare with the in-flight group pending, then insert and settle
in order, as the Kafka loader does).  A group whose insert fails is flushed again on its own (content errors
are isolated there) and the group prepared behind it is prepared again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from controller.ingest.writer import BatchWriter, FlushResult, Incoming, PreparedFlush
from controller.store import StoreContentError
from schemas.framing import Frame, iter_frames, read_frames

log = logging.getLogger("dyncc.ingest")


def iter_records(data: bytes, source: str) -> Iterator[Incoming]:
    """Records of one file's bytes; a damaged tail comes out as one record of the remaining bytes."""
    for frame in iter_frames(data):
        yield _record(frame, source)


def read_records(f: BinaryIO, source: str) -> Iterator[Incoming]:
    """The records of an open file, read one at a time (same records and offsets as iter_records)."""
    for frame in read_frames(f):
        yield _record(frame, source)


def _record(frame: Frame, source: str) -> Incoming:
    if frame.error:
        log.warning("%s: damaged at byte %d (%s): the rest is dead-lettered", source, frame.offset, frame.error)
    return Incoming(frame.payload, source, -1, frame.offset)


def iter_groups(f: BinaryIO, source: str, max_bytes: int) -> Iterator[list[Incoming]]:
    """Consecutive records of `f` in groups of about max_bytes of message bytes."""
    group: list[Incoming] = []
    size = 0
    for record in read_records(f, source):
        group.append(record)
        size += len(record.value)
        if size >= max_bytes:
            yield group
            group, size = [], 0
    if group:
        yield group


def replay_file(writer: BatchWriter, path: Path, max_bytes: int = 32 << 20) -> FlushResult:
    """Load every record of `path` (groups of about max_bytes); returns the totals."""
    total = FlushResult()
    inflight: tuple[list[Incoming], PreparedFlush, Future[FlushResult]] | None = None

    def finish() -> bool:
        """Settle the in-flight group; False when it had to be flushed again (content error)."""
        nonlocal inflight
        assert inflight is not None
        items, prep, future = inflight
        inflight = None
        try:
            future.result()
            res, clean = writer.settle(prep), True
        except StoreContentError:  # a refusal outside the rows: flush() isolates it
            res, clean = writer.flush(items), False
        log.info("%s: %s", path, res.summary())
        total.add(res)
        return clean

    with path.open("rb") as f, ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-insert") as pool:
        try:
            for group in iter_groups(f, str(path), max_bytes):
                try:
                    prep = writer.prepare(group, [inflight[1]] if inflight else [])
                except StoreContentError:
                    prep = None
                if inflight is not None and not finish():
                    prep = None  # prepared against a group that did not land as planned
                if prep is None:
                    res = writer.flush(group)
                    log.info("%s: %s", path, res.summary())
                    total.add(res)
                    continue
                inflight = (group, prep, pool.submit(writer.insert, prep))
            if inflight is not None:
                finish()
        finally:
            if inflight is not None:  # an error above: let the running insert end before leaving
                inflight[2].exception()
    return total
