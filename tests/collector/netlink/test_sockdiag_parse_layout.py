"""The attribute-layout shortcut of parse_messages gives exactly what the lock-step walk gives."""

from __future__ import annotations

import numpy as np
import pytest

from collector.netlink import sockdiag_parse as diag_parse
from collector.netlink.sockdiag import walk_messages
from collector.netlink.sockdiag_parse import ErrorCounts, Parsed
from tests.support.collector_msgs import diag_msg, done_msg, tcp_info
from tests.support.netlink_msgs import parse_datagrams


def _mixed_messages() -> list[bytes]:
    """Many sockets in a few shapes (cubic, bbr, short tcp_info) plus odd ones between them."""
    msgs: list[bytes] = []
    for i in range(300):
        kind = i % 5
        values = {"rtt": 1000 + i, "snd_cwnd": 10 + i % 7, "bytes_acked": i * 1000}
        if kind == 0:
            msgs.append(diag_msg(cookie=i, info=tcp_info(values), cc="cubic"))
        elif kind == 1:
            msgs.append(diag_msg(cookie=i, info=tcp_info(values), cc="bbr", bbr=(i * 10, 50 + i, 256, 512)))
        elif kind == 2:
            msgs.append(diag_msg(cookie=i, info=tcp_info(values, length=232), cc="cubic"))
        elif kind == 3 and i % 3 == 0:
            # same length as a cubic message, different attribute order: must not borrow its layout
            msgs.append(diag_msg(cookie=i, info=tcp_info(values), cc="reno", skmem=None, extra=bytes(40)))
        elif i % 7 == 0:
            # a bad attribute (nla_len 2) after the usual ones
            msgs.append(diag_msg(cookie=i, info=tcp_info(values), extra=b"\x02\x00\x01\x00"))
        else:
            msgs.append(diag_msg(cookie=i, info=tcp_info(values), cc="cubic", skmem=(i, 2, 3, 4, 5, 6, 7, 8, 9)))
    return msgs


def _parse(msgs: list[bytes], tries: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Parsed, ErrorCounts]:
    monkeypatch.setattr(diag_parse, "_LAYOUT_TRIES", tries)
    errors = ErrorCounts()
    parsed, done = parse_datagrams([b"".join(msgs) + done_msg()], errors, seq=1, pid=0)
    assert done
    return parsed, errors


def test_layout_shortcut_matches_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    msgs = _mixed_messages()
    walked, walk_errors = _parse(msgs, 0, monkeypatch)
    fast, fast_errors = _parse(msgs, 4, monkeypatch)
    assert fast.rows == walked.rows == len(msgs)
    assert fast.cc_names == walked.cc_names
    assert set(fast.columns) == set(walked.columns)
    for name, col in walked.columns.items():
        np.testing.assert_array_equal(fast.columns[name], col, err_msg=name)
    assert fast_errors == walk_errors and walk_errors["bad_attribute"] > 0
    # the data really went through: bbr rows carry their BBR info, others none
    bbr = walked.columns["has_bbr_info"].astype(bool)
    assert bbr.sum() == 60 and (walked.columns["bbr_min_rtt"][bbr] > 0).all()


def test_layout_shortcut_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one shape of message the lock-step walk gets nothing to do."""
    calls: list[int] = []
    real = diag_parse.apply_layouts

    def spy(*args: object) -> np.ndarray:
        left = real(*args)  # type: ignore[arg-type]
        calls.append(int(left.size))
        return left

    monkeypatch.setattr(diag_parse, "apply_layouts", spy)
    msgs = [diag_msg(cookie=i, info=tcp_info({"rtt": i})) for i in range(200)]
    parsed, _ = _parse(msgs, 4, monkeypatch)
    assert calls == [0]
    assert parsed.columns["rtt"].tolist() == list(range(200))


def test_tiled_datagrams_walk_like_the_scalar_walker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole datagrams of same-length messages take the shortcut; anything odd is walked as before."""
    msg = [diag_msg(cookie=i, info=tcp_info({"rtt": i})) for i in range(12)]
    grams = [
        b"".join(msg[:4]),  # tiled
        b"".join(msg[4:7]),  # tiled
        msg[7] + diag_msg(cookie=99, info=tcp_info({}), cc="bbr", bbr=(1, 2, 3, 4)),  # mixed lengths
        msg[8] + diag_msg(cookie=98, info=tcp_info({}), flags=2 | 0x10) + msg[9],  # DUMP_INTR in the middle
        msg[10] + msg[11] + done_msg(),  # the end
    ]
    buf = bytearray()
    starts, ends = [], []
    for g in grams:
        starts.append(len(buf))
        buf += g
        ends.append(len(buf))
    buf += bytes(diag_parse.PAD)
    seen: list[list[bool]] = []
    real = diag_parse.tiled_datagrams

    def spy(*args: np.ndarray) -> tuple[np.ndarray, ...]:
        out = real(*args)
        seen.append(out[0].tolist())
        return out

    monkeypatch.setattr(diag_parse, "tiled_datagrams", spy)
    errors = ErrorCounts()
    walk = diag_parse.walk_datagrams(bytes(buf), np.array(starts), np.array(ends), errors)
    assert seen == [[True, True, False, False, False]]
    want_off: list[int] = []
    want_len: list[int] = []
    for s, e in zip(starts, ends, strict=True):
        scalar = walk_messages(bytes(buf), s, e)
        want_off += scalar.offsets
        want_len += scalar.lengths
    assert walk.offsets.tolist() == want_off  # buffer order
    assert walk.lengths.tolist() == want_len
    assert walk.done and walk.interrupted and errors["dump_interrupted"] == 1
