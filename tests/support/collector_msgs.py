"""Builders of synthetic NETLINK_SOCK_DIAG replies for the collector's parser tests."""

from __future__ import annotations

import socket
import struct

from collector.netlink.attr_tcp_info import FIELDS
from collector.netlink.sockdiag_parse import INET_DIAG_BBRINFO, INET_DIAG_CONG, INET_DIAG_INFO, INET_DIAG_SKMEMINFO

NLMSG_DONE = 3
NLMSG_ERROR = 2
SOCK_DIAG_BY_FAMILY = 20


def nla(atype: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + bytes((-len(raw)) % 4)


def tcp_info(values: dict[str, int], length: int = 248) -> bytes:
    buf = bytearray(max(length, 248))
    for name, off, size in FIELDS:
        if name in values:
            buf[off : off + size] = values[name].to_bytes(size, "little")
    buf[6] = (values.get("rcv_wscale", 0) << 4) | values.get("snd_wscale", 0)
    buf[7] = values.get("app_limited", 0)
    return bytes(buf[:length])


def diag_msg(
    *,
    family: int = socket.AF_INET,
    state: int = 1,
    src: str = "198.51.100.1",
    dst: str = "198.51.100.2",
    sport: int = 443,
    dport: int = 40000,
    cookie: int = 1,
    uid: int = 0,
    inode: int = 7,
    info: bytes | None = None,
    cc: str | None = "cubic",
    bbr: tuple[int, int, int, int] | None = None,
    skmem: tuple[int, ...] | None = (1, 2, 3, 4, 5, 6, 7, 8, 9),
    seq: int = 1,
    pid: int = 0,
    flags: int = 2,
    extra: bytes = b"",
) -> bytes:
    af = socket.AF_INET6 if family == socket.AF_INET6 else socket.AF_INET
    s = socket.inet_pton(af, src).ljust(16, b"\0")
    d = socket.inet_pton(af, dst).ljust(16, b"\0")
    body = struct.pack("=BBBB", family, state, 0, 0)
    body += struct.pack(">HH", sport, dport) + s + d
    body += struct.pack("=IQ", 0, cookie)
    body += struct.pack("=IIIII", 0, 0, 0, uid, inode)
    attrs = b""
    if skmem is not None:
        attrs += nla(INET_DIAG_SKMEMINFO, struct.pack(f"={len(skmem)}I", *skmem))
    if info is not None:
        attrs += nla(INET_DIAG_INFO, info)
    if cc is not None:
        attrs += nla(INET_DIAG_CONG, cc.encode() + b"\0")
    if bbr is not None:
        bw, min_rtt, pg, cg = bbr
        attrs += nla(INET_DIAG_BBRINFO, struct.pack("=IIIII", bw & 0xFFFFFFFF, bw >> 32, min_rtt, pg, cg))
    payload = body + attrs + extra
    return struct.pack("=IHHII", 16 + len(payload), SOCK_DIAG_BY_FAMILY, flags, seq, pid) + payload


def done_msg(seq: int = 1, pid: int = 0, status: int = 0) -> bytes:
    return struct.pack("=IHHIIi", 20, NLMSG_DONE, 2, seq, pid, status)


def error_msg(errno: int, seq: int = 1, pid: int = 0) -> bytes:
    return struct.pack("=IHHIIi", 36, NLMSG_ERROR, 0, seq, pid, -errno) + bytes(16)
