"""The framing of collector files: length-prefixed records, one serialized TcpInfoBatch each.

Written by `dyncc collect --sink file` (collector/telemetry/sinks.py, FileSink), replayed by
`dyncc ingest --from-file` (controller/ingest/files.py) and used for the lab's recordings
(dyncc/lab/telemetry.py).  A frame is a 4-byte big-endian length and that many bytes.  A length
above MAX_FRAME (64 MiB, also the bound of `dyncc collect --max-bytes`), a length past the end
of the data, or fewer than 4 bytes left for a length is damage.

Readers never raise on damage: they yield every whole frame before it, then one last Frame whose
`error` says what is wrong, whose `offset` is the damaged frame's byte position and whose
`payload` is every byte from there to the end.  The caller decides what damage means: ingest
dead-letters the tail, the lab drops it, `split_frames` raises FrameError.

    header(length)      the 4-byte prefix of a frame of `length` bytes
    frame(payload)      header + payload
    iter_frames(data)   the Frames of a bytes object
    read_frames(f)      the Frames of an open binary file, read one frame at a time (the same
                        frames and offsets as iter_frames on the file's bytes)
    split_frames(data)  the payloads of a bytes object; FrameError on damage (tests and tools)

Stdlib only (and the exception tree): the collector loads it on its start path.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from dyncc_common.errors import DynccError

__all__ = [
    "HEADER_SIZE",
    "MAX_FRAME",
    "Frame",
    "FrameError",
    "frame",
    "header",
    "iter_frames",
    "read_frames",
    "split_frames",
]

_HEADER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size  # 4
MAX_FRAME = 64 << 20  # bytes of one frame's payload that readers accept
_MAX_LENGTH = (1 << 32) - 1  # what the length prefix can hold


class FrameError(DynccError, ValueError):
    """A frame that cannot be written, or damaged framing where whole frames were required."""


@dataclass(frozen=True, slots=True)
class Frame:
    offset: int  # byte position of the frame (its length prefix) in the data or file
    payload: bytes  # the frame's bytes; for damage, every byte from `offset` to the end
    error: str = ""  # why the framing is damaged here ('' = a whole frame)


def header(length: int) -> bytes:
    """The length prefix of a frame of `length` bytes; FrameError when 4 bytes cannot hold it.

    Writers do not enforce MAX_FRAME: the collector's batches are bounded by `--max-bytes`
    (at most MAX_FRAME of columns), and a longer frame is left for the reader to report."""
    if not 0 <= length <= _MAX_LENGTH:
        raise FrameError(f"a frame of {length} bytes cannot be framed (4-byte length)")
    return _HEADER.pack(length)


def frame(payload: bytes) -> bytes:
    """One whole frame: the length prefix and `payload`."""
    return header(len(payload)) + payload


def _short_header(have: int) -> str:
    return f"truncated length: {have} of {HEADER_SIZE} bytes"


def _oversized(length: int, max_frame: int) -> str:
    return f"frame length {length} over the limit of {max_frame}"


def _short_payload(have: int, length: int) -> str:
    return f"truncated frame: {have} of {length} bytes"


def iter_frames(data: bytes, max_frame: int = MAX_FRAME) -> Iterator[Frame]:
    """The frames of `data`; damage ends them with one Frame carrying `error` (never raises)."""
    n = len(data)
    view = memoryview(data)
    pos = 0
    while pos < n:
        if pos + HEADER_SIZE > n:
            yield Frame(pos, bytes(view[pos:]), _short_header(n - pos))
            return
        (length,) = _HEADER.unpack_from(data, pos)
        start = pos + HEADER_SIZE
        if length > max_frame:
            yield Frame(pos, bytes(view[pos:]), _oversized(length, max_frame))
            return
        if start + length > n:
            yield Frame(pos, bytes(view[pos:]), _short_payload(n - start, length))
            return
        yield Frame(pos, bytes(view[start : start + length]))
        pos = start + length


def read_frames(f: BinaryIO, max_frame: int = MAX_FRAME) -> Iterator[Frame]:
    """The frames of an open binary file, read one at a time (at most one frame in memory, but
    for damage: the rest of the file); the same frames as iter_frames on its bytes."""
    pos = 0
    while True:
        head = f.read(HEADER_SIZE)
        if not head:
            return
        if len(head) < HEADER_SIZE:
            yield Frame(pos, head + f.read(), _short_header(len(head)))
            return
        (length,) = _HEADER.unpack(head)
        if length > max_frame:
            yield Frame(pos, head + f.read(), _oversized(length, max_frame))
            return
        body = f.read(length)
        if len(body) < length:
            yield Frame(pos, head + body + f.read(), _short_payload(len(body), length))
            return
        yield Frame(pos, body)
        pos += HEADER_SIZE + length


def split_frames(data: bytes, max_frame: int = MAX_FRAME) -> list[bytes]:
    """The payloads of `data`; FrameError (a ValueError) naming the damage and its offset."""
    out: list[bytes] = []
    for item in iter_frames(data, max_frame):
        if item.error:
            raise FrameError(f"{item.error} at byte {item.offset}")
        out.append(item.payload)
    return out
