"""Replay length-delimited TcpInfoBatch files (collector --sink file) into a BatchWriter.

Each record is a 4-byte big-endian length and that many bytes.  A length
above 64 MiB or past the end of the file is damage: everything before it is
loaded, the rest of the file is dead-lettered as one record (offset = byte
position), and the replay goes on with the next file.  Dead letters name the
file as topic, partition -1 and the record's byte offset.  Records the
writer refuses (undecodable, headers over their limits, data the store
refuses) are dead-lettered the same way and every other record still lands;
only a store that is unavailable stops a replay (StoreError).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from pathlib import Path

from controller.ingest.writer import BatchWriter, FlushResult, Incoming

log = logging.getLogger("dyncc.ingest")

MAX_RECORD = 64 << 20
_LEN = struct.Struct(">I")


def iter_records(data: bytes, source: str) -> Iterator[Incoming]:
    """Records of one file; a damaged tail comes out as one record of the remaining bytes."""
    pos = 0
    n = len(data)
    view = memoryview(data)
    while pos < n:
        length = _LEN.unpack_from(data, pos)[0] if pos + 4 <= n else -1
        if length < 0 or length > MAX_RECORD or pos + 4 + length > n:
            yield Incoming(bytes(view[pos:]), source, -1, pos)
            return
        yield Incoming(bytes(view[pos + 4 : pos + 4 + length]), source, -1, pos)
        pos += 4 + length


def replay_file(writer: BatchWriter, path: Path, max_bytes: int = 32 << 20) -> FlushResult:
    """Load every record of `path` (groups of about max_bytes); returns the totals."""
    total = FlushResult()
    group: list[Incoming] = []
    size = 0
    data = path.read_bytes()

    def flush() -> None:
        nonlocal size
        res = writer.flush(group)
        log.info("%s: %s", path, res.summary())
        total.add(res)
        group.clear()
        size = 0

    for record in iter_records(data, str(path)):
        group.append(record)
        size += len(record.value)
        if size >= max_bytes:
            flush()
    if group:
        flush()
    return total
