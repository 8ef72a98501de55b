"""Pure ingest pieces: column prep from decoded groups, prefixes, native strings, gaps, files.

The decoder itself (schemas.tcpinfo_decode) is tested in test_collector_codec.py.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.ingest.columns import TCPINFO_TYPES, format_prefix, prefix_column, prepare
from controller.ingest.files import iter_records
from controller.ingest.sequence import SeenBatch, SequenceTracker
from controller.store.native import serialize_block, serialize_column, string_payload
from schemas.tcpinfo_decode import decode_all, decode_batch, scan_batch
from schemas.tcpinfo_encode import encode_varint
from tests.support.ingest_synth import synth_messages


def _messages(rows: int = 3000, seed: int = 3) -> list[bytes]:
    return [m for _, m in synth_messages(rows, rows_per_poll=400, seed=seed, max_bytes=30_000)]


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
    from controller.ingest.columns import StrColumn

    col = StrColumn(np.array([1, 0, 1], dtype=np.int32), ["a", "é" * 100])
    assert (
        string_payload(col).tobytes() == b"\xc8\x01" + "é".encode() * 100 + b"\x01a" + b"\xc8\x01" + "é".encode() * 100
    )


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.text(max_size=40), min_size=1, max_size=12, unique=True),
    codes=st.lists(st.integers(0, 11), max_size=300),
)
def test_native_strings_equal_the_per_row_encoding(values: list[str], codes: list[int]) -> None:
    """The vectorized (padded matrix + mask) path equals varint length + UTF-8 per row."""
    from controller.ingest.columns import StrColumn

    codes = [c % len(values) for c in codes]
    col = StrColumn(np.array(codes, dtype=np.int32), values)
    expected = b"".join(encode_varint(len(values[c].encode())) + values[c].encode() for c in codes)
    assert string_payload(col).tobytes() == expected


def test_native_packet_has_every_column_once_in_order() -> None:
    """serialize_block's parts, in order == header + per-column payloads written one by one."""
    msgs = _messages(900)
    group, _ = decode_all([scan_batch(m) for m in msgs])
    cols, rows = prepare(group)
    block = serialize_block(cols, rows, TCPINFO_TYPES, revision=54413)
    assert block is not None and block.rows == rows
    data = b"".join(block.parts)
    assert len(data) == sum(part.nbytes for part in block.parts)
    head_bytes = 0
    for name, col in cols.items():
        payload = serialize_column(TCPINFO_TYPES[name], col)
        assert payload is not None
        head = bytes([len(name)]) + name.encode() + bytes([len(TCPINFO_TYPES[name])]) + TCPINFO_TYPES[name].encode()
        start = data.index(head, head_bytes) + len(head)  # (no custom-serialization flag before 54454)
        assert data[start : start + len(payload)] == payload, name
        head_bytes = start + len(payload)
    assert head_bytes == len(data)  # nothing after the last column


REPO = Path(__file__).resolve().parents[3]

_REFILL = """
import resource, sys
from dyncc_common.heap import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory(prefault=64 << 20)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(2):  # a loader's cycle: a large buffer filled, freed, then another
    before = faults()
    buf = bytearray(48 << 20)
    buf[::4096] = bytes(len(buf[::4096]))
    del buf
print(faults() - before)
"""


def test_heap_tuning_keeps_large_buffers_resident() -> None:
    """With the tuning a freed 48 MiB buffer's pages are reused (no new page faults); without, refaulted."""
    counts = {}
    for mode in ("default", "tuned"):
        out = subprocess.run(
            [sys.executable, "-c", _REFILL, mode], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
        )
        counts[mode] = int(out.stdout)
    pages = (48 << 20) // 4096
    assert counts["default"] > pages // 2, counts  # glibc mmaps and unmaps the buffer every time
    assert counts["tuned"] < pages // 20, counts


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
