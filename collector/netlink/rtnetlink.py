"""Minimal rtnetlink route codec for the edge agent (pure, no I/O).

pyroute2's generic message classes are too slow for 10k-prefix applies
(docs/performance.md), so the few message
shapes the agent needs are encoded and parsed here with precompiled structs on
memoryviews:

- `encode_route(...)`: RTM_NEWROUTE / RTM_DELROUTE for one prefix;
- `encode_dump(...)`: RTM_GETROUTE dump request (strict-check filters);
- `iter_messages(buf)`: split a receive buffer into netlink messages;
- `parse_route(payload)`: an rtmsg + the attributes the agent cares about;
- `parse_error(payload)`: errno and extended-ack text of an NLMSG_ERROR.

Lengths from the wire are never trusted: a malformed message ends the walk of
its buffer (counted by the caller), it never raises.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from collector.netlink.abi import (
    NLM_F_ACK,
    NLM_F_ACK_TLVS,
    NLM_F_CAPPED,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSGERR_ATTR_MSG,
    NLMSGHDR,
)

# Kernel ABI constants (linux/rtnetlink.h; the generic netlink ones are in collector.netlink.abi).
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
RTM_GETROUTE = 26
RTMGRP_IPV4_ROUTE = 0x40
RTMGRP_IPV6_ROUTE = 0x400

RTA_DST = 1
RTA_SRC = 2
RTA_OIF = 4
RTA_GATEWAY = 5
RTA_PRIORITY = 6
RTA_PREFSRC = 7
RTA_METRICS = 8
RTA_MULTIPATH = 9
RTA_TABLE = 15
RTA_VIA = 18
RTA_ENCAP = 22
RTA_NH_ID = 30

RTAX_LOCK = 1
RTAX_FEATURES = 12
RTAX_CC_ALGO = 16
CC_ALGO_LOCK_BIT = 1 << RTAX_CC_ALGO

RT_TABLE_MAIN = 254
RTN_UNICAST = 1
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_NOWHERE = 255
RTM_F_CLONED = 0x200

RTN_NAMES = {
    0: "unspec",
    1: "unicast",
    2: "local",
    3: "broadcast",
    4: "anycast",
    5: "multicast",
    6: "blackhole",
    7: "unreachable",
    8: "prohibit",
    9: "throw",
    10: "nat",
    11: "xresolve",
}

RTMSG = struct.Struct("=BBBBBBBBI")
RTATTR = struct.Struct("=HH")
U32 = struct.Struct("=I")
I32 = struct.Struct("=i")
_ADDR_LEN: dict[int, int] = {socket.AF_INET: 4, socket.AF_INET6: 16}


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attr(kind: int, value: bytes) -> bytes:
    length = RTATTR.size + len(value)
    return RTATTR.pack(length, kind) + value + b"\0" * (_align(length) - length)


@dataclass(frozen=True)
class RouteRecord:
    """One route as dumped by the kernel (only the fields the agent uses)."""

    family: int
    dst: str  # network address ("0.0.0.0" / "::" for a default route)
    dst_len: int
    table: int
    proto: int
    scope: int
    rtype: int
    flags: int = 0
    tos: int = 0
    src_len: int = 0
    gateway: str | None = None
    oif: int | None = None
    prefsrc: str | None = None
    priority: int | None = None
    nh_id: int | None = None
    metrics: tuple[tuple[int, int], ...] = ()  # numeric RTAX_* except LOCK and CC_ALGO
    lock: int = 0  # RTAX_LOCK bits
    cc_algo: str | None = None
    unsupported: tuple[str, ...] = field(default=())  # multipath / via / encap present

    @property
    def prefix(self) -> str:
        return f"{self.dst}/{self.dst_len}"


def encode_route(
    seq: int,
    msg_type: int,
    flags: int,
    *,
    family: int,
    dst: str,
    dst_len: int,
    proto: int,
    table: int = RT_TABLE_MAIN,
    scope: int = RT_SCOPE_UNIVERSE,
    rtype: int = RTN_UNICAST,
    gateway: str | None = None,
    oif: int | None = None,
    prefsrc: str | None = None,
    priority: int | None = None,
    nh_id: int | None = None,
    metrics: tuple[tuple[int, int], ...] = (),
    lock: int = 0,
    cc_algo: str | None = None,
) -> bytes:
    """One RTM_NEWROUTE / RTM_DELROUTE request with NLM_F_ACK."""
    parts = [_attr(RTA_DST, socket.inet_pton(family, dst)), _attr(RTA_TABLE, U32.pack(table))]
    if nh_id is not None:
        parts.append(_attr(RTA_NH_ID, U32.pack(nh_id)))
    if oif is not None:
        parts.append(_attr(RTA_OIF, U32.pack(oif)))
    if gateway is not None:
        parts.append(_attr(RTA_GATEWAY, socket.inet_pton(family, gateway)))
    if prefsrc is not None:
        parts.append(_attr(RTA_PREFSRC, socket.inet_pton(family, prefsrc)))
    if priority is not None:
        parts.append(_attr(RTA_PRIORITY, U32.pack(priority)))
    nested = [_attr(kind, U32.pack(value)) for kind, value in metrics]
    if lock:
        nested.append(_attr(RTAX_LOCK, U32.pack(lock)))
    if cc_algo is not None:
        nested.append(_attr(RTAX_CC_ALGO, cc_algo.encode("ascii") + b"\0"))
    if nested:
        parts.append(_attr(RTA_METRICS, b"".join(nested)))
    body = RTMSG.pack(family, dst_len, 0, 0, min(table, 255), proto, scope, rtype, 0) + b"".join(parts)
    header = NLMSGHDR.pack(NLMSGHDR.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_ACK | flags, seq, 0)
    return header + body


def encode_dump(seq: int, family: int, *, table: int = 0, proto: int = 0) -> bytes:
    """RTM_GETROUTE dump; table/proto filter in the kernel when strict checking is on."""
    attrs = _attr(RTA_TABLE, U32.pack(table)) if table else b""
    body = RTMSG.pack(family, 0, 0, 0, min(table, 255), proto, 0, 0, 0) + attrs
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def iter_messages(buf: memoryview) -> Iterator[tuple[int, int, int, memoryview]]:
    """Yield (type, flags, seq, payload) per message; stop at the first malformed header."""
    offset, end = 0, len(buf)
    while offset + NLMSGHDR.size <= end:
        length, msg_type, flags, seq, _pid = NLMSGHDR.unpack_from(buf, offset)
        if length < NLMSGHDR.size or offset + length > end:
            return
        yield msg_type, flags, seq, buf[offset + NLMSGHDR.size : offset + length]
        offset += _align(length)


def _iter_attrs(buf: memoryview) -> Iterator[tuple[int, memoryview]]:
    offset, end = 0, len(buf)
    while offset + RTATTR.size <= end:
        length, kind = RTATTR.unpack_from(buf, offset)
        if length < RTATTR.size or offset + length > end:
            return
        yield kind & 0x3FFF, buf[offset + RTATTR.size : offset + length]
        offset += _align(length)


def _addr(family: int, value: memoryview) -> str | None:
    if len(value) != _ADDR_LEN.get(family, -1):
        return None
    return socket.inet_ntop(family, bytes(value))


def parse_route(payload: memoryview) -> RouteRecord | None:
    """An RTM_NEWROUTE payload -> RouteRecord, or None if malformed / not IPv4/IPv6."""
    if len(payload) < RTMSG.size:
        return None
    family, dst_len, src_len, tos, table, proto, scope, rtype, flags = RTMSG.unpack_from(payload, 0)
    if family not in _ADDR_LEN:
        return None
    dst: str | None = "0.0.0.0" if family == socket.AF_INET else "::"
    gateway = prefsrc = None
    oif = priority = nh_id = None
    metrics: list[tuple[int, int]] = []
    lock = 0
    cc_algo = None
    unsupported: list[str] = []
    for kind, value in _iter_attrs(payload[RTMSG.size :]):
        if kind == RTA_DST:
            dst = _addr(family, value)
        elif kind == RTA_TABLE and len(value) == 4:
            table = U32.unpack_from(value)[0]
        elif kind == RTA_OIF and len(value) == 4:
            oif = U32.unpack_from(value)[0]
        elif kind == RTA_GATEWAY:
            gateway = _addr(family, value)
        elif kind == RTA_PREFSRC:
            prefsrc = _addr(family, value)
        elif kind == RTA_PRIORITY and len(value) == 4:
            priority = U32.unpack_from(value)[0]
        elif kind == RTA_NH_ID and len(value) == 4:
            nh_id = U32.unpack_from(value)[0]
        elif kind == RTA_METRICS:
            for mkind, mvalue in _iter_attrs(value):
                if mkind == RTAX_CC_ALGO:
                    cc_algo = bytes(mvalue).split(b"\0", 1)[0].decode("ascii", "replace")
                elif len(mvalue) == 4 and mkind == RTAX_LOCK:
                    lock = U32.unpack_from(mvalue)[0]
                elif len(mvalue) == 4:
                    metrics.append((mkind, U32.unpack_from(mvalue)[0]))
        elif kind == RTA_MULTIPATH:
            unsupported.append("multipath")
        elif kind == RTA_VIA:
            unsupported.append("via")
        elif kind == RTA_ENCAP:
            unsupported.append("encap")
        elif kind == RTA_SRC:
            unsupported.append("source-specific")
    if dst is None:
        return None
    return RouteRecord(
        family=family,
        dst=dst,
        dst_len=dst_len,
        table=table,
        proto=proto,
        scope=scope,
        rtype=rtype,
        flags=flags,
        tos=tos,
        src_len=src_len,
        gateway=gateway,
        oif=oif,
        prefsrc=prefsrc,
        priority=priority,
        nh_id=nh_id,
        metrics=tuple(sorted(metrics)),
        lock=lock,
        cc_algo=cc_algo,
        unsupported=tuple(unsupported),
    )


def parse_error(payload: memoryview, flags: int) -> tuple[int, str]:
    """NLMSG_ERROR payload -> (errno, extended-ack message or ''); errno 0 is a plain ack."""
    if len(payload) < I32.size:
        return -1, "truncated netlink error"
    error = -I32.unpack_from(payload, 0)[0]
    text = ""
    if flags & NLM_F_ACK_TLVS:
        if flags & NLM_F_CAPPED:
            tlv_start = I32.size + NLMSGHDR.size
        else:
            if len(payload) < I32.size + NLMSGHDR.size:
                return error, text
            tlv_start = I32.size + U32.unpack_from(payload, I32.size)[0]
        for kind, value in _iter_attrs(payload[tlv_start:]):
            if kind == NLMSGERR_ATTR_MSG:
                text = bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    return error, text
