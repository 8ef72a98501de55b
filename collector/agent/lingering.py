"""Route mode: the open connections a revert leaves on BBR, counted from a sock_diag dump.

A route's `congctl` only sets the congestion control of connections opened after it, so when a
config moves a prefix from BBR back (to CUBIC, or out of the config) the connections already
open to it stay on BBR until they close.  `reverted(before, after)` names those prefixes;
`count_on_bbr(netns, prefixes)` dumps the TCP sockets of network namespace `netns` (None: the
agent's own) with NETLINK_SOCK_DIAG, IPv4 and IPv6, asking for INET_DIAG_CONG, and returns per
prefix how many open connections to an address in it still run "bbr".  An OSError (no
namespace, netlink refused) is the caller's to report.  Read-only: no socket is changed.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections.abc import Iterable, Mapping

from collector.agent.plan import Wanted
from collector.netlink.abi import NLMSG_DONE, NLMSG_ERROR
from collector.netlink.sockdiag import DEFAULT_STATES, EXT_CONG, TCP_STATES, build_request, open_diag_socket, state_mask

__all__ = ["count_on_bbr", "reverted"]

BBR = "bbr"
INET_DIAG_CONG = 4
_NLMSG = struct.Struct("=IHHII")
_DIAG_MSG_SIZE = 72  # struct inet_diag_msg: 4 bytes, inet_diag_sockid (48), 5 x u32
_DST_OFFSET = 4 + 4 + 16  # family, state, timer, retrans; sport, dport; src[16]
_STATES = state_mask([TCP_STATES[s] for s in DEFAULT_STATES])

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def reverted(before: Mapping[str, Wanted], after: Mapping[str, Wanted]) -> set[str]:
    """Prefixes on BBR in `before` that `after` does not put on BBR."""
    return {p for p, w in before.items() if w.algorithm == BBR and (p not in after or after[p].algorithm != BBR)}


def count_on_bbr(netns: str | None, prefixes: Iterable[str]) -> dict[str, int]:
    """Open connections (connected states) on BBR to an address in each prefix: {prefix: count}."""
    nets = {p: ipaddress.ip_network(p, strict=False) for p in prefixes}
    counts = dict.fromkeys(nets, 0)
    if not nets:
        return counts
    sock = open_diag_socket(netns)
    try:
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            for dst in _bbr_destinations(sock, family, seq):
                for prefix, net in nets.items():
                    if dst in net:
                        counts[prefix] += 1
    finally:
        sock.close()
    return counts


def _bbr_destinations(
    sock: socket.socket, family: int, seq: int
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The peer address of every socket of `family` whose congestion control is bbr."""
    sock.sendall(build_request(family, _STATES, EXT_CONG, seq))
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    while True:
        data = sock.recv(1 << 16)
        offset = 0
        while offset + _NLMSG.size <= len(data):
            length, kind, _, _, _ = _NLMSG.unpack_from(data, offset)
            if length < _NLMSG.size:
                raise OSError(f"sock_diag: bad netlink message length {length}")
            if kind == NLMSG_DONE:
                return found
            if kind == NLMSG_ERROR:
                (err,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
                raise OSError(-err, f"sock_diag dump refused: {errno.errorcode.get(-err, err)}")
            body = offset + _NLMSG.size
            if _cong(data, body + _DIAG_MSG_SIZE, offset + length) == BBR:
                found.append(_peer(data, body))
            offset += (length + 3) & ~3


def _peer(data: bytes, body: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    family = data[body]
    raw = data[body + _DST_OFFSET : body + _DST_OFFSET + 16]
    if family == socket.AF_INET:
        return ipaddress.IPv4Address(raw[:4])
    addr = ipaddress.IPv6Address(raw)
    return addr.ipv4_mapped or addr  # a dual-stack socket's IPv4 peer is that IPv4 address


def _cong(data: bytes, start: int, end: int) -> str:
    """The INET_DIAG_CONG attribute of one message ('' when absent)."""
    while start + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, start)
        if length < 4:
            break
        if kind == INET_DIAG_CONG:
            return data[start + 4 : start + length].split(b"\0", 1)[0].decode("ascii", "replace")
        start += (length + 3) & ~3
    return ""
