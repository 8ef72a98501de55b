"""NETLINK_SOCK_DIAG sockets and dump requests, with nothing heavier than the stdlib.

Kept free of numpy so `dyncc collect --once` can start its forked dump child
(collector/dump_child.py) before the interpreter imports the parser and the
sinks; collector/netlink_diag.py re-exports everything here.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct

NETLINK_SOCK_DIAG = 4
NLM_F_REQUEST = 0x01
NLM_F_DUMP = 0x300
IPPROTO_TCP = 6
SOCK_DIAG_BY_FAMILY = 20

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

RECV_SIZE = 64 * 1024
RCVBUF = 4 * 1024 * 1024
NETNS_RUN_DIR = "/var/run/netns"

_REQ = struct.Struct("=IHHII BBBB I HH16s16sI8s")


class DumpError(Exception):
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
    path = netns if "/" in netns else f"{NETNS_RUN_DIR}/{netns}"
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
_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    """setns(2) for this thread (os.setns arrives in Python 3.12)."""
    global _libc
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


def open_socket_or_error(netns: str) -> socket.socket:
    """open_diag_socket for a poll ('' = own namespace); every failure is a DumpError."""
    try:
        return open_diag_socket(netns or None)
    except OSError as exc:
        raise DumpError(f"cannot open a sock_diag socket: {exc}") from exc


def list_namespaces(netns: tuple[str, ...] | list[str], all_netns: bool) -> list[str]:
    """Namespaces to dump this poll ('' = the collector's own)."""
    if all_netns:
        try:
            names = sorted(os.listdir(NETNS_RUN_DIR))
        except FileNotFoundError:
            names = []
        return ["", *names]
    return list(netns) or [""]
