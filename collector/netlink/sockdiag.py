"""Netlink sock_diag plumbing that needs no numpy: constants, requests, sockets, message walking.

Split from sockdiag_dump / sockdiag_parse so that
`dyncc collect --once` can open its sockets and start the kernel dump in a
helper process (telemetry.prefetch) before the numpy-based parser is imported.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
from collections.abc import Sequence
from typing import Any

from collector.netlink.abi import NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN
from dyncc_common.errors import DynccError

SOCK_DIAG_BY_FAMILY = 20

#: Buffers parsed by sockdiag_parse / anything received into.
Buf = bytes | bytearray | memoryview | mmap.mmap

NETLINK_SOCK_DIAG = 4
IPPROTO_TCP = 6

# idiag_ext bits: 1 << (INET_DIAG_x - 1)
EXT_INFO = 1 << (2 - 1)
EXT_VEGASINFO = 1 << (3 - 1)  # also makes the kernel send INET_DIAG_BBRINFO for bbr sockets
EXT_CONG = 1 << (4 - 1)
EXT_SKMEMINFO = 1 << (7 - 1)
DEFAULT_EXT = EXT_INFO | EXT_VEGASINFO | EXT_CONG | EXT_SKMEMINFO

TCP_STATES = {
    "established": 1, "syn-sent": 2, "syn-recv": 3, "fin-wait-1": 4, "fin-wait-2": 5,
    "time-wait": 6, "close": 7, "close-wait": 8, "last-ack": 9, "listen": 10, "closing": 11,
    "new-syn-recv": 12,
}  # fmt: skip
STATE_NAMES = {v: k for k, v in TCP_STATES.items()}
#: Connected states except LISTEN, TIME_WAIT and SYN_RECV.
DEFAULT_STATES = ("established", "syn-sent", "fin-wait-1", "fin-wait-2", "close-wait", "last-ack", "closing")


def parse_states(items: Any) -> list[int]:
    """State names (repeatable, comma-separated) -> kernel state numbers; ValueError if unknown."""
    states: list[int] = []
    for name in items:
        for part in str(name).split(","):
            key = part.strip().lower().replace("_", "-")
            if key not in TCP_STATES:
                raise ValueError(f"bad state {part!r}: use one of {', '.join(TCP_STATES)}")
            states.append(TCP_STATES[key])
    return states


RECV_SIZE = 64 * 1024
DEFAULT_CHUNK = 8 * 1024 * 1024
RCVBUF = 4 * 1024 * 1024

_REQ = struct.Struct("=IHHII BBBB I HH16s16sI8s")


class DumpError(DynccError):
    """The dump could not be done (netlink error, namespace missing, timeout)."""


class DumpTimeout(DumpError):
    """The per-poll deadline passed during the dump."""


def state_mask(states: tuple[int, ...] | list[int] | frozenset[int]) -> int:
    mask = 0
    for s in states:
        mask |= 1 << s
    return mask


def build_request(family: int, states: int, ext: int, seq: int) -> bytes:
    """nlmsghdr + inet_diag_req_v2 asking for a dump of all TCP sockets of a family."""
    return _REQ.pack(
        _REQ.size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0,
        family, IPPROTO_TCP, ext & 0xFF, 0, states & 0xFFFFFFFF,
        0, 0, bytes(16), bytes(16), 0, b"\xff" * 8,
    )  # fmt: skip


def open_diag_socket(netns: str | None = None) -> socket.socket:
    """A bound NETLINK_SOCK_DIAG socket, created inside `netns` when given."""
    if not netns:
        return _open()
    path = netns if "/" in netns else f"/var/run/netns/{netns}"
    if not os.path.exists(path):
        raise DumpError(f"network namespace {netns!r} does not exist ({path})")
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise DumpError(f"cannot open network namespace {netns!r}: {exc.strerror}") from exc
        try:
            _setns(target)
        except OSError as exc:
            raise DumpError(f"cannot enter network namespace {netns!r}: {exc.strerror}") from exc
        finally:
            os.close(target)
        try:
            return _open()
        finally:
            _setns(own)
    finally:
        os.close(own)


_CLONE_NEWNET = 0x40000000
_libc: Any = None  # ctypes.CDLL, loaded on first use (ctypes is not imported at start-up)


def _setns(fd: int) -> None:
    """setns(2) for this thread (os.setns arrives in Python 3.12)."""
    global _libc
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _open() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.bind((0, 0))
    except OSError:
        sock.close()
        raise
    return sock


class WalkResult:
    """What one received datagram held.

    (A plain class, not a dataclass: this module is imported before a one-shot
    collector forks its dump helper, and dataclasses pulls in inspect.)
    """

    __slots__ = ("done", "error", "interrupted", "lengths", "offsets")

    def __init__(self) -> None:
        self.offsets: list[int] = []  # byte offsets of SOCK_DIAG messages
        self.lengths: list[int] = []
        self.done = False  # NLMSG_DONE seen
        self.error = 0  # errno from NLMSG_ERROR (positive), 0 if none
        self.interrupted = False


def walk_messages(buf: Buf, start: int, end: int) -> WalkResult:
    """Walk the netlink messages in buf[start:end] (one datagram); never raises.

    start must be 4-aligned.  Errors are returned in the result's counters via
    `error`/`interrupted` and by stopping at the first malformed header; the
    caller counts `short_message` / `truncated_message` through `walk_errors`.
    """
    res = WalkResult()
    mv = memoryview(buf)
    end = min(end, len(mv))
    if start % 4 or end <= start:
        return res
    words = mv[: end - (end % 4)].cast("I") if end >= 4 else None
    if words is None:
        return res
    i = start
    offsets, lengths = res.offsets, res.lengths
    while i + NLMSG_HDRLEN <= end:
        w = i >> 2
        length = words[w]
        if length < NLMSG_HDRLEN:
            res.error = res.error or -1  # short header: stop
            break
        if i + length > end:
            res.error = res.error or -2  # truncated: stop
            break
        tf = words[w + 1]
        mtype = tf & 0xFFFF
        if tf & (NLM_F_DUMP_INTR << 16):
            res.interrupted = True
        if mtype == SOCK_DIAG_BY_FAMILY:
            offsets.append(i)
            lengths.append(length)
        elif mtype == NLMSG_DONE:
            res.done = True
            status = words[w + 4] if length >= NLMSG_HDRLEN + 4 else 0
            if status & 0x80000000:  # the dump ended with -errno
                res.error = (1 << 32) - status
            break
        elif mtype == NLMSG_ERROR:
            errno = words[w + 4] if length >= NLMSG_HDRLEN + 4 else 0
            # struct nlmsgerr.error is a negative errno; 0 is an ACK
            signed = errno - (1 << 32) if errno & 0x80000000 else errno
            if signed != 0:
                res.error = abs(signed)
                res.done = True
                break
        else:
            res.error = res.error or -3
        i += (length + 3) & ~3
    return res


def may_end_dump(buf: Buf, start: int, end: int) -> bool:
    """O(1) test whether a datagram can hold NLMSG_DONE / NLMSG_ERROR.

    NLMSG_DONE is the last message of a dump and 20 bytes long (no extended
    ACK is asked for), so it sits in the datagram's last 20 bytes; an error
    reply comes first.  False positives are settled by walk_messages().
    """
    n = end - start
    if n < NLMSG_HDRLEN:
        return True
    first = int.from_bytes(buf[start + 4 : start + 6], "little")
    if first in (NLMSG_DONE, NLMSG_ERROR):
        return True
    if n >= 20:
        tail = end - 20
        if int.from_bytes(buf[tail : tail + 4], "little") == 20 and (
            int.from_bytes(buf[tail + 4 : tail + 6], "little") == NLMSG_DONE
        ):
            return True
    return False


NETNS_RUN_DIR = "/var/run/netns"


def namespaces_to_dump(netns: Sequence[str], all_netns: bool) -> list[str]:
    """Namespaces a poll dumps, in order ('' = the collector's own)."""
    if all_netns:
        try:
            names = sorted(os.listdir(NETNS_RUN_DIR))
        except FileNotFoundError:
            names = []
        return ["", *names]
    return list(netns) or [""]
