"""The parser's whole-chunk layout path equals the per-message attribute walk, on real captures.

parse_messages takes attribute positions from a message's layout for every
message with the same length and attribute headers (apply_layouts); when all
messages of a chunk share it (the usual dump chunk) the positions are written
for the whole chunk at once.  Hypothesis draws chunks of real SOCK_DIAG
messages from the third-party captures in ../shared/fixtures (read from
there, never copied: README.md there), all of one layout or with others mixed
in and an attribute length garbled, and checks that the columns, the name
table and the error counts equal those of the lock-step attribute walk alone
(layouts switched off).  Skipped when the fixtures folder is absent.
"""

from __future__ import annotations

import struct
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.netlink import attr_bbr_info, sockdiag_parse
from collector.netlink.sockdiag_parse import DIAG_MSG_LEN, PAD, ErrorCounts, Parsed, parse_messages
from tests.support.netlink_msgs import diag_messages, reply_dumps
from tests.support.netlink_pcap import read_pcap

FIXTURES = Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures"
if not FIXTURES.is_dir():
    pytest.skip("third-party netlink fixtures absent: ../shared/fixtures", allow_module_level=True)

#: the captures with enough messages of one layout for the layout path (it needs 64)
CAPTURES = (
    "xtcp2/6_10_3/6_10_3_tcp_1000_sockets.pcap",
    "xtcp2/6_10_3/6_10_3_tcp_2000_sockets_with_netem_bbr_approx_60mins.pcap",
    "xtcp2/5_15_164/5_15_164_tcp_100_sockets.pcap",
    "xtcp2/4_19_319/4_19_319_tcp_100_sockets.pcap",
)


@cache
def capture_messages(rel: str) -> list[bytes]:
    packets = read_pcap((FIXTURES / rel).read_bytes())
    dumps = reply_dumps(p.payload for p in packets if p.protocol == 4)
    return [m for dump in dumps for m in diag_messages(dump)]


def layout_key(msg: bytes) -> tuple[int, ...]:
    """Length and attribute header words: messages with equal keys share a layout."""
    words = [len(msg)]
    rel = DIAG_MSG_LEN
    while rel + 4 <= len(msg):
        (word,) = struct.unpack_from("=I", msg, rel)
        words.append(word)
        nla_len = word & 0xFFFF
        if nla_len < 4:
            break
        rel += (nla_len + 3) & ~3
    return tuple(words)


@cache
def layout_groups(rel: str) -> list[list[bytes]]:
    groups: dict[tuple[int, ...], list[bytes]] = {}
    for msg in capture_messages(rel):
        groups.setdefault(layout_key(msg), []).append(msg)
    return sorted((g for g in groups.values() if len(g) >= 64), key=len, reverse=True)


def parse(msgs: list[bytes], *, layouts: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Parsed, dict[str, int]]:
    padded = [m + bytes(-len(m) % 4) for m in msgs]  # messages start 4-aligned, as in a datagram
    buf = bytearray(b"".join(padded) + bytes(PAD))
    offsets = np.cumsum([0] + [len(m) for m in padded[:-1]], dtype=np.int64)
    lengths = np.array([len(m) for m in msgs], dtype=np.int64)
    errors = ErrorCounts()
    with monkeypatch.context() as m:
        if not layouts:
            m.setattr(sockdiag_parse, "_LAYOUT_TRIES", 0)
        parsed = parse_messages(buf, offsets, lengths, errors)
    return parsed, {k: v for k, v in errors.items() if v}


def assert_same(a: tuple[Parsed, dict[str, int]], b: tuple[Parsed, dict[str, int]]) -> None:
    (pa, ea), (pb, eb) = a, b
    assert pa.rows == pb.rows
    assert pa.cc_names == pb.cc_names
    assert ea == eb
    assert pa.columns.keys() == pb.columns.keys()
    for name, col in pa.columns.items():
        other = pb.columns[name]
        assert col.dtype == other.dtype, name
        np.testing.assert_array_equal(col, other, err_msg=name)


def test_captures_have_uniform_groups() -> None:
    for rel in CAPTURES:
        assert layout_groups(rel), rel


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_layout_path_equals_attribute_walk(data: st.DataObject, monkeypatch: pytest.MonkeyPatch) -> None:
    rel = data.draw(st.sampled_from(CAPTURES), label="capture")
    groups = layout_groups(rel)
    group = groups[data.draw(st.integers(0, len(groups) - 1), label="group")]
    rows = data.draw(st.integers(64, min(len(group), 400)), label="rows")
    start = data.draw(st.integers(0, len(group) - rows), label="start")
    msgs = list(group[start : start + rows])
    if data.draw(st.booleans(), label="mix in other messages"):
        others = capture_messages(rel)
        for _ in range(data.draw(st.integers(1, 5))):
            msgs.insert(data.draw(st.integers(0, len(msgs))), data.draw(st.sampled_from(others)))
    # a message with attributes: a mixed-in one may be a bare header (NLMSG_DONE, an error), and a
    # group of TIME_WAIT sockets has none at all (the kernel sends them without attributes)
    with_attrs = [i for i, m in enumerate(msgs) if len(m) >= DIAG_MSG_LEN + 4]
    if len(with_attrs) > 0 and data.draw(st.booleans(), label="garble an attribute length"):
        k = data.draw(st.sampled_from(with_attrs))
        msg = bytearray(msgs[k])
        rel_attr = DIAG_MSG_LEN + 4 * data.draw(st.integers(0, (len(msg) - DIAG_MSG_LEN) // 4 - 1))
        struct.pack_into("=H", msg, rel_attr, data.draw(st.integers(0, 0xFFFF)))
        msgs[k] = bytes(msg)
    assert_same(parse(msgs, layouts=True, monkeypatch=monkeypatch), parse(msgs, layouts=False, monkeypatch=monkeypatch))


def test_whole_chunk_layout_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of one layout leaves nothing to the walk (the whole-array path ran)."""
    group = layout_groups(CAPTURES[0])[0]
    left: list[int] = []
    real = sockdiag_parse.apply_layouts

    def spy(*args: object) -> np.ndarray:
        todo = real(*args)  # type: ignore[arg-type]
        left.append(int(todo.size))
        return todo

    monkeypatch.setattr(sockdiag_parse, "apply_layouts", spy)
    parsed, errors = parse(group[:200], layouts=True, monkeypatch=monkeypatch)
    assert left == [0] and parsed.rows == 200 and not errors


def test_bbr_columns_without_bbr_sockets_match_the_gathered_ones() -> None:
    """No BBR attribute in the chunk: the zero columns equal what the gather gives (dtypes too)."""
    base = np.zeros(4096, dtype=np.uint8)
    base[64:84] = np.arange(1, 21, dtype=np.uint8)
    errors = ErrorCounts()
    absent = attr_bbr_info.decode(base, np.full(3, -1, dtype=np.int64), np.zeros(3, dtype=np.int64), errors)
    mixed = attr_bbr_info.decode(
        base, np.array([-1, 64, -1], dtype=np.int64), np.array([0, 20, 0], dtype=np.int64), errors
    )
    assert absent.keys() == mixed.keys()
    for name, col in absent.items():
        assert col.dtype == mixed[name].dtype, name
        np.testing.assert_array_equal(col, mixed[name][[0, 0, 2]], err_msg=name)
    assert not errors
