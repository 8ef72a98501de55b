"""The framing of collector files (schemas/framing.py): what the collector writes, ingest and the
lab read back.  Round trip; damage (a cut-off length, a cut-off frame, a length over the limit)
ends the frames with one reported Frame holding the rest of the bytes, never an exception; the
bytes reader and the file reader agree."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import framing
from schemas.framing import (
    HEADER_SIZE,
    MAX_FRAME,
    Frame,
    FrameError,
    frame,
    header,
    iter_frames,
    read_frames,
    split_frames,
)

payloads = st.lists(st.binary(max_size=300), max_size=20)


def _framed(items: list[bytes]) -> bytes:
    return b"".join(frame(p) for p in items)


def _offsets(items: list[bytes]) -> list[int]:
    out, pos = [], 0
    for p in items:
        out.append(pos)
        pos += HEADER_SIZE + len(p)
    return out


def _both(data: bytes, max_frame: int = MAX_FRAME) -> list[Frame]:
    """The frames of `data`, checking that the file reader yields the same ones."""
    frames = list(iter_frames(data, max_frame))
    assert list(read_frames(io.BytesIO(data), max_frame)) == frames
    return frames


@settings(max_examples=200, deadline=None)
@given(payloads)
def test_round_trip(items: list[bytes]) -> None:
    data = _framed(items)
    assert len(data) == sum(HEADER_SIZE + len(p) for p in items)
    assert _both(data) == [Frame(off, p) for off, p in zip(_offsets(items), items, strict=True)]
    assert split_frames(data) == items


@settings(max_examples=300, deadline=None)
@given(payloads.filter(bool), st.data())
def test_truncated_input_ends_with_one_reported_frame(items: list[bytes], data: st.DataObject) -> None:
    whole = _framed(items)
    cut = data.draw(st.integers(0, len(whole) - 1), label="cut")
    damaged = whole[:cut]
    frames = _both(damaged)
    starts = _offsets(items)
    kept = [p for off, p in zip(starts, items, strict=True) if off + HEADER_SIZE + len(p) <= cut]
    assert [f.payload for f in frames if not f.error] == kept
    assert all(not f.error for f in frames[:-1])
    if cut in starts or cut == 0:  # cut on a frame boundary: no damage, just fewer frames
        assert not frames or not frames[-1].error
        return
    last = frames[-1]
    assert last.error.startswith("truncated")
    assert last.offset == starts[len(kept)]
    assert last.payload == damaged[last.offset :]  # the rest of the bytes, for a dead letter
    with pytest.raises(FrameError, match=f"at byte {last.offset}"):
        split_frames(damaged)


@settings(max_examples=200, deadline=None)
@given(
    payloads,
    st.integers(MAX_FRAME + 1, (1 << 32) - 1),
    st.binary(max_size=64),
)
def test_oversized_length_is_reported_not_read(items: list[bytes], length: int, after: bytes) -> None:
    good = _framed(items)
    damaged = good + struct.pack(">I", length) + after
    frames = _both(damaged)
    assert [f.payload for f in frames[:-1]] == items
    last = frames[-1]
    assert "over the limit" in last.error
    assert (last.offset, last.payload) == (len(good), damaged[len(good) :])
    with pytest.raises(FrameError):
        split_frames(damaged)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=200), st.integers(0, 199))
def test_a_smaller_limit_is_a_limit(payload: bytes, limit: int) -> None:
    frames = _both(frame(payload), max_frame=limit)
    if len(payload) <= limit:
        assert frames == [Frame(0, payload)]
    else:
        assert len(frames) == 1 and frames[0].error and frames[0].payload == frame(payload)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_never_raise_and_cover_the_input(data: bytes) -> None:
    frames = _both(data, max_frame=256)
    assert all(not f.error for f in frames[:-1])
    rebuilt = b"".join(f.payload if f.error else frame(f.payload) for f in frames)
    assert rebuilt == data


def test_header_bounds() -> None:
    assert header(0) == b"\0\0\0\0"
    assert header(MAX_FRAME + 1) == struct.pack(">I", MAX_FRAME + 1)  # a reader reports it
    for bad in (-1, 1 << 32):
        with pytest.raises(FrameError):
            header(bad)
    assert issubclass(FrameError, ValueError)
    assert framing.MAX_FRAME == 64 << 20
