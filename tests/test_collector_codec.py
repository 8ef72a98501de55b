"""batch_codec: numpy columns -> TcpInfoBatch -> numpy columns, and decode validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.batch_codec import (
    ADDRESS_COLUMNS,
    COLUMN_DTYPES,
    COLUMNS,
    BatchDecodeError,
    BatchHeader,
    decode_batch,
    encode_batches,
    encode_varints,
)
from schemas.tcpinfo_pb2 import TcpInfoBatch


def random_columns(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {}
    for name in COLUMNS:
        dt = COLUMN_DTYPES[name]
        if name in ADDRESS_COLUMNS:
            cols[name] = rng.integers(0, 256, size=(rows, 16), dtype=np.uint8)
        else:
            # mix of small, large and extreme values so every varint length appears
            bits = rng.integers(0, dt.itemsize * 8 + 1, size=rows)
            hi = np.iinfo(dt).max
            vals = rng.integers(0, hi, size=rows, dtype=dt, endpoint=True)
            mask = ((np.uint64(1) << bits.astype(np.uint64)) - np.uint64(1)).astype(dt)
            vals = np.where(bits >= dt.itemsize * 8, vals, vals & mask)
            cols[name] = vals.astype(dt)
    cols["cc_index"] = rng.integers(0, 3, size=rows).astype(np.uint32)
    return cols


def header(**kw: object) -> BatchHeader:
    base = dict(
        host="edge1",
        pop="fra",
        netns="ns1",
        run_id=123,
        poll_start_ns=10,
        poll_end_ns=20,
        sockets_seen=99,
        sockets_exported=7,
        sockets_filtered=92,
        parse_errors={"truncated": 2},
        cc_names=["bbr", "cubic", "reno"],
        collector_version="t",
    )
    base.update(kw)
    return BatchHeader(**base)  # type: ignore[arg-type]


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=200))
def test_varints_match_protobuf(values: list[int]) -> None:
    msg = TcpInfoBatch()
    msg.bytes_acked.extend(values)
    ours = b""
    if values:
        payload = encode_varints(np.array(values, dtype=np.uint64))
        ours = b"\xa2\x05" + _varint(len(payload)) + payload  # field 84, wire type 2
    assert ours == msg.SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(min_value=0, max_value=300),
    seed=st.integers(0, 2**32 - 1),
    max_rows=st.integers(min_value=1, max_value=120),
    max_bytes=st.integers(min_value=4_000, max_value=60_000),
)
def test_round_trip(rows: int, seed: int, max_rows: int, max_bytes: int) -> None:
    cols = random_columns(np.random.default_rng(seed), rows)
    msgs = encode_batches(cols, header(), first_sequence=41, max_rows=max_rows, max_bytes=max_bytes)
    decoded = [decode_batch(m) for m in msgs]
    assert [d.sequence for d in decoded] == list(range(41, 41 + len(msgs)))
    assert [d.batch_index for d in decoded] == list(range(len(msgs)))
    assert {d.batch_count for d in decoded} == {len(msgs)}
    assert sum(d.row_count for d in decoded) == rows
    for d, m in zip(decoded, msgs, strict=True):
        assert d.row_count <= max_rows
        assert d.row_count == 1 or len(m) <= max_bytes + 200  # header allowance
        assert (d.host, d.pop, d.netns, d.run_id, d.sockets_seen) == ("edge1", "fra", "ns1", 123, 99)
        assert d.parse_errors == {"truncated": 2}
        assert d.cc_names == ["bbr", "cubic", "reno"]
    for name in COLUMNS:
        got = np.concatenate([d.columns[name] for d in decoded]) if decoded else None
        assert got is not None
        assert got.dtype == COLUMN_DTYPES[name]
        np.testing.assert_array_equal(got.reshape(cols[name].shape), cols[name], err_msg=name)
    if rows:
        assert list(decoded[0].cc()[: min(rows, decoded[0].row_count)]) == [
            ["bbr", "cubic", "reno"][i] for i in cols["cc_index"][: decoded[0].row_count]
        ]


def test_empty_poll_still_one_batch() -> None:
    msgs = encode_batches({}, header(sockets_seen=5, sockets_exported=0), first_sequence=0)
    assert len(msgs) == 1
    d = decode_batch(msgs[0])
    assert (d.row_count, d.sockets_seen, d.batch_count) == (0, 5, 1)


def test_decode_rejects_bad_batches() -> None:
    cols = random_columns(np.random.default_rng(1), 5)
    good = encode_batches(cols, header(), first_sequence=0)[0]
    msg = TcpInfoBatch()
    msg.ParseFromString(good)

    def mutate(fn) -> bytes:
        m = TcpInfoBatch()
        m.CopyFrom(msg)
        fn(m)
        return m.SerializeToString()

    cases = {
        "schema_version": mutate(lambda m: setattr(m, "schema_version", 2)),
        "row_count": mutate(lambda m: setattr(m, "row_count", 6)),
        "src_addr": mutate(lambda m: setattr(m, "src_addr", m.src_addr[:-1])),
        "rtt": mutate(lambda m: m.rtt.append(1)),
        "cc_index": mutate(lambda m: m.cc_names.pop()),
        "not a TcpInfoBatch": b"\xff\xff\xff",
    }
    for word, data in cases.items():
        with pytest.raises(BatchDecodeError, match=word):
            decode_batch(data)


def test_unknown_column_rejected_on_encode() -> None:
    with pytest.raises(ValueError, match="unknown column"):
        encode_batches({"nope": np.zeros(3, np.uint32)}, header(), first_sequence=0)
