"""Pure ingest pieces: the fast decoder agrees with the reference codec, column prep, gaps, files."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest

from collector.batch_codec import BatchDecodeError, BatchHeader, decode_batch, encode_batches
from controller.ingest_columns import format_prefix, prefix_column, prepare
from controller.ingest_decode import decode_all, decode_varints, scan_batch
from controller.ingest_files import iter_records
from controller.ingest_native import serialize_strings
from controller.ingest_sequence import SeenBatch, SequenceTracker
from controller.ingest_synth import synth_columns, synth_messages
from schemas.tcpinfo_pb2 import TcpInfoBatch


def _messages(rows: int = 3000, seed: int = 3) -> list[bytes]:
    return [m for _, m in synth_messages(rows, rows_per_poll=400, seed=seed, max_bytes=30_000)]


def test_fast_decoder_matches_reference_codec() -> None:
    msgs = _messages()
    assert len(msgs) > 5
    group, bad = decode_all([scan_batch(m) for m in msgs])
    assert bad == {}
    offset = 0
    for m in msgs:
        ref = decode_batch(m)
        for name, col in ref.columns.items():
            got = group.columns[name][offset : offset + ref.row_count]
            assert np.array_equal(got.astype(col.dtype), col), name
        offset += ref.row_count
    assert offset == int(group.rows.sum())


def test_varints_of_every_width() -> None:
    values = np.array(
        [0, 1, 127, 128, 300, 2**14, 2**21 - 1, 2**32 - 1, 2**35, 2**63, 2**64 - 1], dtype=np.uint64
    )
    from collector.batch_codec import encode_varints

    for vals in (
        values,
        np.repeat(values, 3),
        np.full(5, 2**64 - 1, dtype=np.uint64),
        np.arange(100, dtype=np.uint64),
    ):
        buf = np.frombuffer(encode_varints(vals), dtype=np.uint8)
        assert np.array_equal(decode_varints(buf, len(vals)), vals)


def _batch(rows: int = 4, **header: object) -> TcpInfoBatch:
    cols = synth_columns(rows, np.random.default_rng(0))
    msg = TcpInfoBatch.FromString(
        encode_batches(cols, BatchHeader(host="h1", pop="p", run_id=7, cc_names=["cubic", "bbr"]), 5)[0]
    )
    for k, v in header.items():
        setattr(msg, k, v)
    return msg


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda m: setattr(m, "schema_version", 2), "schema_version 2"),
        (lambda m: setattr(m, "row_count", 5), "row_count"),
        (lambda m: setattr(m, "dst_addr", b"\x01" * 15), "dst_addr"),
        (lambda m: m.rtt.append(5), "rtt"),
        (lambda m: m.cc_index.__setitem__(0, 9), "cc_index"),
        (lambda m: m.client_prefix_len.__setitem__(1, 200), "client_prefix_len"),
    ],
)
def test_bad_batches_are_rejected_with_a_reason(mutate: object, reason: str) -> None:
    msg = _batch()
    mutate(msg)  # type: ignore[operator]
    data = msg.SerializeToString()
    with pytest.raises(BatchDecodeError, match=reason):
        scanned = scan_batch(data)
        _, bad = decode_all([scanned])
        if bad:
            raise BatchDecodeError(bad[0])


def test_garbage_and_truncated_messages_raise() -> None:
    good = _messages(500)[0]
    for data in (b"\xff\xff\xff garbage", good[: len(good) // 2], good[:-3]):
        with pytest.raises(BatchDecodeError):
            scanned = scan_batch(data)
            _, bad = decode_all([scanned])
            if bad:
                raise BatchDecodeError(bad[0])


def test_bad_batch_in_a_group_only_drops_that_batch() -> None:
    msgs = _messages(2000)
    bad_msg = _batch()
    bad_msg.cc_index[0] = 7
    scanned = [scan_batch(m) for m in msgs[:2]] + [scan_batch(bad_msg.SerializeToString())]
    scanned += [scan_batch(m) for m in msgs[2:]]
    group, bad = decode_all(scanned)
    assert list(bad) == [2] and "cc_index" in bad[2]
    assert int(group.rows.sum()) == sum(decode_batch(m).row_count for m in msgs)


def test_unpacked_encoding_falls_back_to_reference() -> None:
    msg = _batch(3)
    data = msg.SerializeToString()
    # field 73 (rtt) written unpacked: three (tag, varint) pairs, after removing the packed one
    packed = TcpInfoBatch()
    packed.rtt.extend(msg.rtt)
    stripped = TcpInfoBatch.FromString(data)
    stripped.ClearField("rtt")
    unpacked = b"".join(bytes([0xC8, 0x04]) + _varint(v) for v in msg.rtt)
    scanned = scan_batch(stripped.SerializeToString() + unpacked)
    group, bad = decode_all([scanned])
    assert not bad
    assert list(group.columns["rtt"]) == list(msg.rtt)


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_prefix_text_v4_mapped_and_v6() -> None:
    v4 = bytes(10) + b"\xff\xff" + bytes([198, 51, 100, 0])
    v6 = ipaddress.IPv6Address("2001:db8:0:100::").packed
    assert format_prefix(v4, 24) == "198.51.100.0/24"
    assert format_prefix(v4, 120) == "198.51.100.0/24"
    assert format_prefix(v6, 56) == "2001:db8:0:100::/56"
    host_bits = bytes(10) + b"\xff\xff" + bytes([198, 51, 100, 77])
    assert format_prefix(host_bits, 24) == "198.51.100.0/24"  # masked, never trusted
    arr = np.frombuffer(v4 + v6 + v4, dtype=np.uint8).reshape(3, 16)
    col = prefix_column(arr, np.array([24, 56, 24], dtype=np.uint64))
    assert list(col.to_objects()) == ["198.51.100.0/24", "2001:db8:0:100::/56", "198.51.100.0/24"]


def test_prepare_fills_header_columns_per_row() -> None:
    msgs = _messages(1200)
    group, _ = decode_all([scan_batch(m) for m in msgs])
    cols, rows = prepare(group)
    assert rows == int(group.rows.sum())
    ref = [decode_batch(m) for m in msgs]
    hosts = np.concatenate([[r.host] * r.row_count for r in ref])
    seqs = np.concatenate([[r.sequence] * r.row_count for r in ref])
    times = np.concatenate([[r.poll_start_ns // 10**9] * r.row_count for r in ref])
    ccs = np.concatenate([r.cc() for r in ref])
    assert list(cols["host"].to_objects()) == list(hosts)  # type: ignore[union-attr]
    assert np.array_equal(np.asarray(cols["sequence"]), seqs)
    assert np.array_equal(np.asarray(cols["time"]), times)
    assert list(cols["cc"].to_objects()) == list(ccs)  # type: ignore[union-attr]
    assert cols["rtt"].dtype == np.dtype("<u4") and cols["family"].dtype == np.uint8  # type: ignore[union-attr]


def test_native_string_serialization() -> None:
    from controller.ingest_columns import StrColumn

    col = StrColumn(np.array([1, 0, 1], dtype=np.int32), ["a", "é" * 100])
    assert (
        serialize_strings(col)
        == b"\xc8\x01" + "é".encode() * 100 + b"\x01a" + b"\xc8\x01" + "é".encode() * 100
    )


def test_sequence_gaps() -> None:
    t = SequenceTracker()
    seen = [SeenBatch("h", 1, s, "p", 0) for s in (1, 2, 5, 6)]
    gaps, upd = t.plan(seen)
    assert [(g.from_sequence, g.to_sequence, g.missing) for g in gaps] == [(3, 4, 2)]
    t.apply(upd)
    # redelivery of old batches is no gap; a new run is not loss
    gaps, upd = t.plan([SeenBatch("h", 1, 3, "p", 0), SeenBatch("h", 2, 1, "p", 0)])
    assert gaps == []
    t.apply(upd)
    # baseline from the ledger for a key this process never saw
    gaps, _ = t.plan([SeenBatch("g", 9, 10, "p", 0)], {("g", 9): 7})
    assert [(g.host, g.from_sequence, g.to_sequence) for g in gaps] == [("g", 8, 9)]
    # plan() alone changes nothing: a retried flush finds the same gap
    assert t.plan([SeenBatch("g", 9, 10, "p", 0)], {("g", 9): 7})[0] == gaps


def test_file_records_and_damaged_tail() -> None:
    a, b = b"first", b"second!"
    data = len(a).to_bytes(4, "big") + a + len(b).to_bytes(4, "big") + b + (1000).to_bytes(4, "big") + b"xx"
    recs = list(iter_records(data, "f"))
    assert [r.value for r in recs[:2]] == [a, b]
    assert [r.offset for r in recs] == [0, 9, 20]
    assert recs[2].value == (1000).to_bytes(4, "big") + b"xx"  # dead-lettered whole
