"""The agent's rtnetlink codec: requests round-trip through the parser; malformed input never raises."""

from __future__ import annotations

import socket
import struct

from hypothesis import given
from hypothesis import strategies as st

from collector.netlink.abi import NLM_F_ACK_TLVS, NLM_F_CAPPED, NLMSGHDR
from collector.netlink.rtnetlink import (
    CC_ALGO_LOCK_BIT,
    RTM_NEWROUTE,
    encode_route,
    iter_messages,
    parse_error,
    parse_route,
)


def test_route_round_trip_v4_and_v6() -> None:
    data = encode_route(
        7,
        RTM_NEWROUTE,
        0,
        family=socket.AF_INET,
        dst="198.51.100.0",
        dst_len=24,
        proto=250,
        gateway="192.0.2.1",
        oif=3,
        prefsrc="192.0.2.2",
        metrics=((2, 1400),),
        lock=CC_ALGO_LOCK_BIT,
        cc_algo="bbr",
    )
    ((msg_type, _flags, seq, payload),) = list(iter_messages(memoryview(data)))
    assert (msg_type, seq) == (RTM_NEWROUTE, 7)
    rec = parse_route(payload)
    assert rec is not None
    assert (rec.prefix, rec.gateway, rec.oif, rec.prefsrc, rec.proto, rec.table) == (
        "198.51.100.0/24",
        "192.0.2.1",
        3,
        "192.0.2.2",
        250,
        254,
    )
    assert (rec.metrics, rec.lock, rec.cc_algo) == (((2, 1400),), CC_ALGO_LOCK_BIT, "bbr")
    data6 = encode_route(
        8,
        RTM_NEWROUTE,
        0,
        family=socket.AF_INET6,
        dst="2001:db8:100::",
        dst_len=56,
        proto=250,
        gateway="2001:db8:1::1",
        priority=1024,
        nh_id=None,
        cc_algo="cubic",
    )
    rec6 = parse_route(next(iter_messages(memoryview(data6)))[3])
    assert rec6 is not None
    assert (rec6.prefix, rec6.priority, rec6.cc_algo, rec6.lock) == ("2001:db8:100::/56", 1024, "cubic", 0)


def test_several_messages_in_one_buffer_and_truncation() -> None:
    a = encode_route(1, RTM_NEWROUTE, 0, family=socket.AF_INET, dst="198.51.100.0", dst_len=24, proto=250)
    b = encode_route(2, RTM_NEWROUTE, 0, family=socket.AF_INET, dst="203.0.113.0", dst_len=24, proto=250)
    assert [m[2] for m in iter_messages(memoryview(a + b))] == [1, 2]
    assert [m[2] for m in iter_messages(memoryview(a + b[:-3]))] == [1]  # truncated second: dropped


def test_parse_error_with_extended_ack() -> None:
    text = b"Nexthop has invalid gateway\0"
    tlv = struct.pack("=HH", 4 + len(text), 1) + text + b"\0" * (-len(text) % 4)
    payload = struct.pack("=i", -101) + NLMSGHDR.pack(16, RTM_NEWROUTE, 0, 1, 0) + tlv
    flags = NLM_F_ACK_TLVS | NLM_F_CAPPED
    assert parse_error(memoryview(payload), flags) == (101, "Nexthop has invalid gateway")
    assert parse_error(memoryview(struct.pack("=i", 0)), 0) == (0, "")
    assert parse_error(memoryview(b"\x01"), 0)[0] == -1


@given(st.binary(max_size=300))
def test_garbage_never_raises(blob: bytes) -> None:
    for _t, flags, _s, payload in iter_messages(memoryview(blob)):
        parse_route(payload)
        parse_error(payload, flags)
    parse_route(memoryview(blob))
