"""diag_parse on synthetic netlink replies: layouts by length, attributes, and hostile input."""

from __future__ import annotations

import socket

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.netlink.attr_tcp_info import FIELDS, TCP_INFO_MAX, present_fields
from collector.netlink.sockdiag import may_end_dump, walk_messages
from collector.netlink.sockdiag_parse import ERROR_KINDS, PAD, ErrorCounts, walk_datagrams
from tests.support.collector_msgs import diag_msg, done_msg, error_msg, tcp_info
from tests.support.netlink_msgs import parse_datagrams

VALUES = {name: (i * 7919 + 13) % (1 << min(8 * size, 31)) for i, (name, _, size) in enumerate(FIELDS)}
VALUES.update(snd_wscale=7, rcv_wscale=9, app_limited=1)


def test_fields_and_attributes_decoded() -> None:
    msgs = [
        diag_msg(info=tcp_info(VALUES), cc="bbr", bbr=((5 << 32) + 1234, 77, 739, 512), cookie=10),
        diag_msg(
            family=socket.AF_INET6,
            src="2001:db8::1",
            dst="2001:db8:0:12::2",
            sport=80,
            dport=5555,
            info=tcp_info(VALUES),
            cc="cubic",
            bbr=None,
            cookie=11,
            state=8,
        ),
        diag_msg(
            family=socket.AF_INET6,
            src="::ffff:203.0.113.1",
            dst="::ffff:203.0.113.9",
            info=tcp_info(VALUES),
            cc="dctcp",
            cookie=12,
            skmem=None,
        ),
    ]
    errors = ErrorCounts()
    parsed, done = parse_datagrams([b"".join(msgs), done_msg()], errors, seq=1, pid=0)
    assert done and parsed.rows == 3 and not +errors
    c = parsed.columns
    for name, _, _ in FIELDS:
        assert c[name].tolist() == [VALUES[name]] * 3, name
    assert c["snd_wscale"].tolist() == [7] * 3 and c["rcv_wscale"].tolist() == [9] * 3
    assert c["app_limited"].tolist() == [1] * 3
    assert [parsed.cc_names[i] for i in c["cc_index"]] == ["bbr", "cubic", "dctcp"]
    assert c["has_bbr_info"].tolist() == [1, 0, 0]
    assert c["bbr_bw"].tolist() == [(5 << 32) + 1234, 0, 0]
    assert c["bbr_min_rtt"].tolist() == [77, 0, 0] and c["bbr_pacing_gain"].tolist() == [739, 0, 0]
    assert c["skmem_rcvbuf"].tolist() == [2, 2, 0] and c["skmem_drops"].tolist() == [9, 9, 0]
    assert c["family"].tolist() == [2, 10, 10]
    assert c["state"].tolist() == [1, 8, 1]
    assert c["src_port"].tolist() == [443, 80, 443] and c["dst_port"].tolist() == [40000, 5555, 40000]
    assert c["cookie"].tolist() == [10, 11, 12]
    assert bytes(c["src_addr"][0]) == socket.inet_pton(socket.AF_INET6, "::ffff:198.51.100.1")
    assert bytes(c["dst_addr"][1]) == socket.inet_pton(socket.AF_INET6, "2001:db8:0:12::2")
    assert bytes(c["dst_addr"][2]) == socket.inet_pton(socket.AF_INET6, "::ffff:203.0.113.9")
    assert c["tcp_info_len"].tolist() == [248] * 3


def test_every_kernel_layout_by_length() -> None:
    # 4.15 sends 192 bytes, 4.19 224, 5.4 232, 6.2 240, 6.7 248, 6.18 280
    for length in (104, 192, 224, 232, 240, 248, 280):
        errors = ErrorCounts()
        parsed, _ = parse_datagrams([diag_msg(info=tcp_info(VALUES, length)) + done_msg()], errors)
        c = parsed.columns
        present = set(present_fields(length))
        assert c["tcp_info_len"].tolist() == [length]
        for name, off, size in FIELDS:
            want = VALUES[name] if off + size <= min(length, TCP_INFO_MAX) else 0
            assert c[name].tolist() == [want], (length, name)
            assert (name in present) == (off + size <= length)


def test_missing_info_and_bad_cc_are_counted() -> None:
    errors = ErrorCounts()
    msgs = diag_msg(info=None, cc=None) + diag_msg(info=tcp_info(VALUES), cc="bad name")
    parsed, _ = parse_datagrams([msgs + done_msg()], errors)
    assert parsed.rows == 2
    assert errors["missing_tcp_info"] == 1 and errors["bad_cc_name"] == 1
    assert parsed.columns["tcp_info_len"].tolist() == [0, 248]
    assert parsed.columns["rtt"].tolist() == [0, VALUES["rtt"]]
    assert [parsed.cc_names[i] for i in parsed.columns["cc_index"]] == ["", ""]


def test_header_checks_counted() -> None:
    errors = ErrorCounts()
    msgs = (
        diag_msg(seq=5)
        + diag_msg(seq=1, pid=99)
        + diag_msg(family=7)
        + diag_msg(flags=2 | 0x10)
        + diag_msg(extra=b"\x02\x00\x01\x00")  # attribute with nla_len 2
    )
    parsed, _ = parse_datagrams([msgs, error_msg(22)], errors, seq=1, pid=0)
    assert errors["seq_mismatch"] == 1 and errors["pid_mismatch"] == 1 and errors["bad_family"] == 1
    assert errors["dump_interrupted"] == 1 and errors["bad_attribute"] == 1
    assert errors["netlink_error"] == 1
    assert parsed.rows == 2


def test_walkers_agree_and_detect_the_end() -> None:
    body = b"".join(diag_msg(cookie=i, info=tcp_info(VALUES)) for i in range(5))
    for tail, done, err in ((done_msg(), True, 0), (done_msg(status=-4), True, 4), (b"", False, 0)):
        data = body + tail
        scalar = walk_messages(data, 0, len(data))
        buf = data + bytes(PAD)
        vec = walk_datagrams(buf, np.array([0]), np.array([len(data)]), ErrorCounts())
        assert sorted(vec.offsets.tolist()) == scalar.offsets and len(scalar.offsets) == 5
        assert (vec.done, vec.error) == (scalar.done, scalar.error) == (done, err)
        assert may_end_dump(data, 0, len(data)) == done
    assert may_end_dump(error_msg(1), 0, 36)
    assert walk_messages(error_msg(13), 0, 36).error == 13


def _datagrams(draw_bytes: bytes, cut: int) -> list[bytes]:
    return [draw_bytes[:cut], draw_bytes[cut:]]


valid_stream = st.lists(
    st.builds(
        lambda fam, cookie, ln, cc: diag_msg(
            family=fam,
            src="2001:db8::1" if fam == socket.AF_INET6 else "198.51.100.1",
            dst="2001:db8::2" if fam == socket.AF_INET6 else "198.51.100.2",
            cookie=cookie,
            info=tcp_info(VALUES, ln),
            cc=cc,
        ),
        st.sampled_from([socket.AF_INET, socket.AF_INET6]),
        st.integers(0, 2**64 - 1),
        st.sampled_from([0, 3, 104, 192, 248, 300]),
        st.sampled_from(["bbr", "cubic", "x" * 20, ""]),
    ),
    max_size=6,
).map(b"".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=valid_stream,
    junk=st.binary(max_size=300),
    cut=st.integers(0, 4000),
    flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=8),
    mode=st.sampled_from(["truncate", "flip", "junk", "oversize"]),
)
def test_hostile_buffers_never_raise(stream: bytes, junk: bytes, cut: int, flips: list, mode: str) -> None:
    data = bytearray(stream)
    if mode == "truncate":
        data = data[: cut % (len(data) + 1)]
    elif mode == "flip":
        for pos, val in flips:
            if data:
                data[pos % len(data)] = val
    elif mode == "junk":
        data = bytearray(junk)
    else:  # a length field claiming more than there is
        if len(data) >= 4:
            data[0:4] = (len(data) + 1 + cut).to_bytes(4, "little")
    errors = ErrorCounts()
    parsed, _ = parse_datagrams([bytes(data), junk], errors)
    assert set(errors) <= set(ERROR_KINDS)
    for col in parsed.columns.values():
        assert col.shape[0] == parsed.rows
    assert all(0 <= i < len(parsed.cc_names) for i in parsed.columns["cc_index"].tolist())
    # the vectorized walker finds exactly what the scalar walker finds
    aligned = bytes(data) + bytes((-len(data)) % 4)
    scalar = walk_messages(aligned, 0, len(data))
    vec = walk_datagrams(aligned + bytes(PAD), np.array([0]), np.array([len(data)]), ErrorCounts())
    assert sorted(vec.offsets.tolist()) == scalar.offsets


def test_each_error_kind_is_reachable() -> None:
    errors = ErrorCounts()
    good = diag_msg(info=tcp_info(VALUES))
    parse_datagrams([b"\x08\x00\x00\x00" + bytes(12)], errors)  # nlmsg_len 8
    parse_datagrams([good[:-4]], errors)  # truncated
    parse_datagrams([b"\x14\x00\x00\x00\x63\x00" + bytes(14)], errors)  # type 99
    parse_datagrams([diag_msg(info=tcp_info(VALUES), bbr=None)[:-4] + bytes(4)], errors)
    parse_datagrams([diag_msg(extra=b"\x14\x00\x10\x00" + bytes(16))], errors)  # short bbr info
    for kind in ("short_message", "truncated_message", "unknown_message_type", "short_bbr_info"):
        assert errors[kind] >= 1, kind
