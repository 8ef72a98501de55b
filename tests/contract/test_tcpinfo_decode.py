"""batch_codec: numpy columns -> TcpInfoBatch -> numpy columns; the decoder on any valid encoding."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.tcpinfo_columns import ADDRESS_COLUMNS, COLUMN_DTYPES, COLUMNS, SCHEMA_VERSION
from schemas.tcpinfo_decode import BatchDecodeError, decode_all, decode_batch, scan_batch
from schemas.tcpinfo_encode import BatchHeader, encode_varint
from schemas.tcpinfo_pb2 import TcpInfoBatch
from tests.support.tcpinfo_batches import encode_batches


def random_columns(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {}
    for name in COLUMNS:
        dt = COLUMN_DTYPES[name]
        if name in ADDRESS_COLUMNS:
            cols[name] = rng.integers(0, 256, size=(rows, 16), dtype=np.uint8)
        else:
            # mix of small, large and extreme values up to each type's maximum
            bits = rng.integers(0, dt.itemsize * 8 + 1, size=rows)
            hi = np.iinfo(dt).max
            vals = rng.integers(0, hi, size=rows, dtype=dt, endpoint=True)
            mask = ((np.uint64(1) << bits.astype(np.uint64)) - np.uint64(1)).astype(dt)
            vals = np.where(bits >= dt.itemsize * 8, vals, vals & mask)
            cols[name] = vals.astype(dt)
    cols["cc_index"] = rng.integers(0, 3, size=rows).astype(np.uint32)
    cols["client_prefix_len"] = rng.integers(0, 129, size=rows).astype(np.uint32)  # the contract's range
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


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(min_value=1, max_value=200), seed=st.integers(0, 2**32 - 1))
def test_encoding_is_what_the_protobuf_runtime_serializes(rows: int, seed: int) -> None:
    """Header + packed fixed-width columns in field order: byte for byte the runtime's own encoding."""
    cols = random_columns(np.random.default_rng(seed), rows)
    (ours,) = encode_batches(cols, header(), first_sequence=3, max_rows=rows, max_bytes=1 << 24)
    assert TcpInfoBatch.FromString(ours).SerializeToString() == ours


def test_column_table_is_the_proto_contract() -> None:
    """schemas.tcpinfo_encode's static column table (no protobuf runtime) == the generated descriptor."""
    from google.protobuf.descriptor import FieldDescriptor

    from schemas.tcpinfo_columns import COLUMN_TABLE, FIRST_COLUMN_FIELD

    kinds = {
        FieldDescriptor.TYPE_BYTES: "bytes16",
        FieldDescriptor.TYPE_FIXED32: "fixed32",
        FieldDescriptor.TYPE_FIXED64: "fixed64",
    }
    fields: list[Any] = sorted(TcpInfoBatch.DESCRIPTOR.fields, key=lambda f: f.number)
    expected = tuple((f.name, f.number, kinds[f.type]) for f in fields if f.number >= FIRST_COLUMN_FIELD)
    assert expected == COLUMN_TABLE


_U64 = st.integers(0, 2**64 - 1)
_U32 = st.integers(0, 2**32 - 1)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(max_size=20),
    host=st.text(min_size=1, max_size=20),
    u64s=st.lists(_U64, min_size=7, max_size=7),
    u32s=st.lists(_U32, min_size=5, max_size=5),
    errors=st.dictionaries(st.text(max_size=8), _U64, max_size=4),
    cc=st.lists(st.text(max_size=6), max_size=4),
)
def test_hand_written_header_is_the_runtime_encoding(
    text: str, host: str, u64s: list[int], u32s: list[int], errors: dict[str, int], cc: list[str]
) -> None:
    """encode_header writes the header without the protobuf runtime: byte for byte the runtime's output."""
    from schemas.tcpinfo_encode import encode_header as hand

    common: dict[str, Any] = {
        "host": host,
        "pop": text,
        "netns": text[::-1],
        "collector_version": text,
        "cc_names": cc,
        **dict(zip(("run_id", "poll_start_ns", "poll_end_ns", "sockets_seen"), u64s, strict=False)),
        **dict(zip(("sockets_exported", "sockets_filtered"), u64s[4:], strict=False)),
        "client_prefix_len_v4": u32s[0],
        "client_prefix_len_v6": u32s[1],
    }
    h = BatchHeader(**common, parse_errors=errors)
    msg = TcpInfoBatch(
        **common,
        schema_version=SCHEMA_VERSION,
        sequence=u64s[6],
        batch_index=u32s[2],
        batch_count=u32s[3],
        row_count=u32s[4],
    )
    for kind, count in sorted(errors.items()):
        if count:
            msg.parse_errors.add(kind=kind, count=count)
    got = hand(h, sequence=u64s[6], batch_index=u32s[2], batch_count=u32s[3], row_count=u32s[4])
    assert got == msg.SerializeToString()


def test_collector_never_loads_the_protobuf_runtime() -> None:
    """The poller (the collector's encode path) imports batch_encode, not the runtime-backed codec."""
    import subprocess
    import sys

    code = (
        "import sys, collector.telemetry.poller; "
        "print('google.protobuf' in sys.modules, 'schemas.tcpinfo_pb2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_extreme_values_round_trip_and_too_wide_values_are_refused() -> None:
    cols = {
        "rtt": np.array([0, 1, 2**31, 2**32 - 1], dtype=np.uint64),
        "bytes_acked": np.array([0, 2**32, 2**63, 2**64 - 1], dtype=np.uint64),
        "snd_cwnd": np.array([0, 1, 2, 3], dtype=np.int64),
    }
    d = decode_batch(encode_batches(cols, header(), first_sequence=0)[0])
    assert d.columns["rtt"].tolist() == [0, 1, 2**31, 2**32 - 1]
    assert d.columns["bytes_acked"].tolist() == [0, 2**32, 2**63, 2**64 - 1]
    assert d.columns["snd_cwnd"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="does not fit column rtt"):
        encode_batches({"rtt": np.array([2**32], dtype=np.uint64)}, header(), first_sequence=0)
    with pytest.raises(ValueError, match="negative value"):
        encode_batches({"rtt": np.array([-1], dtype=np.int64)}, header(), first_sequence=0)


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
    # only the last batch of a poll carries batch_count and the poll totals
    assert [d.batch_count for d in decoded] == [0] * (len(msgs) - 1) + [len(msgs)]
    last = decoded[-1]
    assert (last.sockets_seen, last.sockets_exported, last.poll_end_ns) == (99, 7, 20)
    assert last.parse_errors == {"truncated": 2}
    assert all(not d.sockets_seen and not d.parse_errors and not d.poll_end_ns for d in decoded[:-1])
    assert sum(d.row_count for d in decoded) == rows
    for d, m in zip(decoded, msgs, strict=True):
        assert d.row_count <= max_rows
        assert d.row_count == 1 or len(m) <= max_bytes + 200  # header allowance
        assert (d.host, d.pop, d.netns, d.run_id, d.poll_start_ns) == ("edge1", "fra", "ns1", 123, 10)
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
        "schema_version": mutate(lambda m: setattr(m, "schema_version", 1)),
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


# ---------------------------------------------------------------- the decoder on any valid encoding
#
# The oracle is the protobuf runtime (an independent parser of the same .proto)
# plus the contract's checks, written out plainly here.


def runtime_decode(data: bytes) -> tuple[TcpInfoBatch, dict[str, np.ndarray]]:
    """Reference: parse with the protobuf runtime, validate like the contract says; ValueError if bad."""
    msg = TcpInfoBatch.FromString(data)  # raises DecodeError
    rows = msg.row_count
    if msg.schema_version != SCHEMA_VERSION:
        raise ValueError("schema_version")
    if msg.batch_count and msg.batch_index >= msg.batch_count:
        raise ValueError("batch_index")
    cols: dict[str, np.ndarray] = {}
    for name in COLUMNS:
        value = getattr(msg, name)
        if name in ADDRESS_COLUMNS:
            if len(value) != 16 * rows:
                raise ValueError(name)
            cols[name] = np.frombuffer(value, dtype=np.uint8).reshape(rows, 16)
        else:
            if len(value) != rows:
                raise ValueError(name)
            cols[name] = np.array(value, dtype=COLUMN_DTYPES[name])
    if rows and int(cols["cc_index"].max()) >= len(msg.cc_names):
        raise ValueError("cc_index")
    if rows and int(cols["client_prefix_len"].max()) > 128:
        raise ValueError("client_prefix_len")
    return msg, cols


def assert_same_as_runtime(data: bytes) -> None:
    try:
        ref_msg, ref_cols = runtime_decode(data)
    except Exception as exc:  # the runtime refuses: so must we, with our error type
        with pytest.raises(BatchDecodeError):
            decode_batch(data)
        assert isinstance(exc, DecodeError | ValueError | RuntimeError), exc
        return
    got = decode_batch(data)
    assert (got.host, got.sequence, got.run_id, got.row_count, got.cc_names) == (
        ref_msg.host,
        ref_msg.sequence,
        ref_msg.run_id,
        ref_msg.row_count,
        list(ref_msg.cc_names),
    )
    assert got.parse_errors == {e.kind: e.count for e in ref_msg.parse_errors}
    for name in COLUMNS:
        assert got.columns[name].dtype == COLUMN_DTYPES[name], name
        np.testing.assert_array_equal(got.columns[name], ref_cols[name], err_msg=name)


def split_fields(data: bytes) -> list[bytes]:
    """The top-level fields of a message, each as its raw bytes (test helper, assumes valid input)."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _read(data, pos)
        wire = tag & 7
        if wire == 0:
            _, pos = _read(data, pos)
        elif wire == 2:
            n, pos = _read(data, pos)
            pos += n
        else:
            pos += 8 if wire == 1 else 4
        out.append(data[start:pos])
    return out


def _read(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def field_number(raw: bytes) -> int:
    return _read(raw, 0)[0] >> 3


def good_message(rows: int = 40, seed: int = 2) -> bytes:
    cols = random_columns(np.random.default_rng(seed), rows)
    return encode_batches(cols, header(), first_sequence=9)[0]


def packed(field: int, values: list[int]) -> bytes:
    """A packed fixed32 field."""
    payload = b"".join(struct.pack("<I", v) for v in values)
    return encode_varint(field << 3 | 2) + encode_varint(len(payload)) + payload


def unpacked(field: int, value: int) -> bytes:
    """One fixed32 element written unpacked (wire type 5)."""
    return encode_varint(field << 3 | 5) + struct.pack("<I", value)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 120), seed=st.integers(0, 2**32 - 1))
def test_decoder_matches_protobuf_runtime(rows: int, seed: int) -> None:
    for m in encode_batches(random_columns(np.random.default_rng(seed), rows), header(), 0, max_rows=50):
        assert_same_as_runtime(m)


def test_any_field_order_unknown_fields_and_repeats_decode_like_the_runtime() -> None:
    data = good_message()
    fields = split_fields(data)
    assert b"".join(fields) == data
    rng = np.random.default_rng(7)
    unknown = [
        encode_varint(900 << 3 | 0) + encode_varint(2**40),  # varint
        encode_varint(901 << 3 | 1) + bytes(8),  # fixed64
        encode_varint(902 << 3 | 5) + bytes(4),  # fixed32
        encode_varint(903 << 3 | 2) + b"\x03abc",  # length-delimited
        encode_varint(904 << 3 | 3) + encode_varint(1 << 3 | 0) + b"\x05" + encode_varint(904 << 3 | 4),  # group
    ]
    rtt = TcpInfoBatch.FromString(data).rtt
    rtt_num = TcpInfoBatch.DESCRIPTOR.fields_by_name["rtt"].number
    src_num = TcpInfoBatch.DESCRIPTOR.fields_by_name["src_addr"].number
    without_rtt = [f for f in fields if field_number(f) != rtt_num]
    columns_first = [f for f in fields if field_number(f) >= 32] + [f for f in fields if field_number(f) < 32]
    variants = {
        "reversed": b"".join(reversed(fields)),
        "shuffled": b"".join(fields[i] for i in rng.permutation(len(fields))),
        "header last": b"".join(columns_first),
        **{f"unknown {i}": u + data + u for i, u in enumerate(unknown)},
        "unknown inside body": b"".join(f + (unknown[3] if field_number(f) == 60 else b"") for f in fields),
        # a packed column split in two fields concatenates; written unpacked it is the same values
        "split packed": b"".join(without_rtt) + packed(rtt_num, list(rtt[:15])) + packed(rtt_num, list(rtt[15:])),
        "unpacked": b"".join(without_rtt) + b"".join(unpacked(rtt_num, v) for v in rtt),
        "half unpacked": b"".join(without_rtt)
        + packed(rtt_num, list(rtt[:10]))
        + b"".join(unpacked(rtt_num, v) for v in rtt[10:]),
        # a repeated scalar header field: the last one wins; a bytes column twice: the last one wins
        "header twice": encode_varint(3 << 3 | 2) + b"\x05other" + data,
        "address twice": encode_varint(src_num << 3 | 2) + encode_varint(640) + bytes(640) + data,
        "empty packed first": packed(rtt_num, []) + data,
    }
    for name, variant in variants.items():
        ref_msg, ref_cols = runtime_decode(variant)
        got = decode_batch(variant)
        assert got.host == ref_msg.host, name
        for col in COLUMNS:
            np.testing.assert_array_equal(got.columns[col], ref_cols[col], err_msg=f"{name}: {col}")
        np.testing.assert_array_equal(got.columns["rtt"], np.array(rtt, dtype=np.uint32), err_msg=name)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10**6),
)
def test_damaged_messages_never_crash_and_agree_with_the_runtime(
    seed: int, flips: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(good_message(rows=int(seed % 30), seed=seed))
    for pos, value in flips:
        data[pos % len(data)] = value
    assert_same_as_runtime(bytes(data))
    assert_same_as_runtime(bytes(data[: cut % (len(data) + 1)]))


@given(st.binary(max_size=300))
def test_random_bytes_never_crash(data: bytes) -> None:
    assert_same_as_runtime(data)


def _small_batch(rows: int = 4) -> TcpInfoBatch:
    cols = random_columns(np.random.default_rng(0), rows)
    return TcpInfoBatch.FromString(encode_batches(cols, header(), 5)[0])


def _decode_one_in_group(data: bytes) -> None:
    scanned = scan_batch(data)
    _, bad = decode_all([scanned])
    if bad:
        raise BatchDecodeError(bad[0])


@pytest.mark.parametrize("path", [decode_batch, _decode_one_in_group])
@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda m: setattr(m, "schema_version", 1), "schema_version 1"),
        (lambda m: setattr(m, "row_count", 5), "row_count"),
        (lambda m: setattr(m, "dst_addr", b"\x01" * 15), "dst_addr"),
        (lambda m: m.rtt.append(5), "column rtt has 5 values, row_count is 4"),
        (lambda m: m.cc_index.__setitem__(0, 9), "cc_index 9"),
        (lambda m: m.client_prefix_len.__setitem__(1, 200), "client_prefix_len 200"),
        (lambda m: setattr(m, "batch_index", 3), "batch_index"),
    ],
)
def test_bad_batches_are_rejected_with_a_reason(path: object, mutate: object, reason: str) -> None:
    msg = _small_batch()
    msg.batch_count = 1
    mutate(msg)  # type: ignore[operator]
    with pytest.raises(BatchDecodeError, match=reason):
        path(msg.SerializeToString())  # type: ignore[operator]


def test_bad_batch_in_a_group_only_drops_that_batch_and_order_is_kept() -> None:
    cols = random_columns(np.random.default_rng(4), 600)
    msgs = encode_batches(cols, header(), 0, max_rows=100)
    bad_msg = _small_batch()
    bad_msg.cc_index[0] = 7
    # one good batch re-encoded unpacked, so the runtime parses it inside the group
    odd = TcpInfoBatch.FromString(msgs[3])
    rtt_num = TcpInfoBatch.DESCRIPTOR.fields_by_name["rtt"].number
    values = list(odd.rtt)
    odd.ClearField("rtt")
    odd_data = odd.SerializeToString() + b"".join(unpacked(rtt_num, v) for v in values)
    data = [*msgs[:2], bad_msg.SerializeToString(), msgs[2], odd_data, *msgs[4:]]
    scanned = [scan_batch(m) for m in data]
    assert scanned[4].spans is None and scanned[4].columns is not None  # took the runtime path
    group, bad = decode_all(scanned)
    assert list(bad) == [2] and "cc_index" in bad[2]
    assert int(group.rows.sum()) == 600
    for name in COLUMNS:
        np.testing.assert_array_equal(
            group.columns[name].astype(COLUMN_DTYPES[name]).reshape(cols[name].shape), cols[name], err_msg=name
        )


def test_empty_batch_with_column_data_is_rejected() -> None:
    msg = _small_batch()
    msg.row_count = 0
    msg.ClearField("src_addr")
    msg.ClearField("dst_addr")
    msg.ClearField("client_prefix")
    with pytest.raises(BatchDecodeError, match="row_count is 0"):
        decode_batch(msg.SerializeToString())
